package content_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/blobstore"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/internal/store/pebble"
	"github.com/energydatahub/messagehub/test/azuritetest"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// reuseEnv is a hub with a retention of an hour whose documents are kept
// in a real content store: pebble with a folder (the embedded mode), or
// the Cosmos DB test server with Azurite. Its clock (and the test
// server's, which runs the ttl) moves only when the test says.
type reuseEnv struct {
	ctx   context.Context
	store store.Store
	docs  content.Store
	repo  *hub.Hub
	srv   *cosmostest.Server // nil: pebble
	db    string             // the Cosmos DB database, with the test server
	now   func() time.Time   // the instances' clock
	dir   string             // the documents' folder, with pebble

	mu    sync.Mutex
	ahead time.Duration
}

const reuseRetention = time.Hour

// reuseStores are the content stores (with their stores) the tests run on.
var reuseStores = []string{"directory", "azurite"}

// newReuseEnv opens the environment of kind; forget wraps the removal of
// documents the hub is given.
func newReuseEnv(t *testing.T, kind string, forget func(forgetFunc) forgetFunc) *reuseEnv {
	t.Helper()
	e := &reuseEnv{ctx: within(t, 2*time.Minute)}
	now := func() time.Time { e.mu.Lock(); defer e.mu.Unlock(); return time.Now().Add(e.ahead) }
	e.now = now
	switch kind {
	case "directory":
		s, err := pebble.Open(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		e.dir = t.TempDir()
		docs, err := content.OpenDirStore(e.dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = docs.Close() })
		e.store, e.docs = s, docs
	case "azurite":
		e.srv, e.db = cosmostest.Start(t), cosmostest.UniqueID("db")
		azurite := azuritetest.Start(t)
		s := e.openCosmos(t)
		docs, err := blobstore.Open(e.ctx, blobstore.Config{ConnectionString: azurite.ConnectionString(), Container: azuritetest.UniqueContainer("reuse"), Provision: true})
		if err != nil {
			t.Fatal(err)
		}
		e.store, e.docs = s, docs
	default:
		t.Fatalf("no content store %q", kind)
	}
	e.repo = hub.New(e.store, hub.Options{Retention: reuseRetention, ForgetBundles: forget(content.Forget(e.docs)), Now: now}, nil)
	t.Cleanup(e.repo.Close)
	return e
}

// openCosmos opens a store on the environment's Cosmos DB database, as
// each instance sharing it does.
func (e *reuseEnv) openCosmos(t *testing.T) *cosmos.Store {
	t.Helper()
	s, err := cosmos.Open(e.ctx, cosmos.Config{Endpoint: e.srv.Endpoint, Key: e.srv.Key, Provision: true, Database: e.db,
		Transport: cosmostest.NewHTTPClient(), Retention: reuseRetention, Now: e.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// pastRetention moves the clocks past the retention of what is released
// or dequeued now and makes a retention pass: the records go (the
// sweeper's removal, or Cosmos DB's ttl), freeing their ids.
func (e *reuseEnv) pastRetention(t *testing.T) {
	t.Helper()
	const d = reuseRetention + time.Hour
	if e.srv != nil {
		if err := e.srv.AdvanceClock(d); err != nil {
			t.Fatal(err)
		}
	}
	e.mu.Lock()
	e.ahead += d
	e.mu.Unlock()
	if err := e.repo.SweepNow(e.ctx); err != nil {
		t.Fatal(err)
	}
}

// replaced has the actor dequeue its pending bundle, which retention then
// removes, and peek a later bundle (a notification saved now) under the
// freed id.
func (e *reuseEnv) replaced(t *testing.T, a *idActor) *domain.Bundle {
	t.Helper()
	if err := e.repo.Dequeue(e.ctx, a.recipient, a.id); err != nil {
		t.Fatal(err)
	}
	e.pastRetention(t)
	a.save()
	return a.peek()
}

// building saves a notification, peeks it under the actor's id and has
// service build the bundle's document, returning once its domain is asked
// (asked closes); built has the build's outcome.
func (a *idActor) building(service *content.Service, asked <-chan struct{}) (_ *domain.Bundle, built <-chan error) {
	a.t.Helper()
	a.save()
	b := a.peek()
	out := make(chan error, 1)
	go func() { out <- buildDocument(a.ctx, service, b) }()
	<-asked
	return b, out
}

// nthForget holds the n-th call of the documents' removal (counted from
// 1), before it removes anything, until goOn closes; held closes as it is
// held, and then runs after the removal.
func nthForget(n int32, held chan<- struct{}, goOn <-chan struct{}, then func()) func(forgetFunc) forgetFunc {
	var calls atomic.Int32
	return func(forget forgetFunc) forgetFunc {
		return func(ctx context.Context, recipient string, ids []string, asRead func(context.Context) error) error {
			if calls.Add(1) != n {
				return forget(ctx, recipient, ids, asRead)
			}
			close(held)
			<-goOn
			err := forget(ctx, recipient, ids, asRead)
			then()
			return err
		}
	}
}

// A release removes the bundle's document again after it writes the
// released record. A release that stalls before that removal while the
// released record goes (the retention passes), the actor peeks with the
// id again and the later bundle's document is stored, must not remove that
// document when it goes on: the later bundle would be built again by its
// domain, which may answer another document for it.
func TestAReleaseSparesTheDocumentOfALaterBundleOfTheID(t *testing.T) {
	for _, kind := range reuseStores {
		t.Run(kind, func(t *testing.T) {
			held, goOn := make(chan struct{}), make(chan struct{})
			// The release's first removal is the first call, its second the
			// second.
			e := newReuseEnv(t, kind, nthForget(2, held, goOn, func() {}))
			a := newIDActor(e.ctx, t, e.repo, e.docs, e.store)
			a.save()
			a.document(a.peek())
			released := make(chan error, 1)
			go func() { _, err := e.repo.ReleaseBundle(e.ctx, a.recipient, a.id); released <- err }()
			<-held
			e.pastRetention(t)
			later := a.peek() // the released notification, under the freed id
			first := a.document(later)
			close(goOn)
			if err := <-released; err != nil {
				t.Fatal(err)
			}
			if got := a.document(later); got != first {
				t.Fatalf("the bundle %s was served %q, then %q after a stalled release went on", a.id, first, got)
			}
		})
	}
}

// A release removes the bundle's document while the bundle is pending, as
// it read it. A release that read the bundle pending, then stalled while
// the actor dequeued it, the retention removed it, the actor peeked with
// the id again and the later bundle's document was stored, must not
// remove that document when it goes on, however it ends: the operator's
// call ends at once, or its retry (the stalled removal's check conflicts)
// finds the later bundle pending under the id. Nor must it release that
// later bundle, which the operator never saw: it answers that the bundle
// it read is no longer pending, and the later bundle stays pending.
func TestAReleaseThatReadTheBundleBeforeItWentSparesTheDocumentOfALaterBundleOfTheID(t *testing.T) {
	for _, kind := range reuseStores {
		for _, ends := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/call ends %v", kind, ends), func(t *testing.T) {
				held, goOn := make(chan struct{}), make(chan struct{})
				rctx, cancel := context.WithCancel(context.Background())
				t.Cleanup(cancel)
				then := func() {}
				if ends {
					then = cancel
				}
				e := newReuseEnv(t, kind, nthForget(1, held, goOn, then))
				a := newIDActor(e.ctx, t, e.repo, e.docs, e.store)
				a.save()
				a.document(a.peek())
				released := make(chan error, 1)
				go func() { _, err := e.repo.ReleaseBundle(rctx, a.recipient, a.id); released <- err }()
				<-held
				later := e.replaced(t, a)
				first := a.document(later)
				close(goOn)
				err := <-released
				switch {
				case ends && err == nil:
					t.Fatal("a release whose call ended released a bundle")
				case !ends && !errors.Is(err, domain.ErrNotFound):
					t.Fatalf("a release of a bundle dequeued meanwhile: %v, want not found", err)
				}
				if pending, err := e.repo.IsPending(e.ctx, a.recipient, a.id); err != nil || !pending {
					t.Fatalf("the later bundle %s after a release of the earlier one: pending %v, %v; want it pending", a.id, pending, err)
				}
				if got := a.document(later); got != first {
					t.Fatalf("the bundle %s was served %q, then %q after a stalled release went on", a.id, first, got)
				}
			})
		}
	}
}

// A build whose domain answers after the bundle's release finds the
// bundle no longer pending and removes the document it stored (keep). One
// that stalls between that check and the removal, while the release's own
// removal takes the document, the released record goes (its ttl), the
// actor peeks with the id again and another instance stores the later
// bundle's document, must not remove that document when it goes on.
func TestABuildThatFoundItsBundleReleasedSparesTheDocumentOfALaterBundleOfTheID(t *testing.T) {
	asked, answer := make(chan struct{}), make(chan struct{})
	checked, goOn := make(chan struct{}), make(chan struct{})
	// The release's second removal lets the build's domain answer, and
	// removes the document once the build found the bundle released.
	var answered sync.Once
	waitForTheCheck := func(forget forgetFunc) forgetFunc {
		var calls atomic.Int32
		return func(ctx context.Context, recipient string, ids []string, asRead func(context.Context) error) error {
			if calls.Add(1) == 2 {
				answered.Do(func() { close(answer) })
				<-checked
			}
			return forget(ctx, recipient, ids, asRead)
		}
	}
	e := newReuseEnv(t, "azurite", waitForTheCheck)
	a := newIDActor(e.ctx, t, e.repo, e.docs, e.store)

	// The first instance's build: its domain answers when told, and its
	// check that the bundle is pending stops after it finds it released.
	provider := contenttest.Start(t, func(b *messagehubv1.Bundle, calls int) contenttest.Answer {
		ans := contenttest.Document("text/plain", fmt.Appendf(nil, "first instance #%d", calls), 1024)
		if calls == 0 {
			close(asked)
			ans.Hold = answer
		}
		return ans
	})
	var stalled sync.Once
	first := content.NewService(content.Options{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)},
		Store:     e.docs, Lease: e.store,
		Pending: func(ctx context.Context, recipient, bundleID string) (bool, error) {
			pending, err := e.repo.IsPending(ctx, recipient, bundleID)
			if err == nil && !pending {
				stalled.Do(func() { close(checked); <-goOn })
			}
			return pending, err
		},
	})
	t.Cleanup(first.Close)

	_, built := a.building(first, asked)
	if _, err := e.repo.ReleaseBundle(e.ctx, a.recipient, a.id); err != nil {
		t.Fatal(err)
	}
	e.pastRetention(t)
	later := a.peek() // through the other instance (the actor's)
	doc := a.document(later)
	if strings.HasPrefix(doc, "first instance") {
		t.Fatalf("the later bundle %s was served %q, the released bundle's document", a.id, doc)
	}
	close(goOn)
	if err := <-built; !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("the build of the released bundle: %v, want not found", err)
	}
	if got := a.document(later); got != doc {
		t.Fatalf("the bundle %s was served %q, then %q after the build of the released bundle went on", a.id, doc, got)
	}
}

// heldBuild opens kind's environment with an actor, and an instance of
// the content service whose build of the actor's first bundle (earlier,
// its outcome on built) is held at its domain until answer closes; every
// answer is prefix, the bundle's notification ids and " #" the call.
func heldBuild(t *testing.T, kind, prefix string) (e *reuseEnv, a *idActor, service *content.Service, earlier *domain.Bundle, built <-chan error, answer chan<- struct{}) {
	t.Helper()
	e = newReuseEnv(t, kind, func(f forgetFunc) forgetFunc { return f })
	a = newIDActor(e.ctx, t, e.repo, e.docs, e.store)
	asked, held := make(chan struct{}), make(chan struct{})
	provider := contenttest.Start(t, func(b *messagehubv1.Bundle, calls int) contenttest.Answer {
		ans := contenttest.Document("text/plain", fmt.Appendf(nil, "%s%s #%d", prefix, strings.Join(b.GetNotificationIds(), ","), calls), 1024)
		if calls == 0 {
			close(asked)
			ans.Hold = held
		}
		return ans
	})
	service = content.NewService(content.Options{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)},
		Store:     e.docs, Lease: e.store, Pending: e.repo.IsPending, Holds: e.repo.HoldsBundle,
	})
	t.Cleanup(service.Close)
	earlier, built = a.building(service, asked)
	return e, a, service, earlier, built, held
}

// A build stores its bundle's document once its domain answers. A build
// whose domain answers only after its bundle was dequeued, removed by
// retention and a later bundle (other notifications) is pending under the
// id must not have the later bundle served its document: that is another
// bundle's data, and the actor would dequeue the later bundle as if its
// notifications were delivered.
func TestALateBuildOfAnEarlierBundleIsNotServedForALaterBundleOfTheID(t *testing.T) {
	for _, kind := range reuseStores {
		t.Run(kind, func(t *testing.T) {
			// The first instance's build: its domain answers when told.
			e, a, _, earlier, built, answer := heldBuild(t, kind, "first instance: ")
			later := e.replaced(t, a)
			if slices.Equal(later.NotificationIDs, earlier.NotificationIDs) {
				t.Fatalf("the later bundle has the earlier one's notifications %v", later.NotificationIDs)
			}
			close(answer)
			builtErr := <-built
			doc := a.document(later)
			if want := strings.Join(later.NotificationIDs, ","); !strings.HasPrefix(doc, want+" #") {
				t.Fatalf("the later bundle %s (notifications %s) was served %q", a.id, want, doc)
			}
			if !errors.Is(builtErr, domain.ErrNotFound) {
				t.Fatalf("the build of the earlier bundle: %v, want not found (its bundle went)", builtErr)
			}
		})
	}
}

// A document that names no bundle (a file in another format than the
// folder's, here one a development build wrote; a blob without the
// metadata) cannot show that it is the pending bundle's: it is not served,
// and the bundle's document is built again.
func TestADocumentThatNamesNoBundleIsBuiltAgain(t *testing.T) {
	for _, kind := range reuseStores {
		t.Run(kind, func(t *testing.T) {
			e := newReuseEnv(t, kind, func(f forgetFunc) forgetFunc { return f })
			a := newIDActor(e.ctx, t, e.repo, e.docs, e.store)
			a.save()
			b := a.peek()
			const old = "a document of no bundle"
			if e.dir != "" {
				if err := os.MkdirAll(filepath.Join(e.dir, a.recipient), 0o750); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(e.dir, a.recipient, a.id), []byte("messagehub-document-v1\ntext/plain\n"+old), 0o600); err != nil {
					t.Fatal(err)
				}
			} else {
				contenttest.Put(t, e.docs, content.Key{Recipient: a.recipient, BundleID: a.id}, "text/plain", []byte(old))
			}
			if got, want := a.document(b), strings.Join(b.NotificationIDs, ",")+" #0"; got != want {
				t.Fatalf("served %q, want %q built by the domain", got, want)
			}
		})
	}
}

// A build of an earlier bundle and one of a later bundle under the freed
// id may run at once on one instance: a build is the bundle's, not the
// id's. The later bundle's document, once stored and served, must stay
// when the earlier bundle's domain answers late: a document is never
// replaced, so the late one is not stored over it, and the earlier
// build, finding its bundle gone, removes nothing of the later one's. Else
// the later bundle's domain is asked again, and may answer another
// document for a bundle the actor was already served.
func TestALateBuildOfAnEarlierBundleLeavesTheDocumentOfALaterBundleOnTheSameInstance(t *testing.T) {
	for _, kind := range reuseStores {
		t.Run(kind, func(t *testing.T) {
			// The domain answers the earlier bundle when told, the later
			// one at once; each answer names its call.
			e, a, service, _, built, answer := heldBuild(t, kind, "")
			later := e.replaced(t, a)
			first := documentOf(e.ctx, t, service, later)
			close(answer)
			if err := <-built; !errors.Is(err, domain.ErrNotFound) {
				t.Fatalf("the build of the earlier bundle: %v, want not found (its bundle went)", err)
			}
			if got := documentOf(e.ctx, t, service, later); got != first {
				t.Fatalf("the later bundle %s was served %q, then %q once the earlier bundle's domain answered", a.id, first, got)
			}
		})
	}
}
