package content_test

import (
	"context"
	"regexp"
	"sync"
	"testing"
	"time"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/apiconv"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// namedLease is an instance's lease of builds (its store) that hands the
// instance's name on leases to holders at its first take.
type namedLease struct {
	content.Lease
	holders chan string
}

func (l namedLease) AcquireBuild(ctx context.Context, recipient, bundleID, holder string, d time.Duration) (string, time.Time, error) {
	select {
	case l.holders <- holder:
	default:
	}
	return l.Lease.AcquireBuild(ctx, recipient, bundleID, holder, d)
}

// An instance asks a domain for a bundle's document and then cannot renew
// its lease (Cosmos DB refuses its writes of the lease, 503). Once the
// lease expires, another instance peeking the bundle takes it and asks the
// domain: the first must have stopped asking before, or the domain builds
// the document for two instances at once.
func TestAnInstanceThatCannotRenewItsLeaseStopsAskingBeforeItExpires(t *testing.T) {
	e := newReuseEnv(t, "azurite", func(f forgetFunc) forgetFunc { return f })
	a := newIDActor(e.ctx, t, e.repo, e.docs, e.store)
	a.save()
	b := a.peek()

	var mu sync.Mutex
	var firstCall context.Context // the first instance's call, as the domain sees it
	asked := make(chan struct{})
	overlapped := false
	provider := contenttest.Start(t, func(_ *messagehubv1.Bundle, calls int) contenttest.Answer {
		mu.Lock()
		defer mu.Unlock()
		if calls == 0 {
			// The first instance's call: held until the hub stops it.
			return contenttest.Answer{Hold: make(chan struct{}), Call: func(ctx context.Context) {
				mu.Lock()
				firstCall = ctx
				mu.Unlock()
				close(asked)
			}}
		}
		if firstCall.Err() == nil {
			overlapped = true
		}
		return contenttest.Document("text/plain", []byte("the document"), 1024)
	})
	// One connection: the first instance's end of its call reaches the
	// domain before any call made after it.
	providers := map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)}
	// The first instance stops asking a third of the lease before it can
	// expire: 5 s for its timer to fire and its cancel to reach the domain,
	// as long as a busy machine can stall it.
	const lease = 15 * time.Second

	holders := make(chan string, 1)
	first := content.NewService(content.Options{
		Providers: providers, Store: e.docs, Lease: namedLease{Lease: e.store, holders: holders}, LeaseDuration: lease,
		Pending: e.repo.IsPending, Holds: e.repo.HoldsBundle,
		AttemptTimeout: time.Hour, RetryMin: time.Hour,
	})
	t.Cleanup(first.Close)
	ctx, cancel := context.WithCancel(e.ctx)
	go func() { _ = buildDocument(ctx, first, b) }()
	<-asked
	cancel() // the peek gives up; the build goes on

	// From now on Cosmos DB refuses every write of the first instance's
	// lease, its renewals included.
	holder := <-holders
	if err := e.srv.AddFaults(cosmostest.Fault{Kind: cosmostest.Refuse503, DB: e.db, Ops: []string{"create", "replace"}, Body: regexp.QuoteMeta(holder)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.srv.ClearFaults(e.db) })

	second := content.NewService(content.Options{
		Providers: providers, Store: e.docs, Lease: e.openCosmos(t), LeaseDuration: lease,
		Pending: e.repo.IsPending, Holds: e.repo.HoldsBundle,
		RetryMin: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond,
	})
	t.Cleanup(second.Close)
	doc, err := second.Document(e.ctx, apiconv.Bundle(b))
	if err != nil {
		t.Fatalf("the other instance's peek: %v", err)
	}
	if got := string(read(t, doc)); got != "the document" {
		t.Fatalf("the other instance served %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if overlapped {
		t.Fatal("the domain was asked by the other instance while the first, whose lease had expired unrenewed, still asked it")
	}
}
