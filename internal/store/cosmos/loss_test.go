package cosmos_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// Every write's answer can be lost after the write applied, every write can
// be refused before it applies, and a session read can find no replica that
// has caught up (404 with substatus 1002). The tests here have the test
// server do each of these to the store's writes and reads, and check that no
// acknowledged notification is lost, none is delivered twice, a Save that
// failed leaves nothing visible and no cabinet gets stuck.

// inject adds fault rules for database db, removed when the test ends.
func inject(t *testing.T, db string, rules ...cosmostest.Fault) {
	t.Helper()
	for i := range rules {
		rules[i].DB = db
	}
	if err := server.AddFaults(rules...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.ClearFaults(db) })
}

// fired returns how often the rules of db fired.
func fired(t *testing.T, db string) int {
	t.Helper()
	rules, err := server.Faults()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rules {
		if r.DB == db {
			n += r.Fired
		}
	}
	return n
}

// clearFaults ends the faults of db.
func clearFaults(t *testing.T, db string) {
	t.Helper()
	if err := server.ClearFaults(db); err != nil {
		t.Fatal(err)
	}
}

// saveAsTheHub saves ns as a producer does: a Save answered with an error is
// sent again, once the faults are over; first is the first answer.
func saveAsTheHub(t *testing.T, repo *hub.Hub, db string, ns []domain.Notification, first error) {
	t.Helper()
	if first == nil {
		return
	}
	clearFaults(t, db)
	res, err := repo.Save(context.Background(), ns)
	if err != nil {
		t.Fatalf("the resent save: %v", err)
	}
	if res.Saved+res.Duplicates != len(ns) {
		t.Fatalf("the resent save answered %+v for %d notifications", res, len(ns))
	}
	t.Logf("the first save answered %v; the resend %+v", first, res)
}

// drainExactly peeks and dequeues the recipient's bundles until none is
// left, and fails unless it got exactly want, in order, each once.
func drainExactly(t *testing.T, repo *hub.Hub, recipient string, want []string) {
	t.Helper()
	ctx := context.Background()
	var got []string
	for range len(want) + 1 {
		b, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
		if err != nil {
			t.Fatalf("peek after %d of %d notifications: %v (the cabinet is stuck)", len(got), len(want), err)
		}
		if b == nil {
			break
		}
		got = append(got, b.NotificationIDs...)
		if err := repo.Dequeue(ctx, recipient, b.ID); err != nil {
			t.Fatalf("dequeue: %v", err)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %d notifications %v, want %d %v", len(got), got, len(want), want)
	}
}

// (a) The commit applies and its answer is lost: the abort that follows
// meets a 412 from the committed record. The save is committed, so it is
// finalized, not rolled back: its notifications are delivered without a
// resend, and a resend (to another instance) is a duplicate.
func TestAnAbortAfterALostCommitAnswerFinalizesTheSave(t *testing.T) {
	for _, kind := range []cosmostest.FaultKind{cosmostest.LostUnavailable, cosmostest.LostTimeout, cosmostest.LostReset} {
		t.Run(string(kind), func(t *testing.T) {
			db := cosmostest.UniqueID("db")
			repo := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
			t.Cleanup(repo.Close)
			r := uuid.NewString()
			ns := notifications(5, r, 1)
			inject(t, db, cosmostest.Fault{Kind: kind, Ops: []string{"replace"}, Coll: "saves", Body: `"state":"committed"`})
			_, err := repo.Save(context.Background(), ns)
			if fired(t, db) == 0 {
				t.Fatal("no commit answer was lost; the test tested nothing")
			}
			clearFaults(t, db)
			if committedSaves(t, db) != 1 {
				t.Fatalf("%d committed saves; the lost commit did not apply", committedSaves(t, db))
			}
			b, perr := repo.Peek(context.Background(), r, domain.GroupAll, "")
			if perr != nil || b == nil || !slices.Equal(b.NotificationIDs, ids(ns)) {
				t.Fatalf("peek after a save whose commit applied (answered %v) = %v, %v; want its %d notifications", err, b, perr, len(ns))
			}
			other := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
			t.Cleanup(other.Close)
			if res, err := other.Save(context.Background(), ns); err != nil || res.Duplicates != len(ns) {
				t.Fatalf("the resend to another instance = %+v, %v; want %d duplicates", res, err, len(ns))
			}
			drainExactly(t, other, r, ids(ns))
		})
	}
}

// committedSaves counts the commit records of db that say committed.
func committedSaves(t *testing.T, db string) int {
	t.Helper()
	pager := containerOf(t, db, "saves").NewQueryItemsPager("SELECT c.id FROM c WHERE c.state = 'committed'", azcosmos.NewPartitionKey(), nil)
	n := 0
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Items)
	}
	return n
}

// (b) A save committed and its process died before finalizing: whoever
// settles its expired reservation must not take a session read's 404/1002
// (no replica caught up yet) for an abort.
func TestASettlerDoesNotTakeReadSessionNotAvailableForAnAbort(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	db := cosmostest.UniqueID("db")
	f := newFaulty()
	dying := open(t, cosmos.Config{Database: db, Transport: f, Now: clock, Lease: time.Minute})
	cosmos.SetFinalizeFor(dying, 0)
	repo := hub.New(dying, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	r := uuid.NewString()
	ns := notifications(4, r, 1)
	// The process is gone from the moment its commit applied.
	f.goneAfterCommit()
	res, err := repo.Save(context.Background(), ns)
	if err != nil || res.Saved != len(ns) {
		t.Fatalf("a committed save = %+v, %v; want %d saved", res, err, len(ns))
	}
	inject(t, db, cosmostest.Fault{Kind: cosmostest.ReadSessionNotAvailable, Ops: []string{"read"}, Coll: "saves"})
	now.Add(int64(2 * time.Minute))
	survivor := hub.New(open(t, cosmos.Config{Database: db, Now: clock, Lease: time.Minute}), hub.Options{}, nil)
	t.Cleanup(survivor.Close)
	b, err := survivor.Peek(context.Background(), r, domain.GroupAll, "")
	if err == nil && (b == nil || !slices.Equal(b.NotificationIDs, ids(ns))) {
		t.Fatalf("peek after the settle = %v; want the committed save's %d notifications", b, len(ns))
	}
	clearFaults(t, db)
	drainExactly(t, survivor, r, ids(ns))
}

// (b) The id look-up of a save must not take a lagging read of another
// save's commit record (404/1002) for an abort: the id is a duplicate.
func TestAnIDLookupDoesNotTakeReadSessionNotAvailableForAnAbort(t *testing.T) {
	db := cosmostest.UniqueID("db")
	first := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
	t.Cleanup(first.Close)
	r := uuid.NewString()
	ns := notifications(3, r, 1)
	if _, err := first.Save(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	second := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
	t.Cleanup(second.Close)
	inject(t, db, cosmostest.Fault{Kind: cosmostest.ReadSessionNotAvailable, Ops: []string{"read"}, Coll: "saves"})
	res, err := second.Save(context.Background(), ns)
	if err == nil && res.Duplicates != len(ns) {
		t.Fatalf("saving stored ids again while the commit record's read lags = %+v; want %d duplicates", res, len(ns))
	}
	saveAsTheHub(t, second, db, ns, err)
	drainExactly(t, second, r, ids(ns))
}

// (b) The notifier must not take a lagging read of a dequeued bundle
// (404/1002) for "no such bundle": the domain would never hear of it.
func TestADequeuedBundleIsNotMissedOnReadSessionNotAvailable(t *testing.T) {
	db := cosmostest.UniqueID("db")
	s := open(t, cosmos.Config{Database: db})
	repo := hub.New(s, hub.Options{Notices: func(domain.Origin) bool { return true }}, nil)
	t.Cleanup(repo.Close)
	r := uuid.NewString()
	bid := cycleOne(t, repo, r, domain.OriginCharges)
	inject(t, db, cosmostest.Fault{Kind: cosmostest.ReadSessionNotAvailable, Ops: []string{"read"}, Coll: "recipients", ID: "^b:"})
	rec, err := s.DequeuedBundle(context.Background(), r, bid)
	if errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("a dequeued bundle read from a lagging replica is reported missing: %v", err)
	}
	if err == nil && rec.ID != bid {
		t.Fatalf("dequeued bundle %q, want %q", rec.ID, bid)
	}
	if fired(t, db) == 0 {
		t.Fatal("no read was answered 1002; the test tested nothing")
	}
}

// (c) A page batch refused (449 RetryWith, 503) wrote nothing: the save
// must not commit without its pages. Only a 409 says a page exists.
func TestARefusedPageBatchIsNotTakenForWritten(t *testing.T) {
	for _, kind := range []cosmostest.FaultKind{cosmostest.RefuseRetryWith, cosmostest.Refuse503} {
		t.Run(string(kind), func(t *testing.T) {
			db := cosmostest.UniqueID("db")
			repo := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
			t.Cleanup(repo.Close)
			r := uuid.NewString()
			ns := notifications(5, r, 1)
			inject(t, db, cosmostest.Fault{Kind: kind, Ops: []string{"batch"}, Coll: "drawers"})
			_, err := repo.Save(context.Background(), ns)
			if fired(t, db) == 0 {
				t.Fatal("no page batch was refused; the test tested nothing")
			}
			saveAsTheHub(t, repo, db, ns, err)
			drainExactly(t, repo, r, ids(ns))
		})
	}
}

// A write whose connection is cut after it applied gets no answer at all:
// the Save is UNAVAILABLE (the producer resends it with the same ids), not
// INTERNAL (which it would not resend), and the resend delivers it once.
func TestACutConnectionIsUnavailableAndTheResendDeliversOnce(t *testing.T) {
	db := cosmostest.UniqueID("db")
	repo := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
	t.Cleanup(repo.Close)
	r := uuid.NewString()
	ns := notifications(5, r, 1)
	inject(t, db, cosmostest.Fault{Kind: cosmostest.LostReset, Ops: []string{"create", "batch"}})
	_, err := repo.Save(context.Background(), ns)
	if fired(t, db) == 0 {
		t.Fatal("no connection was cut; the test tested nothing")
	}
	clearFaults(t, db)
	if err != nil && !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("a Save whose connection was cut: %v, want UNAVAILABLE (or success)", err)
	}
	if res, err := repo.Save(context.Background(), ns); err != nil || res.Saved+res.Duplicates != len(ns) {
		t.Fatalf("the resend = %+v, %v", res, err)
	}
	drainExactly(t, repo, r, ids(ns))
}
