package content_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/apiconv"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/blobstore"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/azuritetest"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// forgetFunc removes bundles' documents (hub.Options.ForgetBundles).
type forgetFunc = func(ctx context.Context, recipient string, bundleIDs []string, asRead func(context.Context) error) error

// releasedEnv is a hub on Cosmos DB with a retention of an hour, whose
// documents are kept in Azurite and built by a domain whose document of a
// bundle names its notifications, and one recipient with a bundle id.
type releasedEnv struct {
	t             *testing.T
	ctx           context.Context
	srv           *cosmostest.Server
	db            string
	docs          *blobstore.Store
	repo          *hub.Hub
	service       *content.Service
	recipient, id string

	mu    sync.Mutex
	ahead time.Duration // how far the test moved the clocks
}

const releasedRetention = time.Hour

// newReleasedEnv starts the environment: forget wraps the documents' removal
// the hub is given, answer what the domain answers to its calls-th call.
func newReleasedEnv(t *testing.T, container string, forget func(forgetFunc) forgetFunc, answer func(calls int, a *contenttest.Answer)) *releasedEnv {
	e := &releasedEnv{t: t, srv: cosmostest.Start(t), db: cosmostest.UniqueID("db"), ctx: within(t, 2*time.Minute), recipient: uuid.NewString(), id: uuid.NewString()}
	azurite := azuritetest.Start(t)
	s, err := cosmos.Open(e.ctx, cosmos.Config{Endpoint: e.srv.Endpoint, Key: e.srv.Key, Provision: true, Database: e.db,
		Transport: cosmostest.NewHTTPClient(), Retention: releasedRetention})
	if err != nil {
		t.Fatal(err)
	}
	if e.docs, err = blobstore.Open(e.ctx, blobstore.Config{ConnectionString: azurite.ConnectionString(), Container: azuritetest.UniqueContainer(container), Provision: true}); err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { e.mu.Lock(); defer e.mu.Unlock(); return time.Now().Add(e.ahead) }
	e.repo = hub.New(s, hub.Options{Retention: releasedRetention, ForgetBundles: forget(content.Forget(e.docs)), Now: now}, nil)
	t.Cleanup(func() { e.repo.Close(); _ = s.Close() })
	provider := contenttest.Start(t, func(b *messagehubv1.Bundle, calls int) contenttest.Answer {
		a := contenttest.Document("text/plain", []byte(strings.Join(b.GetNotificationIds(), ",")), 1024)
		answer(calls, &a)
		return a
	})
	e.service = content.NewService(content.Options{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)},
		Store:     e.docs, Pending: e.repo.IsPending, Lease: s,
	})
	t.Cleanup(e.service.Close)
	return e
}

// save saves one notification for the recipient and returns its id.
func (e *releasedEnv) save() string {
	e.t.Helper()
	n := domain.Notification{ID: uuid.NewString(), Recipient: e.recipient, Origin: domain.OriginTimeSeries, ContentType: "c", DocumentType: "c", Weight: 1}
	if _, err := e.repo.Save(e.ctx, []domain.Notification{n}); err != nil {
		e.t.Fatal(err)
	}
	return n.ID
}

// document builds (or reads back) the bundle's document.
func (e *releasedEnv) document(b *domain.Bundle) string {
	e.t.Helper()
	return documentOf(e.ctx, e.t, e.service, b)
}

// laterBundleOfTheReleasedID follows a release of the bundle under the id:
// the released notification goes out again under another id and is
// dequeued, another is saved, the retention passes (and the day the store
// gives a dequeued bundle's ttl beyond it: the ttl removes the released
// record) and the sweeper makes its pass; then a peek naming the id gets a
// bundle of the new notification, which must be served its own document.
func (e *releasedEnv) laterBundleOfTheReleasedID() {
	t := e.t
	again, err := e.repo.Peek(e.ctx, e.recipient, domain.GroupAll, "")
	if err != nil || again == nil || again.ID == e.id {
		t.Fatalf("peek after the release: %v %v", again, err)
	}
	if err := e.repo.Dequeue(e.ctx, e.recipient, again.ID); err != nil {
		t.Fatal(err)
	}
	second := e.save()
	const passed = releasedRetention + 25*time.Hour
	if err := e.srv.AdvanceClock(passed); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.ahead = passed
	e.mu.Unlock()
	if err := e.repo.SweepNow(e.ctx); err != nil {
		t.Fatal(err)
	}
	later, err := e.repo.Peek(e.ctx, e.recipient, domain.GroupAll, e.id)
	if err != nil || later == nil || later.ID != e.id || len(later.NotificationIDs) != 1 || later.NotificationIDs[0] != second {
		t.Fatalf("peek naming the released id after the retention: %+v %v; want a bundle of %s under it", later, err, second)
	}
	if got := e.document(later); got != second {
		t.Fatalf("the bundle %s of %s was served the document %q of the released bundle of that id", e.id, second, got)
	}
}

// A bundle id is free again once its bundle's record is gone. On Cosmos DB
// a released bundle's record goes by its ttl, which the sweeper never comes
// for (it has no dequeue time), so the sweeper never removes its document
// either: a later bundle under the same id (an actor that kept the id and
// peeked with it after the retention) would be served the released
// bundle's document, of other notifications, and its dequeue would
// acknowledge notifications whose data the actor never got.
func TestADocumentOfAReleasedBundleIsNotServedForALaterBundleOfItsID(t *testing.T) {
	same := func(f forgetFunc) forgetFunc { return f }
	e := newReleasedEnv(t, "released", same, func(int, *contenttest.Answer) {})
	first := e.save()
	b, err := e.repo.Peek(e.ctx, e.recipient, domain.GroupAll, e.id)
	if err != nil || b == nil {
		t.Fatalf("peek: %v %v", b, err)
	}
	if got := e.document(b); got != first {
		t.Fatalf("document %q, want %q", got, first)
	}
	if _, err := e.repo.ReleaseBundle(e.ctx, e.recipient, e.id); err != nil {
		t.Fatal(err)
	}
	e.laterBundleOfTheReleasedID()
}

// A release removes the bundle's document and then writes the released
// record. A build whose domain answers between the two stores the document
// while the bundle is still pending, so the build keeps it: the released
// bundle's document stays, and once the ttl frees the id a later bundle
// under it is served that document.
func TestADocumentStoredWhileItsBundleIsBeingReleasedIsRemoved(t *testing.T) {
	storedWhileReleasing(t, "releasing", func(e *releasedEnv) {
		if _, err := e.repo.ReleaseBundle(e.ctx, e.recipient, e.id); err != nil {
			t.Fatal(err)
		}
	})
}

// So is one stored so while the release's write applies unanswered and the
// look on the primary that would tell fails too: the release's outcome is
// unknown (the operator is told so, and its repeat finds the bundle
// released), and the document stored meanwhile must go all the same.
func TestADocumentStoredWhileItsBundleIsBeingReleasedIsRemovedWhenTheReleasesOutcomeIsUnknown(t *testing.T) {
	storedWhileReleasing(t, "releaseunknown", func(e *releasedEnv) {
		if err := e.srv.AddFaults(
			cosmostest.Fault{DB: e.db, Ops: []string{"batch"}, Coll: "recipients", Type: "released", Kind: cosmostest.LostUnavailable, Count: 6},
			cosmostest.Fault{DB: e.db, Ops: []string{"batch"}, Coll: "recipients", ID: "^b:", Body: `"operationType":"Read"`, Kind: cosmostest.Refuse503}); err != nil {
			t.Fatal(err)
		}
		_, err := e.repo.ReleaseBundle(e.ctx, e.recipient, e.id)
		if unknown := new(hub.OutcomeUnknown); !errors.As(err, &unknown) {
			t.Fatalf("release: %v; want its outcome unknown (the faults did not act)", err)
		}
		if err := e.srv.ClearFaults(e.db); err != nil {
			t.Fatal(err)
		}
		if pending, err := e.repo.IsPending(e.ctx, e.recipient, e.id); err != nil || pending {
			t.Fatalf("bundle %s pending after its release: %v, %v; want it released", e.id, pending, err)
		}
	})
}

// storedWhileReleasing has a build of the bundle's document store it
// between the release's removal of the document and its write (release),
// and finds the document gone once release returns.
func storedWhileReleasing(t *testing.T, container string, release func(e *releasedEnv)) {
	// The first build's domain answers only once the release has removed
	// the document, and the release writes its record only once that build
	// has stored the document and ended.
	asked, answer := make(chan struct{}), make(chan struct{})
	built := make(chan error, 1)
	var once sync.Once
	holdTheRelease := func(forget forgetFunc) forgetFunc {
		return func(ctx context.Context, recipient string, ids []string, asRead func(context.Context) error) error {
			err := forget(ctx, recipient, ids, asRead)
			once.Do(func() {
				close(answer)
				if berr := <-built; berr != nil {
					err = berr
				}
			})
			return err
		}
	}
	holdTheFirstAnswer := func(calls int, a *contenttest.Answer) {
		if calls == 0 {
			close(asked)
			a.Hold = answer
		}
	}
	e := newReleasedEnv(t, container, holdTheRelease, holdTheFirstAnswer)

	e.save()
	b, err := e.repo.Peek(e.ctx, e.recipient, domain.GroupAll, e.id)
	if err != nil || b == nil {
		t.Fatalf("peek: %v %v", b, err)
	}
	go func() { built <- buildDocument(e.ctx, e.service, b) }()
	<-asked
	release(e)
	if doc, err := e.docs.Open(e.ctx, content.Key{Recipient: e.recipient, BundleID: e.id}); !errors.Is(err, content.ErrNotStored) {
		if err == nil {
			_ = doc.Body.Close()
		}
		t.Errorf("the document of the released bundle %s is still stored (%v)", e.id, err)
	}
	e.laterBundleOfTheReleasedID()
}

// buildDocument asks service for the bundle's document and closes it,
// returning what went wrong.
func buildDocument(ctx context.Context, service *content.Service, b *domain.Bundle) error {
	doc, err := service.Document(ctx, apiconv.Bundle(b))
	if err == nil && doc != nil {
		err = doc.Body.Close()
	}
	return err
}
