package cosmos_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
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
					now.Add(int64(2 * time.Minute))
					res, rerr := two.Save(ctx, ns)
					if rerr != nil {
						t.Fatalf("the resend after the lease: %v", rerr)
					}
					if res.Saved+res.Duplicates != len(ns) {
						t.Fatalf("the resend answered %+v", res)
					}
					drainExactly(t, two, r, append(ids(before), ids(ns)...))
					more := notifications(2, r, 1)
					if _, err := one.Save(ctx, more); err != nil {
						t.Fatal(err)
					}
					drainExactly(t, one, r, ids(more))
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
	db := cosmostest.UniqueID("db")
	f := newFaulty()
	var split atomic.Bool
	f.set(func(req *http.Request) int {
		if toContainer(req, "saves") && req.Method == http.MethodPut && split.CompareAndSwap(false, true) {
			for _, c := range []string{"recipients", "drawers", "ids", "saves"} {
				if _, err := server.Split(db, c, ""); err != nil {
					t.Errorf("split %s: %v", c, err)
				}
			}
		}
		return 0
	})
	one := hub.New(open(t, cosmos.Config{Database: db, Transport: f}), hub.Options{}, nil)
	t.Cleanup(one.Close)
	two := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
	t.Cleanup(two.Close)
	ctx := context.Background()
	r := uuid.NewString()
	first := notifications(4, r, 1)
	if _, err := two.Save(ctx, first); err != nil {
		t.Fatal(err)
	}
	ns := notifications(30, r, 1)
	inject(t, db, cosmostest.Fault{Kind: cosmostest.LostUnavailable, Ops: []string{"replace"}, Coll: "saves", Body: `"state":"committed"`, Count: 1})
	_, err := one.Save(ctx, ns)
	if !split.Load() || fired(t, db) == 0 {
		t.Fatal("no split or no lost answer")
	}
	clearFaults(t, db)
	saveAsTheHub(t, one, db, ns, err)
	drainExactly(t, two, r, append(ids(first), ids(ns)...))
	more := notifications(2, r, 1)
	if _, err := one.Save(ctx, more); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, one, r, ids(more))
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
	more := notifications(2, r, 1)
	if _, err := one.Save(ctx, more); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, two, r, ids(more))
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
	now.Add(int64(2 * time.Minute))
	res, err := two.Save(ctx, ns)
	if err != nil || res.Saved+res.Duplicates != len(ns) {
		t.Fatalf("the resend after the lease = %+v, %v", res, err)
	}
	drainExactly(t, two, r, append(ids(first), ids(ns)...))
	more := notifications(2, r, 1)
	if _, err := one.Save(ctx, more); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, one, r, ids(more))
}

// A save whose page batches are refused on every attempt while every
// container splits, its rollback's drop answered lost on every attempt: the
// rollback runs on session tokens of the old ranges. Nothing of the save
// shows, the resend through the other instance delivers every notification
// once, and the cabinet goes on.
func TestARollbackAcrossASplitWithItsDropAnswerLost(t *testing.T) {
	db := cosmostest.UniqueID("db")
	f := newFaulty()
	var split atomic.Bool
	f.set(func(req *http.Request) int {
		if toContainer(req, "drawers") && req.Method == http.MethodPost && split.CompareAndSwap(false, true) {
			for _, c := range []string{"recipients", "drawers", "ids", "saves"} {
				if _, err := server.Split(db, c, ""); err != nil {
					t.Errorf("split %s: %v", c, err)
				}
			}
		}
		return 0
	})
	one := hub.New(open(t, cosmos.Config{Database: db, Transport: f}), hub.Options{}, nil)
	t.Cleanup(one.Close)
	two := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
	t.Cleanup(two.Close)
	ctx := context.Background()
	r := uuid.NewString()
	first := notifications(4, r, 1)
	if _, err := two.Save(ctx, first); err != nil {
		t.Fatal(err)
	}
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
	more := notifications(2, r, 1)
	if _, err := one.Save(ctx, more); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, two, r, ids(more))
}
