// Package catalog holds a recipient's catalog: one entry per cabinet listing
// its drawers, and one cursor per cabinet saying how far it is acknowledged.
// Saves own entries and dequeues own cursors, so the two never write the same
// record.
package catalog

import (
	"fmt"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
)

// Entry is a cabinet's drawers, written by Save.
type Entry struct {
	Origin      domain.Origin
	ContentType string
	// Drawers are the runs of positions that hold notifications, in
	// position order (see package drawer); fully acknowledged ones are
	// swept away.
	Drawers []drawer.Meta
	Total   int64  // positions handed out so far
	Version string // store version; empty when not yet stored
}

// MaxDrawers is the most drawers a cabinet's entry lists, so that the entry
// stays a bounded document: at the widest (255-character content type,
// every number at 2^53) a drawer takes 166 bytes of the Cosmos document, so
// 5,000 drawers are 0.83 MB, well under the 2 MB item limit
// (cosmos TestWidestEntryAtTheDrawerBoundFitsAnItem). That is 50
// million notifications a cabinet. Retention takes acknowledged drawers out
// of the entry (retained dequeued bundles name theirs in their records), so
// what counts is mostly the unacknowledged ones.
const MaxDrawers = 5_000

// CheckDrawers refuses a save that grew a cabinet's entry from before to
// after past max drawers. A save that opens no drawer passes, so an entry
// already past the bound (a bound lowered since) still fills its last one.
func CheckDrawers(before, after Entry, max int) error {
	if n := len(after.Drawers); n > max && n > len(before.Drawers) {
		return fmt.Errorf("%w: the cabinet of domain %d and content type %q would need %d drawers, and holds at most %d (%d notifications); the recipient must dequeue first (acknowledged drawers leave the cabinet at the next retention sweep)",
			domain.ErrCabinetFull, int32(after.Origin), after.ContentType, n, max, max*drawer.Capacity)
	}
	return nil
}

// Cursor is how far a cabinet is acknowledged, written by Dequeue.
type Cursor struct {
	Origin      domain.Origin
	ContentType string
	Acked       int64 // positions before this are acknowledged
	HeadSeq     int64 // sequence number at Acked when known, else 0
	// MovedAt is when a dequeue last moved the cursor (unix ms, by the
	// clock of the instance that moved it); 0 for a cursor never moved or
	// stored without it. Retention leaves a drained cabinet, cursor and
	// all, until its cursor has stood still for a while (hub's
	// cabinetDropDelay).
	MovedAt int64
	Version string
}

// Key identifies a cabinet within one recipient.
type Key struct {
	Origin      domain.Origin
	ContentType string
}

// Key returns the entry's cabinet key.
func (e Entry) Key() Key { return Key{e.Origin, e.ContentType} }

// Key returns the cursor's cabinet key.
func (c Cursor) Key() Key { return Key{c.Origin, c.ContentType} }
