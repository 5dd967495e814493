package cosmos_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// A cabinet's drawers go onto shelves of their own once the cabinet's last
// drawer starts past the shelf's positions: the save that opens that drawer
// writes the shelf in its reserve batch. With shelves of one drawer, under
// every fault of that batch the save is delivered exactly once, and the
// stored shelves are exactly those the catalog's drawers fill.
func TestASaveThatFillsAShelfSurvivesALostOrRefusedAnswer(t *testing.T) {
	cosmos.SetShelfDrawers(t, 1)
	rule := cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", Type: "shelf"}
	for _, f := range writeFaults {
		t.Run(faultCase("reserve batch filling a shelf", f.kind, f.count), func(t *testing.T) {
			db := cosmostest.UniqueID("db")
			s := open(t, cosmos.Config{Database: db})
			repo := hub.New(s, hub.Options{}, nil)
			t.Cleanup(repo.Close)
			ctx := context.Background()
			r := uuid.NewString()
			first := notifications(drawer.Capacity-2, r, 1)
			if _, err := repo.Save(ctx, first); err != nil {
				t.Fatal(err)
			}
			expectShelves(t, s, db, r)
			crossing := notifications(5, r, 1) // 2 fill the drawer, 3 open the next
			rule.Kind, rule.Count = f.kind, f.count
			inject(t, db, rule)
			_, err := repo.Save(ctx, crossing)
			if fired(t, db) == 0 {
				t.Fatal("the fault never fired; the test tested nothing")
			}
			saveAsTheHub(t, repo, db, crossing, err)
			if e := expectShelves(t, s, db, r); len(e.Drawers) < 2 {
				t.Fatalf("the cabinet has the runs %+v, want two drawers at least", e.Drawers)
			}
			drainExactly(t, repo, r, ids(slices.Concat(first, crossing)))
		})
	}
}

// A sweep that takes a cabinet's first drawer out of its catalog deletes
// the shelf it was alone on in the batch that replaces the entry. Under
// every fault of that batch, the next sweep finishes it: the cabinet keeps
// its last drawer alone, no shelf is left, and delivery goes on.
func TestASweepOfAShelvedDrawerSurvivesALostOrRefusedAnswer(t *testing.T) {
	cosmos.SetShelfDrawers(t, 1)
	rule := cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", ID: "^s:", Body: `"operationType":"Delete"`}
	for _, f := range writeFaults {
		t.Run(faultCase("catalog batch deleting a shelf", f.kind, f.count), func(t *testing.T) {
			clock := &costClock{now: time.Now()}
			db := cosmostest.UniqueID("db")
			s := open(t, cosmos.Config{Database: db})
			repo := hub.New(s, hub.Options{Now: clock.Now, Retention: time.Hour, SweepInterval: time.Hour}, nil)
			t.Cleanup(repo.Close)
			ctx := context.Background()
			r := uuid.NewString()
			full := notifications(drawer.Capacity, r, 1)
			if _, err := repo.Save(ctx, full); err != nil {
				t.Fatal(err)
			}
			drainExactly(t, repo, r, ids(full))
			tail := notifications(2, r, 1) // the second drawer: the first is shelved
			if _, err := repo.Save(ctx, tail); err != nil {
				t.Fatal(err)
			}
			if e := expectShelves(t, s, db, r); len(e.Drawers) != 2 {
				t.Fatalf("the cabinet has the runs %+v, want two drawers", e.Drawers)
			}
			clock.advance(2 * time.Hour)
			rule.Kind, rule.Count = f.kind, f.count
			sweepThroughFault(t, repo, db, rule)
			if e := expectShelves(t, s, db, r); len(e.Drawers) != 1 || e.Drawers[0].Start != drawer.Capacity {
				t.Fatalf("after the sweeps the cabinet has the runs %+v, want the second drawer alone", e.Drawers)
			}
			drainExactly(t, repo, r, ids(tail))
		})
	}
}

// expectShelves fails unless the recipient's one cabinet is stored with
// exactly the shelves its drawers fill, and returns its entry.
func expectShelves(t *testing.T, s *cosmos.Store, db, recipient string) catalog.Entry {
	t.Helper()
	ctx := context.Background()
	state, err := s.LoadRecipient(ctx, recipient)
	if err != nil || len(state.Entries) != 1 {
		t.Fatalf("load: %d entries, %v; want one", len(state.Entries), err)
	}
	e := state.Entries[0]
	docs, err := cosmos.EntryDocuments(recipient, e)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, raw := range docs[1:] {
		var d struct{ ID string }
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		want = append(want, d.ID)
	}
	c, err := cosmostest.NewClient(t, server).NewContainer(db, "recipients")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(server.Options.Lag) // read by another client: let the replicas catch up
	var got []string
	pager := c.NewQueryItemsPager("SELECT c.id FROM c WHERE c.t = 'shelf'", azcosmos.NewPartitionKeyString(recipient), nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range page.Items {
			var d struct{ ID string }
			if err := json.Unmarshal(raw, &d); err != nil {
				t.Fatal(err)
			}
			got = append(got, d.ID)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("shelves %v, want %v (those the drawers %+v fill)", got, want, e.Drawers)
	}
	return e
}

// sweepThroughFault sweeps under rule, as the sweeper does: a pass that
// fails under the fault is followed by the next, which must complete.
func sweepThroughFault(t *testing.T, repo *hub.Hub, db string, rule cosmostest.Fault) {
	t.Helper()
	ctx := context.Background()
	inject(t, db, rule)
	err := repo.SweepNow(ctx)
	if fired(t, db) == 0 {
		t.Fatal("the fault never fired; the test tested nothing")
	}
	clearFaults(t, db)
	if err != nil {
		t.Logf("the sweep under the fault: %v", err)
		if err := repo.SweepNow(ctx); err != nil {
			t.Fatalf("the next sweep: %v", err)
		}
	}
}
