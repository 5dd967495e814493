package cosmos_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// Two faults in a row: a save write whose answer is lost (once, or on every
// attempt the transport makes), then the read that would tell its outcome
// refused or answered 404/1002 as often. Through two instances on one
// server: a Save answered with a definite failure leaves nothing visible on
// the other, and once its lease has ended the resend through the other
// instance delivers every notification exactly once, and the cabinet goes on.
func TestASaveSurvivesALostAnswerAndAFailedCheck(t *testing.T) {
	checks := []struct {
		name string
		rule func(coll string) []cosmostest.Fault
	}{
		{"primary read refused", func(coll string) []cosmostest.Fault {
			return []cosmostest.Fault{{Kind: cosmostest.Refuse503, Ops: []string{"batch"}, Coll: coll, Count: 12}}
		}},
		{"commit answer lost", func(string) []cosmostest.Fault {
			return []cosmostest.Fault{{Kind: cosmostest.LostTimeout, Ops: []string{"replace"}, Coll: "saves", Body: `"state":"committed"`, Count: 6}}
		}},
		{"session read 1002", func(string) []cosmostest.Fault {
			return []cosmostest.Fault{
				{Kind: cosmostest.ReadSessionNotAvailable, Ops: []string{"read", "query"}, Count: 12},
			}
		}},
	}
	for _, w := range storeWrites {
		if w.in != "save" {
			continue
		}
		for _, lost := range []struct {
			kind  cosmostest.FaultKind
			count int
		}{{cosmostest.LostTimeout, 6}, {cosmostest.LostUnavailable, 1}, {cosmostest.RefuseRetryWith, 2}, {cosmostest.RefuseRetryWith, 6}} {
			for _, c := range checks {
				name := w.name + "/" + string(lost.kind) + "/" + c.name
				t.Run(name, func(t *testing.T) {
					var now atomic.Int64
					now.Store(time.Now().UnixNano())
					clock := func() time.Time { return time.Unix(0, now.Add(int64(time.Millisecond))) }
					db := cosmostest.UniqueID("db")
					one := hub.New(open(t, cosmos.Config{Database: db, Now: clock, Lease: time.Minute}), hub.Options{}, nil)
					t.Cleanup(one.Close)
					two := hub.New(open(t, cosmos.Config{Database: db, Now: clock, Lease: time.Minute}), hub.Options{}, nil)
					t.Cleanup(two.Close)
					ctx := context.Background()
					r := uuid.NewString()
					before := notifications(2, r, 1)
					if _, err := one.Save(ctx, before); err != nil {
						t.Fatal(err)
					}
					ns := notifications(3, r, 1)
					rule := w.rule
					rule.Kind, rule.Count = lost.kind, lost.count
					inject(t, db, append([]cosmostest.Fault{rule}, c.rule(rule.Coll)...)...)
					_, err := one.Save(ctx, ns)
					if fired(t, db) == 0 {
						t.Fatal("no fault fired")
					}
					clearFaults(t, db)
					if err != nil && !errors.Is(err, domain.ErrUnavailable) {
						// A definite failure: nothing of it may show, now or later.
						now.Add(int64(2 * time.Minute))
						b, perr := two.Peek(ctx, r, domain.GroupAll, "")
						if perr != nil || b == nil || !slices.Equal(b.NotificationIDs, ids(before)) {
							t.Fatalf("after a save that failed (%v): peek = %v, %v; want only the first %d", err, b, perr, len(before))
						}
						if err := two.Dequeue(ctx, r, b.ID); err != nil {
							t.Fatal(err)
						}
						if b, perr := two.Peek(ctx, r, domain.GroupAll, ""); perr != nil || b != nil {
							t.Fatalf("a save that failed (%v) shows: %v, %v", err, b, perr)
						}
						before = nil
					}
					t.Logf("the save answered %v", err)
					resendAfterLease(t, &now, two, ns)
					drainExactly(t, two, r, append(ids(before), ids(ns)...))
					goesOn(t, one, one, r)
				})
			}
		}
	}
}

// A save whose containers split between its reserve and its commit, the
// commit's answer lost once: its session tokens name the old ranges. Its
// notifications are delivered once through either instance and the cabinet
// goes on.
func TestASaveAcrossASplitWithALostCommitAnswer(t *testing.T) {
	db, one, two, split := splitOnFirst(t, func(req *http.Request) bool {
		return toContainer(req, "saves") && req.Method == http.MethodPut
	})
	ctx, r := context.Background(), uuid.NewString()
	first := savedBefore(t, two, notifications(4, r, 1))
	ns := notifications(30, r, 1)
	inject(t, db, cosmostest.Fault{Kind: cosmostest.LostUnavailable, Ops: []string{"replace"}, Coll: "saves", Body: `"state":"committed"`, Count: 1})
	_, err := one.Save(ctx, ns)
	if !split.Load() || fired(t, db) == 0 {
		t.Fatal("no split or no lost answer")
	}
	clearFaults(t, db)
	saveAsTheHub(t, one, db, ns, err)
	drainExactly(t, two, r, append(ids(first), ids(ns)...))
	goesOn(t, one, one, r)
}

// A settle by another instance racing the original's finalize: the lease
// ends between the commit and the finalize, and the other instance settles
// the committed save (and Peeks it) before the finalize is sent. The save
// succeeds, its notifications are delivered once, the cabinet goes on.
func TestASettleRacingTheFinalizeDeliversOnce(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Add(int64(time.Millisecond))) }
	db := cosmostest.UniqueID("db")
	f := newFaulty()
	two := hub.New(open(t, cosmos.Config{Database: db, Now: clock, Lease: time.Minute}), hub.Options{}, nil)
	t.Cleanup(two.Close)
	ctx := context.Background()
	r := uuid.NewString()
	var committed, raced atomic.Bool
	var peeked []string
	f.set(func(req *http.Request) int {
		if toContainer(req, "saves") && req.Method == http.MethodPut {
			committed.Store(true)
			return 0
		}
		if committed.Load() && toContainer(req, "recipients") && req.Method == http.MethodPut && raced.CompareAndSwap(false, true) {
			now.Add(int64(2 * time.Minute))
			b, err := two.Peek(ctx, r, domain.GroupAll, "")
			if err != nil || b == nil {
				t.Errorf("the settler's peek = %v, %v", b, err)
				return 0
			}
			peeked = b.NotificationIDs
			if err := two.Dequeue(ctx, r, b.ID); err != nil {
				t.Errorf("dequeue: %v", err)
			}
		}
		return 0
	})
	one := hub.New(open(t, cosmos.Config{Database: db, Transport: f, Now: clock, Lease: time.Minute}), hub.Options{}, nil)
	t.Cleanup(one.Close)
	ns := notifications(3, r, 1)
	if _, err := one.Save(ctx, ns); err != nil {
		t.Fatalf("the save: %v", err)
	}
	if !raced.Load() || !slices.Equal(peeked, ids(ns)) {
		t.Fatalf("raced %v, the settler peeked %v; want %v", raced.Load(), peeked, ids(ns))
	}
	for _, h := range []*hub.Hub{one, two} {
		if b, err := h.Peek(ctx, r, domain.GroupAll, ""); err != nil || b != nil {
			t.Fatalf("peek after the dequeue = %v, %v; want nothing", b, err)
		}
	}
	goesOn(t, one, two, r)
}

// A save of two reserve batches whose part batch applies with its answer
// lost on every attempt, and whose own rollback then cannot read the
// primary: the reservation and its part stay until the lease ends, and the
// other instance that loads the recipient then gives back both batches'
// positions. The resend through it delivers every notification once.
func TestAPartWrittenUnansweredAndAFailedRollbackAreSettledByAnotherInstance(t *testing.T) {
	const cabinets = 100 // > maxReserveEntries: two reserve batches
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Add(int64(time.Millisecond))) }
	db := cosmostest.UniqueID("db")
	one := hub.New(openLarge(t, cosmos.Config{Database: db, Now: clock, Lease: time.Minute}), hub.Options{}, nil)
	t.Cleanup(one.Close)
	two := hub.New(openLarge(t, cosmos.Config{Database: db, Now: clock, Lease: time.Minute}), hub.Options{}, nil)
	t.Cleanup(two.Close)
	ctx := context.Background()
	r := uuid.NewString()
	first := notifications(2, r, 1)
	if _, err := one.Save(ctx, first); err != nil {
		t.Fatal(err)
	}
	ns := notifications(cabinets, r, 1)
	for i := range ns {
		ns[i].ContentType = fmt.Sprintf("ct-%03d", i)
	}
	inject(t, db,
		cosmostest.Fault{Kind: cosmostest.LostUnavailable, Count: 6, Ops: []string{"batch"}, Coll: "recipients", Type: "respart"},
		cosmostest.Fault{Kind: cosmostest.Refuse503, Ops: []string{"batch"}, Coll: "recipients"})
	_, err := one.Save(ctx, ns)
	if err == nil {
		t.Fatal("the save succeeded with its part unanswered")
	}
	clearFaults(t, db)
	t.Logf("the save answered %v", err)
	resendAfterLease(t, &now, two, ns)
	drainExactly(t, two, r, append(ids(first), ids(ns)...))
	goesOn(t, one, one, r)
}

// A save whose page batches are refused on every attempt while every
// container splits, its rollback's drop answered lost on every attempt: the
// rollback runs on session tokens of the old ranges. Nothing of the save
// shows, the resend through the other instance delivers every notification
// once, and the cabinet goes on.
func TestARollbackAcrossASplitWithItsDropAnswerLost(t *testing.T) {
	db, one, two, split := splitOnFirst(t, func(req *http.Request) bool {
		return toContainer(req, "drawers") && req.Method == http.MethodPost
	})
	ctx, r := context.Background(), uuid.NewString()
	first := savedBefore(t, two, notifications(4, r, 1))
	ns := notifications(30, r, 1)
	inject(t, db,
		cosmostest.Fault{Kind: cosmostest.Refuse503, Ops: []string{"batch"}, Coll: "drawers", Count: 6},
		cosmostest.Fault{Kind: cosmostest.LostTimeout, Ops: []string{"batch"}, Coll: "recipients", Type: "entry", Skip: 1, Count: 6})
	_, err := one.Save(ctx, ns)
	if err == nil || !split.Load() {
		t.Fatalf("the save answered %v with its pages refused (split %v)", err, split.Load())
	}
	if n := firedEach(t, db); n[0] == 0 || n[1] == 0 {
		t.Fatalf("faults fired %v; want both", n)
	}
	clearFaults(t, db)
	t.Logf("the save answered %v", err)
	b, perr := two.Peek(ctx, r, domain.GroupAll, "")
	if perr != nil || b == nil || !slices.Equal(b.NotificationIDs, ids(first)) {
		t.Fatalf("peek after the failed save = %v, %v; want the first %d only", b, perr, len(first))
	}
	if err := two.Dequeue(ctx, r, b.ID); err != nil {
		t.Fatal(err)
	}
	res, err := two.Save(ctx, ns)
	if err != nil || res.Saved != len(ns) {
		t.Fatalf("the resend = %+v, %v", res, err)
	}
	drainExactly(t, one, r, ids(ns))
	goesOn(t, one, two, r)
}

// Two instances save to one recipient at once, round after round, while
// faults recur on every kind of request (answers lost after the write
// applied, refusals, 449s, 404/1002 on session reads) and partitions split;
// a reader on each instance peeks and dequeues meanwhile, and nothing a
// Dequeue answered OK for is delivered by a later Peek. Every Save is sent
// again once the faults end, through the other instance, past the leases:
// then every notification not dequeued is delivered once, each Save's in
// its order, and the cabinet goes on.
func TestConcurrentSavesOfTwoInstancesUnderRecurringFaultsLoseNothing(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Add(int64(time.Millisecond))) }
	db := cosmostest.UniqueID("db")
	hubs := []*hub.Hub{
		hub.New(open(t, cosmos.Config{Database: db, Now: clock, Lease: time.Minute}), hub.Options{}, nil),
		hub.New(open(t, cosmos.Config{Database: db, Now: clock, Lease: time.Minute}), hub.Options{}, nil),
	}
	for _, h := range hubs {
		t.Cleanup(h.Close)
	}
	ctx := context.Background()
	r := uuid.NewString()
	inject(t, db,
		cosmostest.Fault{Kind: cosmostest.LostTimeout, Ops: []string{"batch"}, Every: 7},
		cosmostest.Fault{Kind: cosmostest.LostUnavailable, Ops: []string{"create", "replace"}, Every: 5},
		cosmostest.Fault{Kind: cosmostest.Refuse503, Ops: []string{"replace", "delete"}, Every: 6},
		cosmostest.Fault{Kind: cosmostest.RefuseRetryWith, Ops: []string{"batch", "create"}, Every: 9},
		cosmostest.Fault{Kind: cosmostest.ReadSessionNotAvailable, Ops: []string{"read", "query"}, Every: 8},
	)
	// A reader on each instance peeks and dequeues meanwhile: what a
	// Dequeue answered OK for is acknowledged and may never come again.
	var mu sync.Mutex
	acked := map[string]bool{}
	seen := map[string]bool{}
	stop := make(chan struct{})
	readers := make(chan struct{}, 2)
	for _, h := range hubs {
		go func() {
			defer func() { readers <- struct{}{} }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Only a Dequeue answered before the Peek began rules its
				// notifications out: a Peek under way may still answer the
				// bundle.
				mu.Lock()
				before := maps.Clone(acked)
				mu.Unlock()
				b, err := h.Peek(ctx, r, domain.GroupAll, "")
				if err != nil || b == nil {
					continue
				}
				mu.Lock()
				for _, id := range b.NotificationIDs {
					if before[id] {
						t.Errorf("notification %s delivered again after its Dequeue", id)
					}
					seen[id] = true
				}
				mu.Unlock()
				if h.Dequeue(ctx, r, b.ID) == nil {
					mu.Lock()
					for _, id := range b.NotificationIDs {
						acked[id] = true
					}
					mu.Unlock()
				}
			}
		}()
	}
	var all [][]domain.Notification
	for round := range 15 {
		if round%5 == 4 {
			// Partitions split under the saves too.
			for _, c := range []string{"recipients", "drawers", "ids", "saves"} {
				if _, err := server.Split(db, c, ""); err != nil {
					t.Fatalf("split %s: %v", c, err)
				}
			}
		}
		batch := [2][]domain.Notification{notifications(3, r, 1), notifications(2, r, 1)}
		done := make(chan struct{}, 2)
		for i := range 2 {
			go func() {
				_, _ = hubs[i].Save(ctx, batch[i]) // a failure is sent again below
				done <- struct{}{}
			}()
		}
		<-done
		<-done
		all = append(all, batch[0], batch[1])
	}
	close(stop)
	<-readers
	<-readers
	if fired(t, db) == 0 {
		t.Fatal("no fault fired")
	}
	clearFaults(t, db)
	now.Add(int64(2 * time.Minute))
	// Every Save sent again (an idempotent resend: the stored ones are duplicates).
	var want []string
	for i, ns := range all {
		res, err := hubs[(i+1)%2].Save(ctx, ns)
		if err != nil || res.Saved+res.Duplicates != len(ns) {
			t.Fatalf("the resend of save %d = %+v, %v", i, res, err)
		}
		want = append(want, ids(ns)...)
	}
	got := drainAll(t, hubs[0], r)
	for _, id := range got {
		if acked[id] {
			t.Fatalf("notification %s delivered again after its Dequeue", id)
		}
	}
	for id := range seen {
		if !slices.Contains(got, id) && !acked[id] {
			t.Fatalf("notification %s delivered, not dequeued, and never again", id)
		}
	}
	// What the readers took, and their order, is checked above; the rest
	// comes now, each save's in its order.
	for i, ns := range all {
		var order, rest []string
		for _, id := range got {
			if slices.Contains(ids(ns), id) {
				order = append(order, id)
			}
		}
		for _, id := range ids(ns) {
			if !acked[id] {
				rest = append(rest, id)
			}
		}
		if !slices.Equal(order, rest) {
			t.Fatalf("save %d delivered as %v, want %v", i, order, ids(ns))
		}
	}
	for id := range acked {
		got = append(got, id)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %d notifications, want %d (each once)\n got %v\nwant %v", len(got), len(want), got, want)
	}
	goesOn(t, hubs[1], hubs[0], r)
}

// splitOnFirst opens two hubs on a new database: one whose first request
// that at picks splits every container before it is sent, and one beside
// it. split says whether that happened.
func splitOnFirst(t *testing.T, at func(*http.Request) bool) (db string, one, two *hub.Hub, split *atomic.Bool) {
	t.Helper()
	db = cosmostest.UniqueID("db")
	f := newFaulty()
	split = new(atomic.Bool)
	f.set(func(req *http.Request) int {
		if at(req) && split.CompareAndSwap(false, true) {
			for _, c := range []string{"recipients", "drawers", "ids", "saves"} {
				if _, err := server.Split(db, c, ""); err != nil {
					t.Errorf("split %s: %v", c, err)
				}
			}
		}
		return 0
	})
	one = hub.New(open(t, cosmos.Config{Database: db, Transport: f}), hub.Options{}, nil)
	t.Cleanup(one.Close)
	two = hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
	t.Cleanup(two.Close)
	return db, one, two, split
}

// savedBefore stores ns through repo before the faults and returns them.
func savedBefore(t *testing.T, repo *hub.Hub, ns []domain.Notification) []domain.Notification {
	t.Helper()
	if _, err := repo.Save(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns
}

// resendAfterLease moves the clock past the lease (a minute) of what a
// failed save reserved and sends ns again through via, which must store or
// find every one of them.
func resendAfterLease(t *testing.T, now *atomic.Int64, via *hub.Hub, ns []domain.Notification) {
	t.Helper()
	now.Add(int64(2 * time.Minute))
	res, err := via.Save(context.Background(), ns)
	if err != nil || res.Saved+res.Duplicates != len(ns) {
		t.Fatalf("the resend after the lease = %+v, %v", res, err)
	}
}

// goesOn checks that the recipient's cabinet goes on: a later Save through
// save is delivered, exactly, through drain.
func goesOn(t *testing.T, save, drain *hub.Hub, r string) {
	t.Helper()
	more := notifications(2, r, 1)
	if _, err := save.Save(context.Background(), more); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, drain, r, ids(more))
}
