package storetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
)

// heldCreate holds the first CreateBundle made once armed until released.
type heldCreate struct {
	store.Store
	taken    atomic.Bool
	armed    chan struct{}
	entered  chan struct{}
	released chan struct{}
}

func (g *heldCreate) CreateBundle(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	select {
	case <-g.armed:
		if g.taken.CompareAndSwap(false, true) {
			close(g.entered)
			<-g.released
		}
	default:
	}
	return g.Store.CreateBundle(ctx, recipient, rec, cursor)
}

// peekHeldAcrossACabinetsRestart: a Peek that cut a bundle from a cabinet
// with no cursor yet, and whose write is held while the actor peeks the same
// notifications in another call, dequeues them, retention takes the drained
// cabinet (entry and cursor) out and a Save starts it again at position 0,
// must not deliver the dequeued notifications again, nor leave a bundle
// pending over positions it did not read.
func (h *harness) peekHeldAcrossACabinetsRestart(t *testing.T) {
	held := &heldCreate{armed: make(chan struct{}), entered: make(chan struct{}), released: make(chan struct{})}
	e := h.envOver(t, hub.Options{Retention: 24 * time.Hour}, func(s store.Store) store.Store { held.Store = s; return held })
	r := newRecipient()
	first := notes(3, r, domain.OriginCharges, "c")
	e.save(first...)
	// The cabinet's last drawer is older than the retention, so that a
	// pass takes the drained cabinet out at once.
	e.clock.Advance(25 * time.Hour)

	close(held.armed)
	type answer struct {
		b   *domain.Bundle
		err error
	}
	slow := make(chan answer, 1)
	go func() {
		b, err := e.repo.Peek(ctx(t), r, domain.GroupAll, "")
		slow <- answer{b, err}
	}()
	<-held.entered // cut from the cabinet as it was, its write held

	b := e.peek(r, domain.GroupMasterData, "") // another key: not shared with the held Peek
	expectIDs(t, "the actor's peek", b.NotificationIDs, ids(first))
	e.dequeue(r, b.ID)
	if err := e.repo.SweepNow(ctx(t)); err != nil {
		t.Fatal(err)
	}
	second := notes(3, r, domain.OriginCharges, "c")
	e.save(second...)

	close(held.released)
	got := <-slow
	if got.err == nil && got.b != nil {
		for _, id := range got.b.NotificationIDs {
			for _, done := range ids(first) {
				if id == done {
					t.Fatalf("the held peek delivered %s again after its dequeue (bundle %s)", id, got.b.ID)
				}
			}
		}
	}
	// Whatever the held Peek answered, every notification of the restarted
	// cabinet is delivered, and only those.
	expectIDs(t, "after the restart", e.drain(r, domain.GroupAll), ids(second))
}
