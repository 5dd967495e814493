package content_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/blobstore"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/azuritetest"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// sweptSignal is a store that tells, on swept, of every sweep it applied.
type sweptSignal struct {
	store.Store
	swept chan<- error
}

func (s sweptSignal) ApplySweep(ctx context.Context, sw store.Sweep) error {
	err := s.Store.ApplySweep(ctx, sw)
	select {
	case s.swept <- err:
	default:
	}
	return err
}

// An instance's sweep pass can outlast its lease (the instance stalls),
// and then another instance's pass sweeps meanwhile. The stalled pass read
// a dequeued bundle due; the other pass removes the bundle's document and
// record, which frees the bundle's id, and the actor peeks a later bundle
// under it, whose document is built and stored. When the stalled pass goes
// on, it must not remove that document: the later bundle would be built
// again by its domain, which may answer another document for the same
// bundle.
func TestAPassThatOutlivedItsLeaseSparesTheDocumentOfALaterBundleOfTheID(t *testing.T) {
	ctx := within(t, 2*time.Minute)
	const retention, interval = time.Hour, 50 * time.Millisecond
	srv := cosmostest.Start(t)
	azurite := azuritetest.Start(t)
	var mu sync.Mutex
	ahead := time.Duration(0) // how far the test moved the instances' clocks
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(ahead) }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); ahead += d }
	db := cosmostest.UniqueID("db")
	openStore := func() *cosmos.Store {
		t.Helper()
		s, err := cosmos.Open(ctx, cosmos.Config{Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db,
			Transport: cosmostest.NewHTTPClient(), Retention: retention, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	docs, err := blobstore.Open(ctx, blobstore.Config{ConnectionString: azurite.ConnectionString(), Container: azuritetest.UniqueContainer("stale"), Provision: true})
	if err != nil {
		t.Fatal(err)
	}
	forget := content.Forget(docs)

	// The instance serving the actor: it sweeps only after the test.
	s := openStore()
	repo := hub.New(s, hub.Options{Retention: retention, SweepInterval: time.Hour, Now: now}, nil)
	t.Cleanup(repo.Close)
	a := newIDActor(ctx, t, repo, docs, s)
	id, save, peek, document := a.id, a.save, a.peek, a.document
	a.dequeuedWithItsDocument()
	advance(retention + time.Hour) // the bundle is due

	// The first sweeper takes the lease, reads the bundle due and stalls
	// before removing its document, until the test lets it go on.
	planned, goOn, forgot := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var calls atomic.Int32
	stalled := hub.New(openStore(), hub.Options{Retention: retention, SweepInterval: interval, Now: now,
		ForgetBundles: func(ctx context.Context, recipient string, ids []string, asRead func(context.Context) error) error {
			if calls.Add(1) > 1 {
				return forget(ctx, recipient, ids, asRead)
			}
			close(planned)
			<-goOn
			err := forget(ctx, recipient, ids, asRead)
			forgot <- err
			return err
		}}, nil)
	t.Cleanup(stalled.Close)
	<-planned
	// Its lease runs out; another instance takes it and sweeps the bundle,
	// freeing its id.
	advance(time.Hour)
	swept := make(chan error, 1)
	other := hub.New(sweptSignal{Store: openStore(), swept: swept}, hub.Options{Retention: retention, SweepInterval: interval, Now: now,
		ForgetBundles: forget}, nil)
	t.Cleanup(other.Close)
	if err := <-swept; err != nil {
		t.Fatalf("the sweep of the instance holding the lease now: %v", err)
	}
	// The actor peeks with the id again: a later bundle, with its document.
	save()
	later := peek()
	first := document(later)
	// The stalled pass goes on.
	close(goOn)
	if err := <-forgot; err != nil && !errors.Is(err, store.ErrConflict) {
		t.Fatalf("the stalled pass's removal of the documents: %v", err)
	}
	if got := document(later); got != first {
		t.Fatalf("the bundle %s was served %q, then %q after a pass that outlived its lease went on", id, first, got)
	}
}
