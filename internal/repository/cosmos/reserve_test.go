package cosmos

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/repository"
)

// The worst reservation validation allows, 10,000 cabinets of one
// recipient with 255-character content types in one save, is planned in
// batches within Cosmos DB's limits, with a head that stays small: every
// cabinet is in exactly one chunk, with its positions, pages and id
// documents.
func TestReserveChunksStayWithinTheLimits(t *testing.T) {
	s := &Store{cfg: Config{IDBuckets: 16}}
	r := uuid.NewString()
	sv := repository.RecipientSave{Recipient: r}
	for c := range 10_000 {
		ct := fmt.Sprintf("ct-%06d", c)
		ct = strings.Repeat("x", domain.MaxContentTypeLength-len(ct)) + ct
		items := []drawer.Item{{Pos: 0, Seq: int64(c + 1), ID: uuid.NewString(), DocumentType: ct, Weight: 1}}
		e := catalog.Entry{Origin: domain.OriginTimeSeries, ContentType: ct, Total: 1}
		var pages []drawer.Page
		e.Drawers, pages = drawer.Append(nil, items, uuid.NewString, 1)
		sv.Entries = append(sv.Entries, e)
		sv.Pages = append(sv.Pages, pages...)
		sv.IDs = append(sv.IDs, repository.IDRecord{ID: items[0].ID, DrawerID: pages[0].DrawerID})
	}
	p, err := s.plan(uuid.NewString(), 0, sv)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[catalog.Key]bool{}
	for i, c := range p.chunks {
		entryBytes := 0
		for _, e := range c.entries {
			entryBytes += len(mustJSON(fromEntry(r, e)))
			seen[e.Key()] = true
		}
		detail := len(mustJSON(c.detail))
		if len(c.entries)+2 > maxBatchOps || entryBytes > maxReserveEntryBytes {
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
