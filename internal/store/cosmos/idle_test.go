package cosmos_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/internal/store/storetest"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// The idle mark and the cheaper loads keep the store contract.
func TestIdleContract(t *testing.T) {
	storetest.RunIdle(t, openChain)
}

// isIdle says whether a load that may be idle is answered idle.
func isIdle(t *testing.T, s store.Store, recipient string) bool {
	t.Helper()
	st, err := s.LoadRecipient(context.Background(), recipient, store.MayBeIdle)
	if err != nil {
		t.Fatal(err)
	}
	return st.Idle
}

// emptyPeeks peeks a drained recipient three times, as a polling actor
// does: the second look marks it idle.
func emptyPeeks(t *testing.T, repo *hub.Hub, recipient string) {
	t.Helper()
	for range 3 {
		if b, err := repo.Peek(context.Background(), recipient, domain.GroupAll, ""); err != nil || b != nil {
			t.Fatalf("peek of a drained recipient = %v, %v; want nothing", b, err)
		}
	}
}

// drainedOn opens a store and its hub on database db and returns them, the
// hub of a second instance on db, and a recipient that had three
// notifications, all delivered and dequeued through the second instance:
// the first has not seen the recipient drained (drains.go), so its Peeks
// load in full until its hub marks the recipient idle.
func drainedOn(t *testing.T, db string) (*cosmos.Store, *hub.Hub, *hub.Hub, string) {
	t.Helper()
	repos := make([]*hub.Hub, 2)
	var s *cosmos.Store
	for i := range repos {
		s = open(t, cosmos.Config{Database: db})
		repos[i] = hub.New(s, hub.Options{}, nil)
		t.Cleanup(repos[i].Close)
	}
	r := uuid.NewString()
	ns := notifications(3, r, 1)
	if _, err := repos[0].Save(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, repos[0], r, ids(ns))
	return s, repos[1], repos[0], r
}

// The Cosmos store keeps the mark: a recipient the hub marked is answered
// by its head alone, and one that a Save reached is not.
func TestADrainedRecipientPolledTwiceIsAnsweredByItsHead(t *testing.T) {
	s, repo, _, r := drainedOn(t, cosmostest.UniqueID("db"))
	if isIdle(t, s, r) {
		t.Fatal("idle before any empty peek")
	}
	emptyPeeks(t, repo, r)
	if !isIdle(t, s, r) {
		t.Fatal("not idle after empty peeks")
	}
	more := notifications(2, r, 1)
	if _, err := repo.Save(context.Background(), more); err != nil {
		t.Fatal(err)
	}
	if isIdle(t, s, r) {
		t.Fatal("idle after a save")
	}
	drainExactly(t, repo, r, ids(more))
}

// The idle mark is a write whose answer can be lost or that can be
// refused, like every other (writeFaults; a refusal lasts as long as the
// Peek that makes the mark runs, as one the SDK's retries outlast would
// only delay it). Either way the Peek answers nothing and no error, the
// recipient is idle exactly when the mark applied, and the next Save is
// delivered: a lost answer hides nothing, a refusal only costs the next
// Peeks their full load. A lost answer's resend meets its own mark (412).
func TestTheIdleMarkSurvivesALostOrRefusedAnswer(t *testing.T) {
	for _, f := range writeFaults {
		count := f.count
		if refused(f.kind) {
			count = 0 // for ever
		}
		t.Run(faultCase("idle mark", f.kind, count), func(t *testing.T) {
			db := cosmostest.UniqueID("db")
			s, repo, other, r := drainedOn(t, db)
			inject(t, db, cosmostest.Fault{Kind: f.kind, Count: count, Ops: []string{"patch"}, Coll: "recipients", ID: "^head$"})
			emptyPeeks(t, repo, r)
			if fired(t, db) == 0 {
				t.Fatal("the fault never fired; the test tested nothing")
			}
			clearFaults(t, db)
			if idle := isIdle(t, s, r); idle == refused(f.kind) {
				t.Fatalf("idle = %v after a mark that met %s", idle, f.kind)
			}
			more := notifications(2, r, 1)
			if _, err := other.Save(context.Background(), more); err != nil {
				t.Fatal(err)
			}
			drainExactly(t, other, r, ids(more))
			emptyPeeks(t, repo, r)
			if !isIdle(t, s, r) {
				t.Fatal("a mark after the faults did not apply")
			}
		})
	}
}

// A mark whose answer is lost is resent by the transport and meets its
// own effect: a 412, which MarkIdle reports as a conflict (the hub ignores
// it), while the mark is there.
func TestAMarksResendMeetsItsOwnMark(t *testing.T) {
	db := cosmostest.UniqueID("db")
	s, _, _, r := drainedOn(t, db)
	ctx := context.Background()
	st, err := s.LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	inject(t, db, cosmostest.Fault{Kind: cosmostest.LostUnavailable, Count: 1, Ops: []string{"patch"}, Coll: "recipients", ID: "^head$"})
	err = s.MarkIdle(ctx, r, st.Head)
	if fired(t, db) != 1 {
		t.Fatal("the fault never fired; the test tested nothing")
	}
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a resent mark: %v; want the conflict of its own mark", err)
	}
	if !isIdle(t, s, r) {
		t.Fatal("the mark whose answer was lost is not there")
	}
}

// twoInstances opens two stores on one database of srv, as two hub
// instances would, each with its repository.
func twoInstances(t *testing.T, srv *cosmostest.Server) ([]*cosmos.Store, []*hub.Hub) {
	t.Helper()
	db := cosmostest.UniqueID("db")
	stores := make([]*cosmos.Store, 2)
	repos := make([]*hub.Hub, 2)
	for i := range stores {
		s, err := cosmos.Open(context.Background(), cosmos.Config{
			Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: cosmostest.NewHTTPClient(),
			Throughput: "manual=100000",
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s
		repos[i] = hub.New(withoutBells{s}, hub.Options{}, nil)
		t.Cleanup(repos[i].Close)
	}
	return stores, repos
}

// laggingServer is a test server whose replicas are an hour behind: a read
// sees another instance's writes only when its session token names them.
func laggingServer(t *testing.T) *cosmostest.Server {
	t.Helper()
	opts := cosmostest.Default()
	opts.Lag, opts.LagFixed = time.Hour, true
	return cosmostest.StartWith(t, opts)
}

// Instance A marks a drained recipient idle; instance B saves for it; A's
// next Peek sees B's notifications, though A's replicas are an hour
// behind: the head A reads on the primary no longer says idle. A's idle
// Peeks before that cost one request each.
func TestASaveThroughAnotherInstanceEndsTheIdleMark(t *testing.T) {
	stores, repos := twoInstances(t, laggingServer(t))
	a, b := repos[0], repos[1]
	ctx := context.Background()
	r := uuid.NewString()
	if _, err := a.Save(ctx, notifications(2, r, 1)); err != nil {
		t.Fatal(err)
	}
	drainAll(t, a, r)
	for round := range 3 {
		emptyPeeks(t, a, r)
		if !isIdle(t, stores[0], r) {
			t.Fatal("A's recipient is not idle after its empty peeks")
		}
		byOp, total := (&costEnv{store: stores[0]}).measure(t, func() {
			if b, err := a.Peek(ctx, r, domain.GroupAll, ""); err != nil || b != nil {
				t.Fatalf("idle peek = %v, %v", b, err)
			}
		})
		if total.Requests != 1 {
			t.Fatalf("A's idle peek made %d requests, want 1: %v", total.Requests, byOp)
		}
		ns := notifications(1+round, r, 1)
		if _, err := b.Save(ctx, ns); err != nil {
			t.Fatal(err)
		}
		drainExactly(t, a, r, ids(ns))
	}
}

// A bundle instance A cut is dequeued through instance B, whose replicas
// are an hour behind: B's first, lagging load does not have the bundle,
// so B confirms on a fresh load before it could answer NOT_FOUND, and the
// Dequeue succeeds. After it, neither instance hands the bundle out again,
// and a second Dequeue of it is NOT_FOUND on both.
func TestADequeueThroughALaggingInstanceSucceeds(t *testing.T) {
	stores, repos := twoInstances(t, laggingServer(t))
	a, b := repos[0], repos[1]
	ctx := context.Background()
	r := uuid.NewString()
	for round := range 3 {
		ns := notifications(2, r, 1)
		if _, err := a.Save(ctx, ns); err != nil {
			t.Fatal(err)
		}
		bundle, err := a.Peek(ctx, r, domain.GroupAll, "")
		if err != nil || bundle == nil || !slices.Equal(bundle.NotificationIDs, ids(ns)) {
			t.Fatalf("peek through A = %v, %v", bundle, err)
		}
		byOp, total := (&costEnv{store: stores[1]}).measure(t, func() {
			if err := b.Dequeue(ctx, r, bundle.ID); err != nil {
				t.Fatalf("round %d: dequeue through B: %v", round, err)
			}
		})
		n := total.Requests
		t.Logf("round %d: dequeue through the lagging instance: %d requests (%s)", round, n, byOpCharges(byOp))
		if n <= 2 {
			t.Fatalf("the dequeue made %d requests: its lagging load had the bundle, so the test tested nothing", n)
		}
		for i, repo := range repos {
			if again, err := repo.Peek(ctx, r, domain.GroupAll, ""); err != nil || again != nil {
				t.Fatalf("peek through instance %d after the dequeue = %v, %v; want nothing", i, again, err)
			}
			if err := repo.Dequeue(ctx, r, bundle.ID); !errors.Is(err, domain.ErrNotFound) {
				t.Fatalf("second dequeue through instance %d: %v; want NOT_FOUND", i, err)
			}
		}
	}
}
