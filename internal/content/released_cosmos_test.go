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

// A bundle id is free again once its bundle's record is gone. On Cosmos DB
// a released bundle's record goes by its ttl, which the sweeper never comes
// for (it has no dequeue time), so the sweeper never removes its document
// either: a later bundle under the same id (an actor that kept the id and
// peeked with it after the retention) would be served the released
// bundle's document, of other notifications, and its dequeue would
// acknowledge notifications whose data the actor never got.
func TestADocumentOfAReleasedBundleIsNotServedForALaterBundleOfItsID(t *testing.T) {
	srv := cosmostest.Start(t)
	azurite := azuritetest.Start(t)
	ctx := within(t, 2*time.Minute)
	const retention = time.Hour
	s, err := cosmos.Open(ctx, cosmos.Config{Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: cosmostest.UniqueID("db"),
		Transport: cosmostest.NewHTTPClient(), Retention: retention})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := blobstore.Open(ctx, blobstore.Config{ConnectionString: azurite.ConnectionString(), Container: azuritetest.UniqueContainer("released"), Provision: true})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ahead := time.Duration(0) // how far the test moved the clocks
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(ahead) }
	repo := hub.New(s, hub.Options{Retention: retention, ForgetBundles: content.Forget(docs), Now: now}, nil)
	t.Cleanup(func() { repo.Close(); _ = s.Close() })
	// The domain's document names the bundle's notifications.
	provider := contenttest.Start(t, func(b *messagehubv1.Bundle, _ int) contenttest.Answer {
		return contenttest.Document("text/plain", []byte(strings.Join(b.GetNotificationIds(), ",")), 1024)
	})
	service := content.NewService(content.Options{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)},
		Store:     docs, Pending: repo.IsPending, Lease: s,
	})
	t.Cleanup(service.Close)

	recipient, id := uuid.NewString(), uuid.NewString()
	save := func() string {
		t.Helper()
		n := domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginTimeSeries, ContentType: "c", DocumentType: "c", Weight: 1}
		if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
			t.Fatal(err)
		}
		return n.ID
	}
	document := func(b *domain.Bundle) string {
		t.Helper()
		doc, err := service.Document(ctx, apiconv.Bundle(b))
		if err != nil {
			t.Fatal(err)
		}
		return string(read(t, doc))
	}

	first := save()
	b, err := repo.Peek(ctx, recipient, domain.GroupAll, id)
	if err != nil || b == nil {
		t.Fatalf("peek: %v %v", b, err)
	}
	if got := document(b); got != first {
		t.Fatalf("document %q, want %q", got, first)
	}
	if _, err := repo.ReleaseBundle(ctx, recipient, id); err != nil {
		t.Fatal(err)
	}
	// The released notification goes out again under another id, and is
	// dequeued; then another is saved.
	again, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || again == nil || again.ID == id {
		t.Fatalf("peek after the release: %v %v", again, err)
	}
	if err := repo.Dequeue(ctx, recipient, again.ID); err != nil {
		t.Fatal(err)
	}
	second := save()

	// The retention passes (and the day the store gives a dequeued
	// bundle's ttl beyond it): the ttl removes the released record, and the
	// sweeper makes its pass.
	const passed = retention + 25*time.Hour
	if err := srv.AdvanceClock(passed); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	ahead = passed
	mu.Unlock()
	if err := repo.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	later, err := repo.Peek(ctx, recipient, domain.GroupAll, id)
	if err != nil || later == nil || later.ID != id || len(later.NotificationIDs) != 1 || later.NotificationIDs[0] != second {
		t.Fatalf("peek naming the released id after the retention: %+v %v; want a bundle of %s under it", later, err, second)
	}
	if got := document(later); got != second {
		t.Fatalf("the bundle %s of %s was served the document %q of the released bundle of that id", id, second, got)
	}
}

// A release removes the bundle's document and then writes the released
// record. A build whose domain answers between the two stores the document
// while the bundle is still pending, so the build keeps it: the released
// bundle's document stays, and once the ttl frees the id a later bundle
// under it is served that document.
func TestADocumentStoredWhileItsBundleIsBeingReleasedIsRemoved(t *testing.T) {
	srv := cosmostest.Start(t)
	azurite := azuritetest.Start(t)
	ctx := within(t, 2*time.Minute)
	const retention = time.Hour
	s, err := cosmos.Open(ctx, cosmos.Config{Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: cosmostest.UniqueID("db"),
		Transport: cosmostest.NewHTTPClient(), Retention: retention})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := blobstore.Open(ctx, blobstore.Config{ConnectionString: azurite.ConnectionString(), Container: azuritetest.UniqueContainer("releasing"), Provision: true})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ahead := time.Duration(0) // how far the test moved the clocks
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(ahead) }

	// The first build's domain answers only once the release has removed
	// the document, and the release writes its record only once that build
	// has stored the document and ended.
	asked, answer := make(chan struct{}), make(chan struct{})
	built := make(chan error, 1)
	forget := content.Forget(docs)
	var once sync.Once
	forgetBundles := func(ctx context.Context, recipient string, ids []string) error {
		err := forget(ctx, recipient, ids)
		once.Do(func() {
			close(answer)
			if berr := <-built; berr != nil {
				err = berr
			}
		})
		return err
	}
	repo := hub.New(s, hub.Options{Retention: retention, ForgetBundles: forgetBundles, Now: now}, nil)
	t.Cleanup(func() { repo.Close(); _ = s.Close() })
	provider := contenttest.Start(t, func(b *messagehubv1.Bundle, calls int) contenttest.Answer {
		a := contenttest.Document("text/plain", []byte(strings.Join(b.GetNotificationIds(), ",")), 1024)
		if calls == 0 {
			close(asked)
			a.Hold = answer
		}
		return a
	})
	service := content.NewService(content.Options{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)},
		Store:     docs, Pending: repo.IsPending, Lease: s,
	})
	t.Cleanup(service.Close)

	recipient, id := uuid.NewString(), uuid.NewString()
	save := func() string {
		t.Helper()
		n := domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginTimeSeries, ContentType: "c", DocumentType: "c", Weight: 1}
		if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
			t.Fatal(err)
		}
		return n.ID
	}

	save()
	b, err := repo.Peek(ctx, recipient, domain.GroupAll, id)
	if err != nil || b == nil {
		t.Fatalf("peek: %v %v", b, err)
	}
	go func() {
		doc, err := service.Document(ctx, apiconv.Bundle(b))
		if err == nil && doc != nil {
			err = doc.Body.Close()
		}
		built <- err
	}()
	<-asked
	if _, err := repo.ReleaseBundle(ctx, recipient, id); err != nil {
		t.Fatal(err)
	}
	if doc, err := docs.Open(ctx, content.Key{Recipient: recipient, BundleID: id}); !errors.Is(err, content.ErrNotStored) {
		if err == nil {
			_ = doc.Body.Close()
		}
		t.Errorf("the document of the released bundle %s is still stored (%v)", id, err)
	}

	// What it leads to: the released notification goes out again under
	// another id and is dequeued, another is saved, the ttl frees the id,
	// and a peek naming it gets a bundle of the new notification.
	again, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || again == nil || again.ID == id {
		t.Fatalf("peek after the release: %v %v", again, err)
	}
	if err := repo.Dequeue(ctx, recipient, again.ID); err != nil {
		t.Fatal(err)
	}
	second := save()
	const passed = retention + 25*time.Hour
	if err := srv.AdvanceClock(passed); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	ahead = passed
	mu.Unlock()
	if err := repo.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	later, err := repo.Peek(ctx, recipient, domain.GroupAll, id)
	if err != nil || later == nil || later.ID != id || len(later.NotificationIDs) != 1 || later.NotificationIDs[0] != second {
		t.Fatalf("peek naming the released id after the retention: %+v %v; want a bundle of %s under it", later, err, second)
	}
	doc, err := service.Document(ctx, apiconv.Bundle(later))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(read(t, doc)); got != second {
		t.Fatalf("the bundle %s of %s was served the document %q of the released bundle of that id", id, second, got)
	}
}
