package cosmos

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// The worst reservation validation allows, 10,000 cabinets of one
// recipient with 255-character content types in one save, is planned in
// batches within Cosmos DB's limits, with a head that stays small: every
// cabinet is in exactly one chunk, with its positions, pages and id
// documents.
func TestReserveChunksStayWithinTheLimits(t *testing.T) {
	s := &Store{cfg: Config{IDBuckets: 16}}
	r := uuid.NewString()
	sv := store.RecipientSave{Recipient: r}
	for c := range 10_000 {
		ct := fmt.Sprintf("ct-%06d", c)
		ct = strings.Repeat("x", domain.MaxContentTypeLength-len(ct)) + ct
		items := []drawer.Item{{Pos: 0, Seq: int64(c + 1), ID: uuid.NewString(), DocumentType: ct, Weight: 1}}
		e := catalog.Entry{Origin: domain.OriginTimeSeries, ContentType: ct, Total: 1}
		var pages []drawer.Page
		e.Drawers, pages = drawer.Append(nil, items, uuid.NewString, 1)
		sv.Entries = append(sv.Entries, e)
		sv.Pages = append(sv.Pages, pages...)
		sv.IDs = append(sv.IDs, store.IDRecord{ID: items[0].ID, DrawerID: pages[0].DrawerID})
	}
	p, err := s.plan(uuid.NewString(), 0, sv)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[catalog.Key]bool{}
	for i, c := range p.chunks {
		entryBytes := 0
		for _, e := range c.entries {
			doc, _ := fromEntry(r, e)
			entryBytes += len(mustJSON(doc))
			seen[e.Key()] = true
		}
		for _, sh := range c.shelves {
			entryBytes += len(mustJSON(sh))
		}
		detail := len(mustJSON(c.detail))
		if len(c.entries)+len(c.shelves)+2 > maxBatchOps || entryBytes > maxReserveEntryBytes {
			t.Fatalf("chunk %d: %d entries, %d bytes", i, len(c.entries), entryBytes)
		}
		limit := maxPartDetailBytes
		if i == 0 {
			limit = maxHeadDetailBytes
		}
		if detail > limit {
			t.Fatalf("chunk %d: %d bytes of detail, want ≤ %d", i, detail, limit)
		}
		// The save's id documents, one per bucket, are the head's to list
		// (idWrites), not a chunk's.
		if len(c.detail.Ranges) != len(c.entries) || len(c.detail.Pages) != len(c.entries) || len(c.detail.IDDocs) != 0 {
			t.Fatalf("chunk %d: %d entries, %d ranges, %d pages, %d id documents", i, len(c.entries),
				len(c.detail.Ranges), len(c.detail.Pages), len(c.detail.IDDocs))
		}
	}
	if len(seen) != len(sv.Entries) {
		t.Fatalf("%d of %d cabinets planned", len(seen), len(sv.Entries))
	}
	if head := len(mustJSON(p.res)); head > maxHeadDetailBytes+1024 {
		t.Fatalf("the head's reservation is %d bytes", head)
	}
	t.Logf("%d cabinets: %d reserve batches", len(sv.Entries), len(p.chunks))
}

// Saves finish in any order. One that finishes while an earlier one is still
// being written leaves the watermark below the earlier one's numbers; when
// that one finishes, the watermark passes both. Held at the earlier save's
// own wish, the later save's notifications stayed invisible until some other
// save to the recipient came along: with none, for ever. A save may still
// hold the watermark back (the contract suite's CommitSavesMovesTheWatermarkItIsGiven).
func TestTheWatermarkPassesEverySaveThatHasFinished(t *testing.T) {
	type finish struct {
		save string
		want int64 // the watermark the save asks for
	}
	reserved := func() headDoc {
		return headDoc{Next: 19, Watermark: 9, Reservations: []reservation{
			{Save: "a", From: 10, To: 12}, {Save: "b", From: 13, To: 15}, {Save: "c", From: 16, To: 18},
		}}
	}
	a, b, c := finish{"a", 12}, finish{"b", 15}, finish{"c", 18}
	tests := []struct {
		name  string
		order []finish
		want  []int64 // the watermark after each save finishes
	}{
		{"in order", []finish{a, b, c}, []int64{12, 15, 18}},
		{"the last first", []finish{c, b, a}, []int64{9, 9, 18}},
		{"the middle first", []finish{b, a, c}, []int64{9, 15, 18}},
		{"the first last", []finish{b, c, a}, []int64{9, 9, 18}},
		{"the middle holds it back", []finish{a, {"b", 12}, c}, []int64{12, 12, 18}},
		{"the last holds it back, finishing first", []finish{{"c", 12}, b, a}, []int64{9, 9, 15}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := reserved()
			for i, f := range tt.order {
				if !dropReservation(&h, f.save, f.want) {
					t.Fatalf("reservation of %s not found", f.save)
				}
				if h.Watermark != tt.want[i] {
					t.Fatalf("after %v finished: watermark %d, want %d", tt.order[:i+1], h.Watermark, tt.want[i])
				}
			}
			if dropReservation(&h, tt.order[0].save, tt.order[0].want) {
				t.Fatal("a reservation was dropped twice")
			}
		})
	}
}
