package cosmos_test

import (
	"context"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
)

// A Peek after this instance's Dequeue of everything a recipient had
// waiting is answered by the head alone (one request), and that answer
// hides nothing: a save through another instance, whose replicas this one
// does not see, is found by the next Peek (the head changed); a bundle that
// took only part of what waited, or a pending bundle of another group the
// cut's load saw, leaves the next Peek a full load that returns the rest.
func TestAPeekAfterItsOwnDequeueIsAnsweredByTheHeadAndHidesNothing(t *testing.T) {
	stores, repos := twoInstances(t, laggingServer(t))
	a, b := repos[0], repos[1]
	ctx := context.Background()
	peekCost := func(r string) (*domain.Bundle, int64) {
		t.Helper()
		var got *domain.Bundle
		_, total := (&costEnv{store: stores[0]}).measure(t, func() {
			var err error
			if got, err = a.Peek(ctx, r, domain.GroupAll, ""); err != nil {
				t.Fatal(err)
			}
		})
		return got, total.Requests
	}
	dequeue := func(r string, bundle *domain.Bundle) {
		t.Helper()
		if err := a.Dequeue(ctx, r, bundle.ID); err != nil {
			t.Fatal(err)
		}
	}

	r := uuid.NewString()
	for round := range 3 {
		ns := notifications(2, r, 1)
		if _, err := b.Save(ctx, ns); err != nil {
			t.Fatal(err)
		}
		got, n := peekCost(r)
		if got == nil || !slices.Equal(got.NotificationIDs, ids(ns)) {
			t.Fatalf("round %d: peek through A after B's save = %v (%d requests); want B's notifications", round, got, n)
		}
		dequeue(r, got)
		if got, n = peekCost(r); got != nil || n != 1 {
			t.Fatalf("round %d: peek after A's own dequeue = %v in %d requests; want nothing in 1", round, got, n)
		}
	}

	// A bundle of part of what waits: the rest is found.
	small := hub.New(withoutBells{stores[0]}, hub.Options{MaxBundleWeight: 2}, nil)
	t.Cleanup(small.Close)
	r = uuid.NewString()
	ns := notifications(3, r, 1)
	if _, err := small.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if got := drainAll(t, small, r); !slices.Equal(got, ids(ns)) {
		t.Fatalf("drained %v through bundles of 2, want %v", got, ids(ns))
	}

	// A pending bundle of another group, seen by the load of the cut: its
	// Peek still returns it.
	r = uuid.NewString()
	charges := notifications(1, r, 1)
	for i := range charges {
		charges[i].Origin = domain.OriginCharges
	}
	series := notifications(1, r, 1)
	if _, err := a.Save(ctx, append(slices.Clone(charges), series...)); err != nil {
		t.Fatal(err)
	}
	pending, err := a.Peek(ctx, r, domain.GroupMasterData, "")
	if err != nil || pending == nil || !slices.Equal(pending.NotificationIDs, ids(charges)) {
		t.Fatalf("peek of master data = %v, %v", pending, err)
	}
	got, err := a.Peek(ctx, r, domain.GroupTimeSeries, "")
	if err != nil || got == nil || !slices.Equal(got.NotificationIDs, ids(series)) {
		t.Fatalf("peek of time series = %v, %v", got, err)
	}
	dequeue(r, got)
	if again, n := peekCost(r); again == nil || again.ID != pending.ID {
		t.Fatalf("peek after the time series' dequeue = %v (%d requests); want the pending bundle %s", again, n, pending.ID)
	}
}
