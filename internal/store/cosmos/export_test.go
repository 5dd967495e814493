package cosmos

import (
	"encoding/json"
	"time"

	"github.com/energydatahub/messagehub/internal/catalog"
)

// EntryDocuments is the JSON the store writes for a catalog entry: its
// entry document first, then its shelves, so that tests can measure the
// worst case and store it as it is.
func EntryDocuments(recipient string, e catalog.Entry) ([][]byte, error) {
	doc, shelves := fromEntry(recipient, e)
	raw, err := json.Marshal(doc)
	out := [][]byte{raw}
	for _, sh := range shelves {
		if err != nil {
			return nil, err
		}
		raw, err = json.Marshal(sh)
		out = append(out, raw)
	}
	return out, err
}

// SetShelfDrawers sets how many drawers' positions a shelf covers until the
// test ends, so that a test fills shelves with a few drawers.
func SetShelfDrawers(t interface{ Cleanup(func()) }, n int) {
	was := shelfDrawers
	shelfDrawers = n
	t.Cleanup(func() { shelfDrawers = was })
}

// SetFinalizeFor bounds how long a committed save's finalize is retried, so
// that a test can have a process give up on it as if it died.
func SetFinalizeFor(s *Store, d time.Duration) { s.finalizeFor = d }

// SetRetainedBudget bounds the bytes of one recipient's retained dequeued
// bundles, so that a test can reach the bound with a few hundred.
func SetRetainedBudget(s *Store, bytes int64) { s.retainedBudget = bytes }

// Total sums a snapshot over the data operations (metadata reads left out).
func Total(snap map[string]OpStats) OpStats {
	var t OpStats
	for op, s := range snap {
		if op == OpMetadata {
			continue
		}
		t.Requests += s.Requests
		t.RequestBytes += s.RequestBytes
		t.ResponseBytes += s.ResponseBytes
		t.RequestCharge += s.RequestCharge
		t.Throttled += s.Throttled
	}
	return t
}

// IDMigrationCheck says whether the store has begun a look at whether the
// old id layout is empty (the first save after the migration's both-layouts
// phase starts one) and whether that look has ended.
func IDMigrationCheck(s *Store) (begun, ended bool) {
	st := &s.idSettings
	st.mu.Lock()
	begun = !st.checkedAt.IsZero()
	st.mu.Unlock()
	return begun, !st.checking.Load()
}

// DequeuedTTL is the ttl a dequeued bundle's document that names no
// drawers carries, in seconds.
func DequeuedTTL(retention time.Duration) int32 { return dequeuedTTL(retention) }

// Bucket is the id index's partition of id in a layout of count buckets.
func Bucket(count int, id string) string { return bucket(count, id) }

// Buckets lists the id index's partitions of a layout of count buckets,
// in the order retention reads them.
func Buckets(count int) []string { return buckets(count) }

// ForgetHeads has the next recount read every recipient's head, as one by
// a holder that takes the figures lease over does.
func ForgetHeads(s *Store) { s.held.reset() }
