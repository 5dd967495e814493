package cosmos_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// The writes TestEveryWriteSurvivesALostOrRefusedAnswer leaves out (issue
// 19): the abort of a save and its rollback, the retention sweep's batches,
// the leases and the notices, each under every fault of writeFaults.

// faultCase names a write × fault case as the matrix does.
func faultCase(write string, kind cosmostest.FaultKind, count int) string {
	name := write + "/" + string(kind)
	if count == 1 {
		name += "-once"
	}
	return name
}

// refused says the fault answers without applying the write.
func refused(kind cosmostest.FaultKind) bool {
	return kind == cosmostest.Refuse503 || kind == cosmostest.RefuseRetryWith
}

// firedEach returns how often each rule of db fired, in the order added.
func firedEach(t *testing.T, db string) []int {
	t.Helper()
	rules, err := server.Faults()
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, r := range rules {
		if r.DB == db {
			out = append(out, r.Fired)
		}
	}
	return out
}

// abortWrites are the writes of a save's abort: the commit record marked
// aborted (a lost answer's resend meets a 412), and the rollback's: the
// head's batch that drops the reservation (the reserve batch is the first
// head batch, hence Skip), the deletes of the save's pages and id
// documents.
var abortWrites = []struct {
	name string
	rule cosmostest.Fault
	// holds: refused, the save's reservation stays until its lease ends.
	holds bool
}{
	{"abort record", cosmostest.Fault{Ops: []string{"replace"}, Coll: "saves", Body: `"state":"aborted"`}, true},
	{"rollback head", cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", Type: "head", Skip: 1}, true},
	{"rollback page delete", cosmostest.Fault{Ops: []string{"delete"}, Coll: "drawers"}, false},
	{"rollback id delete", cosmostest.Fault{Ops: []string{"delete"}, Coll: "ids"}, false},
}

// A save whose commit is refused is aborted and rolled back; every write of
// the abort meets every fault. The save fails and shows nothing, the hub
// resends it, and its notifications are delivered exactly once: at once
// when the abort's writes applied, after the save's lease otherwise (an
// abort that could not be written is finished by whoever loads the
// recipient after the lease).
func TestEveryAbortWriteSurvivesALostOrRefusedAnswer(t *testing.T) {
	for _, w := range abortWrites {
		for _, f := range writeFaults {
			t.Run(faultCase(w.name, f.kind, f.count), func(t *testing.T) {
				clock := &costClock{now: time.Now()}
				db := cosmostest.UniqueID("db")
				repo := hub.New(open(t, cosmos.Config{Database: db, Now: clock.Now, Lease: time.Minute}), hub.Options{}, nil)
				t.Cleanup(repo.Close)
				ctx := context.Background()
				r := uuid.NewString()
				ns := notifications(3, r, 1)
				rule := w.rule
				rule.Kind, rule.Count = f.kind, f.count
				// The commit is refused for as long as the save runs: it aborts.
				inject(t, db,
					cosmostest.Fault{Kind: cosmostest.Refuse503, Ops: []string{"replace"}, Coll: "saves", Body: `"state":"committed"`},
					rule)
				_, err := repo.Save(ctx, ns)
				n := firedEach(t, db)
				clearFaults(t, db)
				if len(n) != 2 || n[0] == 0 || n[1] == 0 {
					t.Fatalf("faults fired %v (commit refusals, abort faults); the test tested nothing", n)
				}
				if err == nil {
					t.Fatal("a save whose commit was refused succeeded")
				}
				if b, perr := repo.Peek(ctx, r, domain.GroupAll, ""); perr != nil || b != nil {
					t.Fatalf("peek after a refused save (%v) = %v, %v; want nothing", err, b, perr)
				}
				if w.holds && refused(f.kind) {
					// The abort could not be written: the save's pending
					// record holds its ids and reservation until its lease
					// ends. A resend meanwhile may be told to try again.
					_, err = repo.Save(ctx, ns)
					if err != nil && !errors.Is(err, domain.ErrUnavailable) {
						t.Fatalf("a resend within the aborted save's lease: %v; want success or unavailable", err)
					}
					t.Logf("a resend within the lease: %v", err)
					clock.advance(2 * time.Minute) // the lease ends
				}
				saveAsTheHub(t, repo, db, ns, err)
				drainExactly(t, repo, r, ids(ns))
			})
		}
	}
}

// sweepWrites are the writes of ApplySweep: the id documents' and the
// drawers' delete batches, then the catalog's batch (entry and cursor
// replaced or deleted, the expired bundle deleted).
var sweepWrites = []struct {
	name string
	rule cosmostest.Fault
}{
	{"id release", cosmostest.Fault{Ops: []string{"batch"}, Coll: "ids", Body: `"operationType":"Delete"`}},
	{"page deletes", cosmostest.Fault{Ops: []string{"batch"}, Coll: "drawers", Body: `"operationType":"Delete"`}},
	{"catalog batch", cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", ID: "^[ec]:", Body: `"operationType":"(Replace|Delete)"`}},
	{"bundle delete", cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", Body: `"id":"b:[^"]*","operationType":"Delete"|"operationType":"Delete","id":"b:`}},
}

// drainedAndWaiting makes a recipient that saved 3 notifications in one
// drawer (its id returned) and dequeued them, and has 2 more waiting in a
// cabinet of their own (returned), on a hub over s with a retention of an
// hour.
func drainedAndWaiting(t *testing.T, s *cosmos.Store, clock *costClock) (*hub.Hub, string, string, []domain.Notification) {
	t.Helper()
	repo := hub.New(s, hub.Options{Now: clock.Now, Retention: time.Hour, SweepInterval: time.Hour}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	acked := notifications(3, r, 1)
	if _, err := repo.Save(ctx, acked); err != nil {
		t.Fatal(err)
	}
	state, err := s.LoadRecipient(ctx, r)
	if err != nil || len(state.Entries) != 1 {
		t.Fatalf("state %+v, %v", state, err)
	}
	// Drained once its drawer is older than the retention, the cabinet
	// goes at the next pass and the drawer is kept for the bundle (a
	// younger drawer would stay in the entry, to be appended to).
	clock.advance(2 * time.Hour)
	drainExactly(t, repo, r, ids(acked))
	waiting := notifications(2, r, 1)
	for i := range waiting {
		waiting[i].Origin = domain.OriginCharges // a cabinet of their own
	}
	if _, err := repo.Save(ctx, waiting); err != nil {
		t.Fatal(err)
	}
	return repo, r, state.Entries[0].Drawers[0].ID, waiting
}

// A recipient with an expired dequeued bundle (one cabinet, all
// acknowledged) and unacknowledged notifications in another cabinet is
// swept under every fault of every sweep write. A pass that fails is
// followed by the next (the sweeper's), which completes, as does the one
// after; the expired bundle is gone and the unacknowledged notifications
// are delivered, exactly.
func TestEverySweepWriteSurvivesALostOrRefusedAnswer(t *testing.T) {
	for _, w := range sweepWrites {
		for _, f := range writeFaults {
			t.Run(faultCase(w.name, f.kind, f.count), func(t *testing.T) {
				clock := &costClock{now: time.Now()}
				db := cosmostest.UniqueID("db")
				s := open(t, cosmos.Config{Database: db})
				repo, r, _, kept := drainedAndWaiting(t, s, clock)
				ctx := context.Background()
				clock.advance(2 * time.Hour)
				rule := w.rule
				rule.Kind, rule.Count = f.kind, f.count
				sweepThroughFault(t, repo, db, rule)
				if err := repo.SweepNow(ctx); err != nil {
					t.Fatalf("a sweep after: %v", err)
				}
				waitOutLag() // a write whose answer was lost left this process no token of it
				if left, err := s.DequeuedBundles(ctx, r); err != nil || len(left) != 0 {
					t.Fatalf("dequeued bundles after the sweeps: %v, %v; want none (expired)", left, err)
				}
				drainExactly(t, repo, r, ids(kept))
			})
		}
	}
}

// keptWrites are the sweep writes of drawers kept for retained bundles:
// the catalog batch that takes a drawer out of its entry and records it
// kept, then, once its bundle is due, the deletes of its pages and the
// batch that deletes its record and the bundle.
var keptWrites = []struct {
	name string
	due  bool // in the pass after the retention, not the one after the dequeue
	rule cosmostest.Fault
}{
	{"kept record in the catalog batch", false, cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", Type: "kept"}},
	{"kept drawer's page deletes", true, cosmostest.Fault{Ops: []string{"batch"}, Coll: "drawers", Body: `"operationType":"Delete"`}},
	{"kept record's delete", true, cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", ID: "^k:"}},
}

// A recipient drains a cabinet; the pass after takes its drawer out of the
// catalog and keeps it for the retained bundle, the pass after the
// retention deletes both. Under every fault of each of those writes, the
// passes that follow finish: the bundle and the drawer are gone, and the
// notifications still waiting in another cabinet are delivered, exactly.
func TestEveryKeptDrawerWriteSurvivesALostOrRefusedAnswer(t *testing.T) {
	for _, w := range keptWrites {
		for _, f := range writeFaults {
			t.Run(faultCase(w.name, f.kind, f.count), func(t *testing.T) {
				clock := &costClock{now: time.Now()}
				db := cosmostest.UniqueID("db")
				s := open(t, cosmos.Config{Database: db, Now: clock.Now})
				repo, r, drawerID, kept := drainedAndWaiting(t, s, clock)
				ctx := context.Background()
				since := clock.Now().Add(-time.Hour)
				pass := func(under bool) {
					t.Helper()
					if under {
						rule := w.rule
						rule.Kind, rule.Count = f.kind, f.count
						inject(t, db, rule)
					}
					err := repo.SweepSince(ctx, since)
					if under {
						if fired(t, db) == 0 {
							t.Fatal("the fault never fired; the test tested nothing")
						}
						clearFaults(t, db)
					}
					if err != nil {
						t.Logf("the pass under the fault: %v", err)
					}
					if err := repo.SweepSince(ctx, since); err != nil { // the sweeper's next turn
						t.Fatalf("the next pass: %v", err)
					}
				}
				// Past the ten minutes a drained cabinet's cursor must
				// stand still before the cabinet goes; the bundle is
				// still retained (an hour).
				clock.advance(11 * time.Minute)
				pass(!w.due)
				if state, err := s.LoadRecipient(ctx, r); err != nil || len(state.Entries) != 1 || state.Entries[0].Origin != domain.OriginCharges {
					t.Fatalf("after the pass that keeps the drawer the catalog is %+v (%v)", state.Entries, err)
				}
				if items, err := s.ReadDrawer(ctx, drawerID, 0, 1<<40, 100); err != nil || len(items) != 3 {
					t.Fatalf("the kept drawer holds %d items (%v), want 3", len(items), err)
				}
				clock.advance(2 * time.Hour)
				since = clock.Now().Add(-time.Minute)
				pass(w.due)
				waitOutLag() // a write whose answer was lost left this process no token of it
				if left, err := s.DequeuedBundles(ctx, r); err != nil || len(left) != 0 {
					t.Fatalf("dequeued bundles after the passes: %v, %v; want none (expired)", left, err)
				}
				if items, err := s.ReadDrawer(ctx, drawerID, 0, 1<<40, 100); err != nil || len(items) != 0 {
					t.Fatalf("the kept drawer holds %d items past its retention (%v)", len(items), err)
				}
				if n := countDocs(t, db, "saves"); n != 1 {
					t.Fatalf("%d commit records left, want the waiting save's alone", n)
				}
				drainExactly(t, repo, r, ids(kept))
			})
		}
	}
}

// leaseUnderTest is a lease as its users see it: take (or renew) it for a
// holder, saying whether the holder has it; release it.
type leaseUnderTest struct {
	name    string
	rule    cosmostest.Fault // what picks the lease's writes (Ops set per case)
	take    func(ctx context.Context, s *cosmos.Store, holder string) (bool, error)
	release func(ctx context.Context, s *cosmos.Store, holder string) error
}

func leasesUnderTest(recipient, bundleID string) []leaseUnderTest {
	const d = time.Minute
	return []leaseUnderTest{
		{
			name: "build lease",
			rule: cosmostest.Fault{Coll: "recipients", ID: "^" + regexp.QuoteMeta("l:"+bundleID) + "$"},
			take: func(ctx context.Context, s *cosmos.Store, holder string) (bool, error) {
				current, _, err := s.AcquireBuild(ctx, recipient, bundleID, holder, d)
				return err == nil && current == holder, err
			},
			release: func(ctx context.Context, s *cosmos.Store, holder string) error {
				return s.ReleaseBuild(ctx, recipient, bundleID, holder)
			},
		},
		{
			name: "sweep lease",
			rule: cosmostest.Fault{Coll: "recipients", ID: "^sweep$"},
			take: func(ctx context.Context, s *cosmos.Store, holder string) (bool, error) {
				return s.HoldSweepLease(ctx, holder, d)
			},
			release: func(ctx context.Context, s *cosmos.Store, holder string) error {
				return s.ReleaseSweepLease(ctx, holder)
			},
		},
	}
}

// Every write of the leases (takeLease's create, its replace of an expired
// lease or of the holder's own, dropLease's delete) under every fault. The
// caller does as the hub does: a take answered with an error is tried
// again (the sweeper's next turn, the next peek of the bundle), a release
// answered with an error is left to the lease's expiry. There is at most
// one holder at a time, and a lost answer never leaves the lease unusable
// past its expiry.
func TestEveryLeaseWriteSurvivesALostOrRefusedAnswer(t *testing.T) {
	scenarios := []struct {
		name string
		op   string
	}{
		{"create", "create"},    // a first take
		{"takeover", "replace"}, // a take of an expired lease
		{"renewal", "replace"},  // the holder's take of its own
		{"release", "delete"},
	}
	for _, lk := range leasesUnderTest("", "") {
		for _, sc := range scenarios {
			for _, f := range writeFaults {
				t.Run(faultCase(lk.name+" "+sc.name, f.kind, f.count), func(t *testing.T) {
					clock := &costClock{now: time.Now()}
					db := cosmostest.UniqueID("db")
					s := open(t, cosmos.Config{Database: db, Now: clock.Now})
					ctx := context.Background()
					var l leaseUnderTest
					for _, c := range leasesUnderTest(uuid.NewString(), uuid.NewString()) {
						if c.name == lk.name {
							l = c
						}
					}
					take := func(holder string, want bool) {
						t.Helper()
						got, err := l.take(ctx, s, holder)
						if err != nil || got != want {
							t.Fatalf("%s takes the lease: %v, %v; want %v", holder, got, err, want)
						}
					}
					rule := l.rule
					rule.Ops, rule.Kind, rule.Count = []string{sc.op}, f.kind, f.count
					// The faulted call, by holder "x"; "a" held the lease before.
					var err error
					var got bool
					switch sc.name {
					case "create":
						inject(t, db, rule)
						got, err = l.take(ctx, s, "x")
					case "takeover":
						take("a", true)
						clock.advance(2 * time.Minute)
						inject(t, db, rule)
						got, err = l.take(ctx, s, "x")
					case "renewal":
						take("x", true)
						clock.advance(30 * time.Second)
						inject(t, db, rule)
						got, err = l.take(ctx, s, "x")
					case "release":
						take("x", true)
						inject(t, db, rule)
						err = l.release(ctx, s, "x")
					}
					if fired(t, db) == 0 {
						t.Fatal("the fault never fired; the test tested nothing")
					}
					clearFaults(t, db)
					t.Logf("the faulted call answered %v, %v", got, err)
					if sc.name == "release" {
						// Released or not, the lease is usable again by its
						// expiry at the latest, and has one holder.
						ok, err2 := l.take(ctx, s, "y")
						if err2 != nil {
							t.Fatal(err2)
						}
						if err == nil && !ok {
							t.Fatal("a lease released without an error is still held")
						}
						if !ok {
							clock.advance(2 * time.Minute)
							take("y", true)
						}
						take("z", false)
						if err := l.release(ctx, s, "x"); err != nil {
							t.Fatalf("the old holder's release again: %v", err)
						}
						take("z", false)
						return
					}
					if err == nil && !got {
						t.Fatalf("a take answered without an error left the lease to another (x's lease is free)")
					}
					if err != nil {
						take("x", true) // tried again
					}
					take("y", false) // one holder
					clock.advance(2 * time.Minute)
					take("y", true) // usable past the expiry
					take("x", false)
				})
			}
		}
	}
}

// noticeWrites are the writes of the notices: the dequeue's batch that
// writes the notice with the dequeued bundle, the batch that removes
// delivered notices and the single delete of the fallback (a batch that
// finds one notice gone is redone one notice at a time).
var noticeWrites = []string{"acknowledge with notice", "notice removal batch", "notice single delete"}

// Every write of the notices under every fault. A dequeue's notice is
// never lost: it is listed until removed; a removal whose answer was lost
// is not an error when tried again, and a removal refused leaves the
// notices listed.
func TestEveryNoticeWriteSurvivesALostOrRefusedAnswer(t *testing.T) {
	for _, w := range noticeWrites {
		for _, f := range writeFaults {
			t.Run(faultCase(w, f.kind, f.count), func(t *testing.T) {
				db := cosmostest.UniqueID("db")
				s := open(t, cosmos.Config{Database: db})
				repo := hub.New(s, hub.Options{Notices: func(domain.Origin) bool { return true }}, nil)
				t.Cleanup(repo.Close)
				ctx := context.Background()
				r := uuid.NewString()
				listed := func() []string {
					t.Helper()
					ns, err := s.Notices(ctx, domain.Origins, 100)
					if err != nil {
						t.Fatalf("notices: %v", err)
					}
					var out []string
					for _, n := range ns {
						out = append(out, n.BundleID)
					}
					slices.Sort(out)
					return out
				}
				sorted := func(xs ...string) []string { slices.Sort(xs); return xs }
				if w == "acknowledge with notice" {
					if _, err := repo.Save(ctx, notifications(2, r, 1)); err != nil {
						t.Fatal(err)
					}
					b, err := repo.Peek(ctx, r, domain.GroupAll, "")
					if err != nil || b == nil {
						t.Fatalf("peek: %v, %v", b, err)
					}
					inject(t, db, cosmostest.Fault{Kind: f.kind, Count: f.count, Ops: []string{"batch"}, Coll: "recipients", Type: "dequeued"})
					err = repo.Dequeue(ctx, r, b.ID)
					if fired(t, db) == 0 {
						t.Fatal("the fault never fired; the test tested nothing")
					}
					clearFaults(t, db)
					if err != nil {
						if got := listed(); len(got) != 0 && !slices.Equal(got, []string{b.ID}) {
							t.Fatalf("notices after a failed dequeue: %v", got)
						}
						if err = repo.Dequeue(ctx, r, b.ID); errors.Is(err, domain.ErrNotFound) {
							err = nil
						}
					}
					if err != nil {
						t.Fatalf("dequeue: %v", err)
					}
					if got := listed(); !slices.Equal(got, []string{b.ID}) {
						t.Fatalf("notices after the dequeue: %v; want exactly %s's", got, b.ID)
					}
					if rec, err := s.DequeuedBundle(ctx, r, b.ID); err != nil || rec.ID != b.ID {
						t.Fatalf("the notice's bundle: %+v, %v", rec, err)
					}
					ns, _ := s.Notices(ctx, domain.Origins, 100)
					if err := s.RemoveNotices(ctx, ns); err != nil {
						t.Fatal(err)
					}
					if got := listed(); len(got) != 0 {
						t.Fatalf("notices after their removal: %v", got)
					}
					return
				}
				b1 := cycleOne(t, repo, r, domain.OriginCharges)
				b2 := cycleOne(t, repo, r, domain.OriginCharges)
				all, err := s.Notices(ctx, domain.Origins, 100)
				if err != nil || len(all) != 2 {
					t.Fatalf("notices: %+v, %v; want 2", all, err)
				}
				rule := cosmostest.Fault{Kind: f.kind, Count: f.count, Coll: "recipients"}
				faulted := sorted(b1, b2)
				if w == "notice removal batch" {
					rule.Ops, rule.ID, rule.Body = []string{"batch"}, "^n:", `"operationType":"Delete"`
				} else {
					// b1's notice is gone already: the batch conflicts, and
					// b2's notice is deleted on its own.
					var first []store.Notice
					for _, n := range all {
						if n.BundleID == b1 {
							first = append(first, n)
						}
					}
					if err := s.RemoveNotices(ctx, first); err != nil {
						t.Fatal(err)
					}
					rule.Ops, rule.ID = []string{"delete"}, "^"+regexp.QuoteMeta("n:"+b2+":")
					faulted = []string{b2}
				}
				inject(t, db, rule)
				err = s.RemoveNotices(ctx, all)
				if fired(t, db) == 0 {
					t.Fatal("the fault never fired; the test tested nothing")
				}
				clearFaults(t, db)
				t.Logf("the removal under the fault: %v", err)
				got := listed()
				if err == nil && len(got) != 0 {
					t.Fatalf("notices after their removal: %v", got)
				}
				if refused(f.kind) && err != nil && !slices.Equal(got, faulted) {
					t.Fatalf("notices after a refused removal: %v; want %v (not removed, not lost)", got, faulted)
				}
				if d := slices.DeleteFunc(slices.Clone(got), func(b string) bool { return slices.Contains(faulted, b) }); len(d) != 0 {
					t.Fatalf("notices after the removal: %v; only %v were in doubt", got, faulted)
				}
				// The notifier removes them again: no error, whatever applied.
				if err := s.RemoveNotices(ctx, all); err != nil {
					t.Fatalf("the removal again: %v", err)
				}
				if got := listed(); len(got) != 0 {
					t.Fatalf("notices after the removal again: %v", got)
				}
			})
		}
	}
}
