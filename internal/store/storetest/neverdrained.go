package storetest

import (
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
)

// neverDrainedCabinet: a cabinet whose actor dequeues all but the last
// notification, never drained when a sweep visits it, never has a fully
// acknowledged last drawer. A notification acknowledged in it still goes
// within about twice the retention: the drawer takes new notifications for
// at most the retention once some of it is acknowledged (the cursor the
// save's plan needs for it, a store may leave out of a save's load), then
// leaves once all of it is. Kept for good, its id would make the
// notification, saved again past its retention, a duplicate never
// delivered.
func (h *harness) neverDrainedCabinet(t *testing.T) {
	const retention = time.Hour
	e := h.env(t, hub.Options{Retention: retention})
	r := newRecipient()
	var first domain.Notification
	for i := range 7 { // a save every half retention; the one before it dequeued
		if i > 0 {
			e.clock.Advance(retention / 2)
		}
		n := note(r, domain.OriginCharges, "c")
		n.SupportsBundling = false // a bundle of one: the last one saved stays unacknowledged
		if i == 0 {
			first = n
		}
		e.save(n)
		if i > 0 {
			b := e.peek(r, domain.GroupAll, "")
			if b == nil || len(b.NotificationIDs) != 1 {
				t.Fatalf("peek: %v", b)
			}
			e.dequeue(r, b.ID)
		}
		if err := e.repo.SweepNow(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	// The first notification was dequeued at half the retention, two and
	// a half retentions ago: the drawer took saves for a retention, the
	// bundle of its last one is retained for another.
	if found, err := e.store.LookupIDs(ctx(t), []string{first.ID}); err != nil || len(found) != 0 {
		t.Fatalf("the id of a notification dequeued %s ago, past twice its retention of %s, is still stored (%v)", 2*retention+retention/2, retention, err)
	}
	if res := e.save(first); res.Saved != 1 {
		t.Fatalf("saved again past its retention: %+v, want it saved, not a duplicate", res)
	}
}
