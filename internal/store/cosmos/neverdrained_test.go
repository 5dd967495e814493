package cosmos_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
)

// A cabinet whose actor dequeues all but the last notification is never
// drained when a sweep visits it. A save's load leaves the cursors out
// (store.CatalogOnly), yet the cabinet's last drawer, opened more than the
// retention ago and partly acknowledged, takes no more notifications, so
// that it goes once acknowledged and a notification acknowledged in it goes
// within about twice the retention: kept for good, its id would make the
// notification, saved again past its retention, a duplicate never delivered.
func TestAnAcknowledgedNotificationOfACabinetNeverDrainedGoesWithinTwiceTheRetention(t *testing.T) {
	const retention = time.Hour
	ctx := context.Background()
	clock := &costClock{now: time.Now()}
	s := open(t, cosmos.Config{})
	repo := hub.New(s, hub.Options{Retention: retention, SweepInterval: time.Hour, Now: clock.Now}, nil)
	t.Cleanup(repo.Close)
	r := uuid.NewString()
	var first domain.Notification
	for i := range 7 { // a save every half retention; the one before it dequeued
		if i > 0 {
			clock.advance(retention / 2)
		}
		n := notifications(1, r, 1)[0]
		n.SupportsBundling = false // a bundle of one: the last one saved stays unacknowledged
		if i == 0 {
			first = n
		}
		if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			b, err := repo.Peek(ctx, r, domain.GroupAll, "")
			if err != nil || b == nil || len(b.NotificationIDs) != 1 {
				t.Fatalf("peek: %v, %v", b, err)
			}
			if err := repo.Dequeue(ctx, r, b.ID); err != nil {
				t.Fatal(err)
			}
		}
		if err := repo.SweepNow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if found, err := s.LookupIDs(ctx, []string{first.ID}); err != nil || len(found) != 0 {
		t.Fatalf("the id of a notification dequeued %s ago, past twice its retention of %s, is still stored (%v)", 2*retention+retention/2, retention, err)
	}
	res, err := repo.Save(ctx, []domain.Notification{first})
	if err != nil || res.Saved != 1 {
		t.Fatalf("saved again past its retention: %+v (%v), want it saved, not a duplicate", res, err)
	}
}
