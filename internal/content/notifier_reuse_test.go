package content_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// hubClock is the time a hub dequeues and sweeps by.
type hubClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *hubClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *hubClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// A bundle id is free again once retention removed its record, and on
// Cosmos DB a notice of its earlier dequeue may still wait (its domain was
// failing) until its ttl ends (the embedded store removes it with the
// record). This instance's dequeue of a new bundle under the id is its own
// notice, told at once; dropping the old notice (its bundle is gone) must
// not make the notifier forget that the new one is its own: it would then
// wait for the grace and be told by every instance once overdue.
func TestAnOwnNoticeIsToldAtOnceAfterTheOldNoticeOfItsIDIsDropped(t *testing.T) {
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer { return contenttest.Answer{} })
	provider.FailDequeued(1) // the domain fails the old dequeue's call
	signal := content.NewNoticeSignal()
	wall := time.Now()
	hclock := &hubClock{now: wall.Add(-2 * time.Hour)}
	ctx := within(t, time.Minute)
	srv := cosmostest.Start(t)
	store, err := cosmos.Open(ctx, cosmos.Config{Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: cosmostest.UniqueID("db"),
		Transport: cosmostest.NewHTTPClient(), Now: hclock.Now})
	if err != nil {
		t.Fatal(err)
	}
	repo := hub.New(store, hub.Options{Notices: func(domain.Origin) bool { return true }, OnNotice: signal.Send,
		Now: hclock.Now, Retention: time.Hour}, nil)
	t.Cleanup(func() { repo.Close(); _ = store.Close() })
	clock := newFakeClock()
	clock.now = wall
	notifier := content.StartNotifier(content.NotifierOptions{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginCharges: provider.Client(t)},
		Notices:   store,
		Bundle:    repo.NoticedBundle,
		Signal:    signal,
		Grace:     time.Hour,
		Batch:     1,
		Clock:     clock,
	})
	defer notifier.Close()
	<-clock.waits // idle after the first, empty look

	recipient, id := uuid.NewString(), uuid.NewString()
	cycleAs := func() {
		t.Helper()
		n := domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges, ContentType: "c", DocumentType: "c", Weight: 1}
		if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
			t.Fatal(err)
		}
		b, err := repo.Peek(ctx, recipient, domain.GroupAll, id)
		if err != nil || b == nil || b.ID != id {
			t.Fatalf("peek under %s: %+v, %v", id, b, err)
		}
		if err := repo.Dequeue(ctx, recipient, id); err != nil {
			t.Fatal(err)
		}
	}
	cycleAs() // the old dequeue: its call fails, the domain is backed off
	var backoff fakeWait
	select {
	case backoff = <-clock.waits:
	case <-ctx.Done():
		t.Fatal("no backoff after the failed call")
	}

	// Retention removes the old bundle's record; its notice stays (its ttl
	// is the store's retention, of a week).
	hclock.set(wall.Add(-30 * time.Minute))
	if err := repo.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DequeuedBundle(ctx, recipient, id); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("the old bundle's record after retention: %v; want it gone, the test tests nothing", err)
	}
	if n, _, err := store.NoticeBacklog(ctx); err != nil || n != 1 {
		t.Fatalf("%d notices (%v) after retention; want the old one still waiting, the test tests nothing", n, err)
	}
	hclock.set(wall)
	cycleAs() // this instance's dequeue of a new bundle under the freed id

	clock.fire(backoff) // the domain is back
	select {
	case b := <-provider.Told():
		if b.GetId() != id {
			t.Fatalf("told of %v, want %s", b, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("this instance's own dequeue was not told at once after the old notice of its id was dropped")
	}
}
