package cosmos

import (
	"encoding/json"
	"time"

	"github.com/energydatahub/messagehub/internal/catalog"
)

// EntryDocuments is the JSON the store writes for a catalog entry: its
// entry document first, then the closed documents of its drawers before the
// last, so that tests can measure the worst case and store it as it is.
func EntryDocuments(recipient string, e catalog.Entry) ([][]byte, error) {
	doc, closed := fromEntry(recipient, e)
	raw, err := json.Marshal(doc)
	out := [][]byte{raw}
	for _, c := range closed {
		if err != nil {
			return nil, err
		}
		raw, err = json.Marshal(c)
		out = append(out, raw)
	}
	return out, err
}

// SetFinalizeFor bounds how long a committed save's finalize is retried, so
// that a test can have a process give up on it as if it died.
func SetFinalizeFor(s *Store, d time.Duration) { s.finalizeFor = d }
