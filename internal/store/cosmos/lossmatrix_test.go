package cosmos_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// storeWrite is one kind of write the store makes, as the test server's
// fault rules pick it, and the call that makes it.
type storeWrite struct {
	name string
	rule cosmostest.Fault
	in   string // "save", "peek" or "dequeue"
}

var storeWrites = []storeWrite{
	{"commit record create", cosmostest.Fault{Ops: []string{"create"}, Coll: "saves"}, "save"},
	{"registry create", cosmostest.Fault{Ops: []string{"create"}, Coll: "recipients", Type: "recipient"}, "save"},
	{"reserve batch", cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", Type: "head"}, "save"},
	{"page batch", cosmostest.Fault{Ops: []string{"batch"}, Coll: "drawers"}, "save"},
	{"id document", cosmostest.Fault{Ops: []string{"create"}, Coll: "ids"}, "save"},
	{"commit", cosmostest.Fault{Ops: []string{"replace"}, Coll: "saves", Body: `"state":"committed"`}, "save"},
	{"finalize", cosmostest.Fault{Ops: []string{"replace"}, Coll: "recipients", ID: "^head$"}, "save"},
	{"create bundle", cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", Type: "slot"}, "peek"},
	{"acknowledge", cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", Type: "dequeued"}, "dequeue"},
}

// The faults a write may meet: its answer lost once (the transport's
// resend meets its own effect), lost on every attempt the transport makes
// (6 > its 4: the caller sees a failure of a write that applied), or
// refused as often.
var writeFaults = []struct {
	kind  cosmostest.FaultKind
	count int
}{
	{cosmostest.LostUnavailable, 1},
	{cosmostest.LostUnavailable, 6},
	{cosmostest.LostTimeout, 6},
	{cosmostest.LostReset, 6},
	{cosmostest.Refuse503, 6},
	{cosmostest.RefuseRetryWith, 6},
}

// For every write and fault: the store operation runs under the fault,
// then the hub carries on as it does (a Save answered with an error is
// resent, a Peek or Dequeue answered with an error is asked again). No
// acknowledged notification is lost, none is delivered again after its
// Dequeue, a Save refused outright leaves nothing visible, and the cabinet
// serves the next Peek.
func TestEveryWriteSurvivesALostOrRefusedAnswer(t *testing.T) {
	for _, w := range storeWrites {
		for _, f := range writeFaults {
			name := w.name + "/" + string(f.kind)
			if f.count == 1 {
				name += "-once"
			}
			t.Run(name, func(t *testing.T) {
				db := cosmostest.UniqueID("db")
				repo := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
				t.Cleanup(repo.Close)
				ctx := context.Background()
				r := uuid.NewString()
				ns := notifications(3, r, 1)
				rule := w.rule
				rule.Kind, rule.Count = f.kind, f.count
				if w.in == "save" {
					inject(t, db, rule)
				}
				_, err := repo.Save(ctx, ns)
				if w.in == "save" {
					if fired(t, db) == 0 {
						t.Fatal("the fault never fired; the test tested nothing")
					}
					clearFaults(t, db)
					if err != nil && (f.kind == cosmostest.Refuse503 || f.kind == cosmostest.RefuseRetryWith) {
						// Refused: nothing of the save may show.
						if b, perr := repo.Peek(ctx, r, domain.GroupAll, ""); perr != nil || b != nil {
							t.Fatalf("peek after a refused save (%v) = %v, %v; want nothing", err, b, perr)
						}
					}
				}
				saveAsTheHub(t, repo, db, ns, err)
				if w.in == "save" {
					drainExactly(t, repo, r, ids(ns))
					return
				}
				if w.in == "peek" {
					inject(t, db, rule)
				}
				b, err := repo.Peek(ctx, r, domain.GroupAll, "")
				if w.in == "peek" {
					if fired(t, db) == 0 {
						t.Fatal("the fault never fired; the test tested nothing")
					}
					clearFaults(t, db)
					if err != nil {
						b, err = repo.Peek(ctx, r, domain.GroupAll, "")
					}
				}
				if err != nil || b == nil || !slices.Equal(b.NotificationIDs, ids(ns)) {
					t.Fatalf("peek = %v, %v; want the %d notifications", b, err, len(ns))
				}
				if w.in == "dequeue" {
					inject(t, db, rule)
				}
				err = repo.Dequeue(ctx, r, b.ID)
				if w.in == "dequeue" {
					if fired(t, db) == 0 {
						t.Fatal("the fault never fired; the test tested nothing")
					}
					clearFaults(t, db)
					if err != nil {
						// Asked again: NotFound says the first one applied.
						if err = repo.Dequeue(ctx, r, b.ID); errors.Is(err, domain.ErrNotFound) {
							err = nil
						}
					}
				}
				if err != nil {
					t.Fatalf("dequeue: %v", err)
				}
				if b, err := repo.Peek(ctx, r, domain.GroupAll, ""); err != nil || b != nil {
					t.Fatalf("peek after the dequeue = %v, %v; want nothing (no redelivery, not stuck)", b, err)
				}
				// The cabinet goes on: a later save is delivered.
				more := notifications(2, r, 1)
				if _, err := repo.Save(ctx, more); err != nil {
					t.Fatal(err)
				}
				drainExactly(t, repo, r, ids(more))
			})
		}
	}
}
