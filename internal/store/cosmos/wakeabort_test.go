package cosmos_test

import (
	"context"
	"errors"
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

// A save of another instance that finishes while an earlier save of the
// same recipient is still being written stays invisible: the earlier
// save's reservation holds the watermark. When that earlier save fails, its
// rollback drops the reservation and the watermark passes the later save's
// notifications: they become visible then, through a failed Save, and the
// peeks waiting for the recipient must be woken by it, and the bell rung for
// those on other instances, or they sleep until their wait ends while data
// is there.
func TestAFailedSaveWakesThePeeksWaitingForTheSaveItHeldBack(t *testing.T) {
	failedSaveWakesThePeeksWaitingForTheSaveItHeldBack(t)
}

// The batch of the rollback that drops the failed save's reservation may
// apply with its answer lost: the rollback finds the reservation gone when
// it looks again, and the notifications it made visible are just as
// visible, so the bell is rung for them all the same.
func TestARollbackWhoseDropAnswerIsLostRingsTheBell(t *testing.T) {
	failedSaveWakesThePeeksWaitingForTheSaveItHeldBack(t,
		cosmostest.Fault{Kind: cosmostest.LostTimeout, Ops: []string{"batch"}, Coll: "recipients", Body: `"h":\[\[`, Count: 1})
}

// failedSaveWakesThePeeksWaitingForTheSaveItHeldBack runs the failed save
// of the test of that name, the rollback's requests meeting the faults of
// drop once the save failed.
func failedSaveWakesThePeeksWaitingForTheSaveItHeldBack(t *testing.T, drop ...cosmostest.Fault) {
	db := cosmostest.UniqueID("db")
	// x reads the other instances' bells once, at its start: its waiters
	// are woken by its own saves alone during the test.
	x := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{BellPoll: time.Hour}, nil)
	t.Cleanup(x.Close)
	z := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
	t.Cleanup(z.Close)
	ctx := context.Background()
	r := uuid.NewString()

	// x's save reserves its positions, then its page batch is held until
	// its deadline: the save fails and is rolled back.
	inject(t, db, cosmostest.Fault{Kind: cosmostest.LostHold, Ops: []string{"batch"}, Coll: "drawers", Count: 1})
	failed := make(chan error, 1)
	go func() {
		_, err := x.Save(ctx, notifications(1, r, 1))
		failed <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); fired(t, db) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("x's page batch never came")
		}
		time.Sleep(10 * time.Millisecond)
	}
	later := notifications(2, r, 1)
	if _, err := z.Save(ctx, later); err != nil {
		t.Fatal(err)
	}
	if len(drop) > 0 {
		inject(t, db, drop...)
	}
	if b, err := z.Peek(ctx, r, domain.GroupAll, ""); err != nil || b != nil {
		t.Fatalf("peek while x's save holds the watermark = %v, %v; want nothing yet", b, err)
	}
	wake, stop, err := x.Watch(r)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// z's waiter: z's own save woke z's waiters before it came.
	until(t, "z follows the bells", func() bool { ok, _ := z.FollowingOthers(); return ok })
	zWake, zStop, err := z.Watch(r)
	if err != nil {
		t.Fatal(err)
	}
	defer zStop()
	if err := <-failed; err == nil {
		t.Fatal("x's save whose page batch never answered succeeded")
	}
	if len(drop) > 0 && fired(t, db) < 2 {
		t.Fatal("the rollback's drop met no fault; the test tested nothing")
	}
	select {
	case <-wake:
	default:
		t.Fatal("the failed save made z's notifications visible and woke no peek waiting for them")
	}
	select {
	case <-zWake:
	case <-time.After(30 * time.Second):
		t.Fatal("the failed save made z's notifications visible and rang no bell: z's waiting peek was not woken within 30 s")
	}
	b, err := x.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || b == nil || !slices.Equal(b.NotificationIDs, ids(later)) {
		t.Fatalf("peek after x's save failed = %v, %v; want z's two notifications", b, err)
	}
}

// A Save of an id stored with other content is refused, after the store
// reserved its positions: it finds the id only once it wrote its own id
// documents, and rolls back. The watermark then passes the save's own
// positions, holes, and nothing else: nothing became visible, and neither
// the hub nor the store rings a bell for it.
func TestASaveRefusedForAnIDConflictRingsNoBell(t *testing.T) {
	f := newFaulty()
	var bells, records atomic.Int32
	f.set(func(req *http.Request) int {
		switch {
		case req.Method != http.MethodPost:
		case toContainer(req, "bells"):
			bells.Add(1)
		case toContainer(req, "saves") && req.Header.Get("x-ms-cosmos-is-batch-request") == "" && req.Header.Get("x-ms-documentdb-isquery") == "":
			records.Add(1) // a commit record: the save reserves
		}
		return 0
	})
	s := open(t, cosmos.Config{Transport: f})
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	r := uuid.NewString()
	stored := notifications(1, r, 1)
	quiet := hub.New(withoutBells{s}, hub.Options{SweepInterval: time.Hour}, nil)
	if _, err := quiet.Save(ctx, stored); err != nil {
		t.Fatal(err)
	}
	quiet.Close()

	h := hub.New(s, hub.Options{SweepInterval: time.Hour}, nil)
	records.Store(0)
	conflicting := stored[0]
	conflicting.Weight++
	if _, err := h.Save(ctx, []domain.Notification{conflicting}); !errors.Is(err, domain.ErrNotificationConflict) {
		t.Fatalf("a Save of a stored id with other content: %v, want a conflict", err)
	}
	h.Close() // rings what is pending before it returns
	if records.Load() == 0 {
		t.Fatal("the refused Save created no commit record: it reserved nothing, and the test tested nothing")
	}
	if n := bells.Load(); n != 0 {
		t.Fatalf("a Save refused for an id conflict rang %d bells", n)
	}
}
