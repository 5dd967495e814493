package hub

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/store"
)

// drawersOf lists the drawers the recipient's catalog entries name.
func drawersOf(ctx context.Context, t *testing.T, s store.Store, recipient string) []string {
	t.Helper()
	st, err := s.LoadRecipient(ctx, recipient)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range st.Entries {
		for _, d := range e.Drawers {
			out = append(out, d.ID)
		}
	}
	return out
}

// A visit whose writes meet a save that landed after its read (a conflict)
// removes nothing; the next pass, looking back only from the conflicted
// pass's start, still frees the drawer the visit would have freed: a
// drawer goes when the bundle covering its last position is due, and that
// bundle, whose delete was in the failed batch, is still due and brings the
// pass back.
func TestTheNextPassFreesWhatAConflictedVisitWouldHave(t *testing.T) {
	clock := &testClock{now: time.UnixMilli(1_700_000_000_000)}
	r := uuid.NewString()
	var interfere atomic.Int32
	h, inner := sweepInterferedHub(t, Options{Retention: 24 * time.Hour, SweepInterval: time.Hour, Now: clock.Now}, nil,
		func(ctx context.Context, h *Hub) error {
			if interfere.Add(-1) < 0 {
				return nil
			}
			_, err := h.Save(ctx, dropDelayNotes(1, r))
			return err
		})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := h.Save(ctx, dropDelayNotes(3, r)); err != nil {
		t.Fatal(err)
	}
	drainOne(ctx, t, h, r)
	first := drawersOf(ctx, t, inner, r)
	clock.Advance(25 * time.Hour) // the bundle is due, its drawer older than the retention
	interfere.Store(1)
	start := clock.Now()
	if err := h.SweepSince(ctx, start.Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if interfere.Load() > 0 || !slices.Contains(drawersOf(ctx, t, inner, r), first[0]) {
		t.Fatalf("the visit did not conflict: drawers %v", drawersOf(ctx, t, inner, r))
	}
	clock.Advance(time.Hour)
	if err := h.SweepSince(ctx, start); err != nil {
		t.Fatal(err)
	}
	if now := drawersOf(ctx, t, inner, r); slices.Contains(now, first[0]) {
		t.Fatalf("the drawer %s a conflicted visit would have freed is still in the catalog (%v)", first[0], now)
	}
}
