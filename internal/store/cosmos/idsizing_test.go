package cosmos

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/store"
)

// The id index holds every id for as long as its notification is kept. At
// 10,000 notifications per second kept for 7 days, over the bucket count
// docs/cosmos.md recommends for that rate, no bucket (logical partition)
// reaches Cosmos DB's 20 GB, even with every id of a save in its own
// drawer and fingerprint (the most bytes per id) and an index as large as
// the indexed ids themselves (Microsoft publishes no per-term size: a real
// account must confirm it, docs/cosmos.md).
func TestTheIDIndexFitsItsPartitionsAtTenThousandPerSecondForSevenDays(t *testing.T) {
	const (
		rate        = 10_000
		keptSeconds = 7 * 24 * 3600
		buckets     = 64
		limit       = 20 << 30 // bytes per logical partition, data and index
	)
	for _, tc := range []struct {
		name    string
		drawers int // distinct drawers (and fingerprints) among a save's 1,000 ids
	}{
		{"ids of one content in one drawer", 1},
		{"every id its own drawer and content", 1000},
	} {
		var recs []store.IDRecord
		var pages []pageDoc
		for i := range 1000 {
			d := fmt.Sprintf("drawer-%d", i%tc.drawers)
			recs = append(recs, store.IDRecord{ID: uuid.NewString(), Fingerprint: store.Fingerprint{byte(i % tc.drawers), byte(i / 256)}, DrawerID: uuid.NewSHA1(uuid.Nil, []byte(d)).String()})
		}
		for i := range tc.drawers {
			pages = append(pages, pageDoc{PK: recs[i].DrawerID, Start: int64(i)})
		}
		writes := idWrites(uuid.NewString(), idLayout{write: []int{buckets}}, []savePlan{{save: store.RecipientSave{IDs: recs}, pages: pages}})
		var data, indexed int
		for _, w := range writes {
			raw, err := json.Marshal(w.doc)
			if err != nil {
				t.Fatal(err)
			}
			data += len(raw) + 200 // the system properties Cosmos DB adds (_rid, _self, _etag, _ts, _attachments)
			for _, id := range w.doc.IDs {
				indexed += len(id)
			}
		}
		perID := float64(data+indexed) / float64(len(recs))
		perBucket := perID * rate * keptSeconds / buckets
		t.Logf("%s: %.0f bytes per id (data %d, index ≈ %d for 1,000 ids in %d documents): %.1f GB per bucket of %d at %d/s for 7 days",
			tc.name, perID, data, indexed, len(writes), perBucket/(1<<30), buckets, rate)
		if perBucket > limit {
			t.Fatalf("%s: %.1f GB per bucket, more than the 20 GB a logical partition holds", tc.name, perBucket/(1<<30))
		}
	}
}
