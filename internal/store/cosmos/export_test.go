package cosmos

import (
	"encoding/json"
	"time"

	"github.com/energydatahub/messagehub/internal/catalog"
)

// EntryDocument is the JSON the store writes for a catalog entry, so that
// tests can measure the worst case and store it as it is.
func EntryDocument(recipient string, e catalog.Entry) ([]byte, error) {
	return json.Marshal(fromEntry(recipient, e))
}

// SetFinalizeFor bounds how long a committed save's finalize is retried, so
// that a test can have a process give up on it as if it died.
func SetFinalizeFor(s *Store, d time.Duration) { s.finalizeFor = d }

// SetRetainedBudget bounds the bytes of one recipient's retained dequeued
// bundles, so that a test can reach the bound with a few hundred.
func SetRetainedBudget(s *Store, bytes int64) { s.retainedBudget = bytes }
