package cosmos

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
)

// Times in bundle documents are JSON numbers, which Cosmos DB keeps exactly
// only up to 2^53; documents of earlier versions, in nanoseconds, still read.
func TestBundleTimesFitAJSONNumberAndOldOnesStillRead(t *testing.T) {
	created := time.Date(2026, 11, 22, 13, 0, 0, 123456000, time.UTC)
	dequeued := created.Add(time.Hour)
	d := fromBundle("r", bundle.Record{ID: "b", CreatedAt: created, DequeuedAt: dequeued, State: bundle.Dequeued})
	for _, v := range []int64{d.CreatedAt, d.DequeuedAt} {
		if v > 1<<53 {
			t.Fatalf("%d is over 2^53", v)
		}
	}
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back bundleDoc
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	rec := toBundle(back)
	if !rec.CreatedAt.Equal(created) || !rec.DequeuedAt.Equal(dequeued) {
		t.Fatalf("read back %v and %v, want %v and %v", rec.CreatedAt, rec.DequeuedAt, created, dequeued)
	}
	old := toBundle(bundleDoc{T: typeDequeued, CreatedAt: created.UnixNano(), DequeuedAt: dequeued.UnixNano()})
	if !old.CreatedAt.Equal(created) || !old.DequeuedAt.Equal(dequeued) {
		t.Fatalf("a document in nanoseconds read as %v and %v", old.CreatedAt, old.DequeuedAt)
	}
}
