package cosmos_test

import (
	"context"
	"errors"
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

// A Dequeue of a bundle this instance cut itself reads nothing: one
// request, the batch, on the versions the bundle's creation left. When
// another instance dequeued or released the bundle meanwhile, that batch
// fails and the Dequeue answers NOT_FOUND from an anchored load, nothing
// delivered twice; when another instance's save appended to the bundle's
// drawer meanwhile, the dequeued bundle still reads back exactly its own
// notifications.
func TestADequeueOfItsOwnBundleReadsNothingAndFailsSafelyWhenStale(t *testing.T) {
	stores, repos := twoInstances(t, laggingServer(t))
	a, b := repos[0], repos[1]
	ctx := context.Background()
	r := uuid.NewString()
	peek := func(want []string) *domain.Bundle {
		t.Helper()
		got, err := a.Peek(ctx, r, domain.GroupAll, "")
		if err != nil || got == nil || !slices.Equal(got.NotificationIDs, want) {
			t.Fatalf("peek through A = %v, %v; want %v", got, err, want)
		}
		return got
	}
	save := func(repo *hub.Hub, n int) []string {
		t.Helper()
		ns := notifications(n, r, 1)
		if _, err := repo.Save(ctx, ns); err != nil {
			t.Fatal(err)
		}
		return ids(ns)
	}

	// Dequeued through B first.
	x := peek(save(a, 3))
	if err := b.Dequeue(ctx, r, x.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.Dequeue(ctx, r, x.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("dequeue through A of a bundle B dequeued: %v; want NOT_FOUND", err)
	}
	if got, err := a.Peek(ctx, r, domain.GroupAll, ""); err != nil || got != nil {
		t.Fatalf("peek through A after both dequeues = %v, %v; want nothing", got, err)
	}

	// Released through B first.
	want := save(a, 2)
	y := peek(want)
	if _, err := b.ReleaseBundle(ctx, r, y.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.Dequeue(ctx, r, y.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("dequeue through A of a bundle B released: %v; want NOT_FOUND", err)
	}
	y = peek(want)
	if err := a.Dequeue(ctx, r, y.ID); err != nil {
		t.Fatal(err)
	}

	// A save through B appends to the bundle's drawer before the dequeue.
	want = save(a, 2)
	z := peek(want)
	later := save(b, 3)
	byOp, total := (&costEnv{store: stores[0]}).measure(t, func() {
		if err := a.Dequeue(ctx, r, z.ID); err != nil {
			t.Fatal(err)
		}
	})
	if total.Requests != 1 {
		t.Fatalf("dequeue through A of its own bundle: %d requests (%s), want 1", total.Requests, byOpCharges(byOp))
	}
	if got, err := a.DequeuedBundle(ctx, r, z.ID); err != nil || !slices.Equal(got.NotificationIDs, want) {
		t.Fatalf("the dequeued bundle = %v, %v; want %v", got, err, want)
	}
	peek(later)
}
