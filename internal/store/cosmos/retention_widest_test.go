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
	for _, drop := range []bool{true, false} {
		r := uuid.NewString()
		e := widestEntry(catalog.MaxDrawers)
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
			if resp, err := c.ExecuteTransactionalBatch(ctx, b, nil); err != nil || !resp.Success {
				t.Fatalf("storing the widest cabinet: %v", err)
			}
		}
		waitOutLag() // written by another client
		now := time.Now()
		st, err := s.LoadRetention(ctx, r, now.Add(-time.Hour), time.Time{})
		if err != nil || len(st.Entries) != 1 || len(st.Cursors) != 1 {
			t.Fatalf("load: %d entries, %d cursors, %v", len(st.Entries), len(st.Cursors), err)
		}
		loaded := st.Entries[0]
		// As the hub plans it when the retained bundles still read every
		// drawer that leaves: kept, not freed.
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
		if err := s.ApplySweep(ctx, sw); err != nil {
			t.Fatalf("drop %v: the sweep of the widest cabinet: %v", drop, err)
		}
		after, err := s.LoadRecipient(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case drop && len(after.Entries) != 0:
			t.Fatalf("after the sweep the cabinet has %d drawers, want none", len(after.Entries[0].Drawers))
		case !drop && (len(after.Entries) != 1 || len(after.Entries[0].Drawers) != 1):
			t.Fatalf("after the sweep: %+v, want the cabinet with its last drawer alone", after.Entries)
		}
		expectNoShelvesBut(t, c, r, !drop)
		if n := keptDrawers(t, c, r); n != len(keep.Drawers) {
			t.Fatalf("drop %v: %d drawers kept, want the %d that left the cabinet", drop, n, len(keep.Drawers))
		}
	}
}

// keptDrawers counts the drawers the recipient's kept records name.
func keptDrawers(t *testing.T, c *azcosmos.ContainerClient, recipient string) int {
	t.Helper()
	pager := c.NewQueryItemsPager("SELECT c.dr FROM c WHERE c.t = 'kept'", azcosmos.NewPartitionKeyString(recipient), nil)
	n := 0
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
			n += len(d.DR)
		}
	}
	return n
}

// expectNoShelvesBut fails if the recipient has shelves left (any, unless
// some are allowed).
func expectNoShelvesBut(t *testing.T, c *azcosmos.ContainerClient, recipient string, some bool) {
	t.Helper()
	waitOutLag()
	pager := c.NewQueryItemsPager("SELECT c.id FROM c WHERE c.t = 'shelf'", azcosmos.NewPartitionKeyString(recipient), nil)
	n := 0
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Items)
	}
	if n > 0 && !some {
		t.Fatalf("%d shelves left", n)
	}
}
