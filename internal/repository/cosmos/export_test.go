package cosmos

import (
	"encoding/json"

	"github.com/energydatahub/messagehub/internal/catalog"
)

// EntryDocument is the JSON the store writes for a catalog entry, so that
// tests can measure the worst case and store it as it is.
func EntryDocument(recipient string, e catalog.Entry) ([]byte, error) {
	return json.Marshal(fromEntry(recipient, e))
}
