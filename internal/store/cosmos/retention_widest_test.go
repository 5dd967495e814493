package cosmos_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// A cabinet at the drawer bound is an entry and 157 shelves. Once every
// drawer is acknowledged the sweep takes them out of the catalog: the
// entry is deleted with its cursor and every shelf, or (a cabinet that
// stays) rewritten with its last drawer alone and its shelves deleted.
// That is more than the 100 operations a transactional batch may hold,
// yet it must be written: a recipient whose sweep is refused is refused at
// every pass, its drawers are never freed, and the failure ends the pass
// for the recipients swept with it.
func TestTheSweepOfTheWidestCabinetFitsItsBatches(t *testing.T) {
	requireLimits(t)
	db := cosmostest.UniqueID("db")
	s := open(t, cosmos.Config{Database: db, Throughput: "manual=1000000"})
	c := containerOf(t, db, "recipients")
	ctx := context.Background()
	// Also the widest cabinet of 98 shelves: its entry, cursor, kept
	// record and shelves are 101 operations.
	at98 := 0
	for n := 32 * 98; n < 32*100 && at98 == 0; n++ {
		docs, err := cosmos.EntryDocuments("r", widestEntry(n))
		if err != nil {
			t.Fatal(err)
		}
		if len(docs)-1 == 98 {
			at98 = n
		}
	}
	if at98 == 0 {
		t.Fatal("no cabinet of 98 shelves")
	}
	for _, size := range []struct {
		drawers int
		drop    bool
	}{{catalog.MaxDrawers, true}, {catalog.MaxDrawers, false}, {at98, true}} {
		r, _ := storeWidestCabinet(t, c, size.drawers, size.drop)
		sw, left := planWidestSweep(t, s, r, size.drop)
		if err := s.ApplySweep(ctx, sw); err != nil {
			t.Fatalf("%+v: the sweep of the widest cabinet: %v", size, err)
		}
		expectWidestSwept(t, s, c, r, size.drop, left)
	}
}

// The batches written ahead of a wide cabinet's own leave the catalog
// whole after each: under every fault of the cabinet's last batch, the
// catalog names a part of the drawers that leave, all of them kept, and
// the next sweep, planned from it, finishes.
func TestAWideCabinetsSweepStoppedHalfWayIsFinishedByTheNext(t *testing.T) {
	requireLimits(t)
	rule := cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", ID: "^s:", Skip: 1}
	for _, f := range writeFaults {
		for _, drop := range []bool{true, false} {
			t.Run(faultCase("the last batch of a wide cabinet's sweep", f.kind, f.count)+map[bool]string{true: ", dropped", false: ", kept"}[drop], func(t *testing.T) {
				db := cosmostest.UniqueID("db")
				s := open(t, cosmos.Config{Database: db, Throughput: "manual=1000000"})
				c := containerOf(t, db, "recipients")
				ctx := context.Background()
				r, whole := storeWidestCabinet(t, c, catalog.MaxDrawers, drop)
				sw, left := planWidestSweep(t, s, r, drop)
				rule.Kind, rule.Count = f.kind, f.count
				inject(t, db, rule)
				err := s.ApplySweep(ctx, sw)
				if fired(t, db) == 0 {
					t.Fatal("the fault never fired; the test tested nothing")
				}
				clearFaults(t, db)
				t.Logf("the sweep under the fault: %v", err)
				waitOutLag()
				mid, err := s.LoadRecipient(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				// Every drawer is in the catalog or kept, never both: a kept
				// drawer is deleted when it is due, whoever names it.
				kept := keptDrawers(t, c, r)
				var named []string
				if len(mid.Entries) == 1 {
					for _, d := range mid.Entries[0].Drawers {
						named = append(named, d.ID)
					}
				}
				for _, d := range whole.Drawers {
					if in, k := slices.Contains(named, d.ID), slices.Contains(kept, d.ID); in == k {
						t.Fatalf("half-way drawer %s is in the catalog %v and kept %v", d.ID, in, k)
					}
				}
				if len(mid.Entries) == 1 {
					ds := mid.Entries[0].Drawers
					if len(ds) == 0 || len(ds) >= len(whole.Drawers) || ds[len(ds)-1].ID != whole.Drawers[len(whole.Drawers)-1].ID {
						t.Fatalf("half-way the cabinet has %d of its %d drawers; want fewer, its last among them", len(ds), len(whole.Drawers))
					}
					for _, d := range ds {
						if !slices.Contains(whole.Drawers, d) {
							t.Fatalf("half-way the cabinet has a drawer %+v it never had", d)
						}
					}
					next, more := planWidestSweep(t, s, r, drop)
					if err := s.ApplySweep(ctx, next); err != nil {
						t.Fatalf("the next sweep: %v", err)
					}
					left = slices.Concat(left, more)
				}
				expectWidestSwept(t, s, c, r, drop, left)
			})
		}
	}
}

// storeWidestCabinet stores a new recipient's cabinet of the widest drawers,
// acknowledged up to its end (drop) or up to its last drawer, and returns
// the recipient and the cabinet's entry.
func storeWidestCabinet(t *testing.T, c *azcosmos.ContainerClient, drawers int, drop bool) (string, catalog.Entry) {
	t.Helper()
	r := uuid.NewString()
	e := widestEntry(drawers)
	docs, err := cosmos.EntryDocuments(r, e)
	if err != nil {
		t.Fatal(err)
	}
	acked := e.Total
	if !drop {
		acked = e.Drawers[len(e.Drawers)-1].Start // the last drawer waits
	}
	cursor, err := json.Marshal(map[string]any{
		"id": "c:" + strconv.Itoa(int(e.Origin)) + ":" + e.ContentType, "pk": r, "t": "cursor",
		"o": e.Origin, "ct": e.ContentType, "ack": acked, "hs": 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	for chunk := range slices.Chunk(append(docs, cursor), 100) {
		b := c.NewTransactionalBatch(azcosmos.NewPartitionKeyString(r))
		for _, raw := range chunk {
			b.UpsertItem(raw, nil)
		}
		if resp, err := c.ExecuteTransactionalBatch(context.Background(), b, nil); err != nil || !resp.Success {
			t.Fatalf("storing the widest cabinet: %v", err)
		}
	}
	waitOutLag() // written by another client
	return r, e
}

// planWidestSweep plans the sweep of the recipient's one cabinet as the
// hub does when the retained bundles still read every drawer that leaves:
// kept, not freed. It returns the sweep and the drawers that leave.
func planWidestSweep(t *testing.T, s *cosmos.Store, r string, drop bool) (store.Sweep, []string) {
	t.Helper()
	now := time.Now()
	st, err := s.LoadRetention(context.Background(), r, now.Add(-time.Hour), time.Time{})
	if err != nil || len(st.Entries) != 1 || len(st.Cursors) != 1 {
		t.Fatalf("load: %d entries, %d cursors, %v", len(st.Entries), len(st.Cursors), err)
	}
	loaded := st.Entries[0]
	sw := store.Sweep{Recipient: r}
	keep := store.Kept{Cabinet: loaded.Key(), Until: now}
	out := loaded.Drawers
	if drop {
		sw.DeleteEntries, sw.DeleteCursors = []catalog.Entry{loaded}, st.Cursors
	} else {
		out = loaded.Drawers[:len(loaded.Drawers)-1]
		rest := loaded
		rest.Drawers = loaded.Drawers[len(loaded.Drawers)-1:]
		sw.Entries = []catalog.Entry{rest}
	}
	for _, d := range out {
		keep.Drawers = append(keep.Drawers, d.ID)
	}
	sw.Keep = []store.Kept{keep}
	return sw, keep.Drawers
}

// expectWidestSwept fails unless the recipient's cabinet is gone (drop) or
// has its last drawer alone, no shelf is left, and every drawer that left
// is kept.
func expectWidestSwept(t *testing.T, s *cosmos.Store, c *azcosmos.ContainerClient, r string, drop bool, left []string) {
	t.Helper()
	after, err := s.LoadRecipient(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case drop && len(after.Entries) != 0:
		t.Fatalf("after the sweep the cabinet has %d drawers, want none", len(after.Entries[0].Drawers))
	case !drop && (len(after.Entries) != 1 || len(after.Entries[0].Drawers) != 1):
		t.Fatalf("after the sweep: %d entries, want the cabinet with its last drawer alone", len(after.Entries))
	}
	waitOutLag()
	pager := c.NewQueryItemsPager("SELECT c.id FROM c WHERE c.t = 'shelf'", azcosmos.NewPartitionKeyString(r), nil)
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Items) > 0 {
			t.Fatalf("%d shelves left", len(page.Items))
		}
	}
	kept := keptDrawers(t, c, r)
	for _, d := range left {
		if !slices.Contains(kept, d) {
			t.Fatalf("drawer %s left the cabinet and is not kept", d)
		}
	}
}

// keptDrawers lists the drawers the recipient's kept records name.
func keptDrawers(t *testing.T, c *azcosmos.ContainerClient, recipient string) []string {
	t.Helper()
	pager := c.NewQueryItemsPager("SELECT c.dr FROM c WHERE c.t = 'kept'", azcosmos.NewPartitionKeyString(recipient), nil)
	var ids []string
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range page.Items {
			var d struct {
				DR []string `json:"dr"`
			}
			if err := json.Unmarshal(raw, &d); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, d.DR...)
		}
	}
	return ids
}
