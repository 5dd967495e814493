package cosmos_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// replayCheckAttempts is how many times the store's transport sends a
// request answered 503 (the first try and its 4 retries): a rule firing
// that often makes one read on the primary fail, and the next succeed.
const replayCheckAttempts = 5

// A write refused with a conflict may be a resend meeting its own first
// attempt, whose answer was lost; the store reads the document on the
// primary to tell. When that read fails too, the outcome is unknown: a
// reserve batch taken for refused left its reservation in the head (its
// abort did not roll it back), holding the recipient's watermark below
// every later save until the reservation's lease ran out, so Peeks found
// nothing though the Saves were acknowledged. It must roll back at once.
func TestAReserveWhoseReplayCheckFailsLeavesNoReservation(t *testing.T) {
	db := cosmostest.UniqueID("db")
	repo := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	first := notifications(2, r, 1)
	if _, err := repo.Save(ctx, first); err != nil {
		t.Fatal(err)
	}
	inject(t, db,
		// The reserve batch applies and its answer is lost: the resend
		// meets the reservation (412).
		cosmostest.Fault{Kind: cosmostest.LostUnavailable, Count: 1, Ops: []string{"batch"}, Coll: "recipients", Type: "head"},
		// The read of the head on the primary after that 412 fails on every
		// attempt (the plan's load is a query, and the reservation is made
		// on the head it read), and the rollback's after it passes.
		cosmostest.Fault{Kind: cosmostest.Refuse503, Count: replayCheckAttempts, Ops: []string{"batch"},
			Coll: "recipients", ID: "^head$", Body: `"operationType":"Read"`},
	)
	more := notifications(3, r, 1)
	_, err := repo.Save(ctx, more)
	if n := fired(t, db); n != 1+replayCheckAttempts {
		t.Fatalf("the faults fired %d times, want %d; the test tested something else", n, 1+replayCheckAttempts)
	}
	if err != nil && !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("a save whose outcome is unknown answered %v", err)
	}
	saveAsTheHub(t, repo, db, more, err)
	// Every acknowledged notification at once, not after a lease.
	drainExactly(t, repo, r, append(ids(first), ids(more)...))
}

// The same for a Dequeue: its batch applied and its answer was lost, and
// the read that would find the bundle dequeued by it fails. The Dequeue
// must not answer NOT_FOUND for a bundle it may have dequeued itself; it
// is unavailable, and asked again the bundle is gone and nothing is
// delivered twice.
func TestADequeueWhoseReplayCheckFailsIsNotNotFound(t *testing.T) {
	db := cosmostest.UniqueID("db")
	repo := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	ns := notifications(3, r, 1)
	if _, err := repo.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	b, err := repo.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("peek: %v, %v", b, err)
	}
	inject(t, db,
		cosmostest.Fault{Kind: cosmostest.LostUnavailable, Count: 1, Ops: []string{"batch"}, Coll: "recipients", Type: "dequeued"},
		// Every read of the bundle on the primary fails until the Dequeue
		// has answered.
		cosmostest.Fault{Kind: cosmostest.Refuse503, Ops: []string{"batch"},
			Coll: "recipients", ID: "^b:", Body: `"operationType":"Read"`},
	)
	err = repo.Dequeue(ctx, r, b.ID)
	if n := fired(t, db); n < 2 {
		t.Fatalf("the faults fired %d times; the test tested nothing", n)
	}
	clearFaults(t, db)
	if !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("a dequeue whose outcome is unknown answered %v, want unavailable", err)
	}
	if err := repo.Dequeue(ctx, r, b.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("the dequeue asked again: %v; want not found (the first applied)", err)
	}
	if again, err := repo.Peek(ctx, r, domain.GroupAll, ""); err != nil || again != nil {
		t.Fatalf("peek after the dequeue = %v, %v; want nothing", again, err)
	}
}
