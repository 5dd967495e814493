// Package catalog holds a recipient's catalog: one entry per cabinet listing
// its drawers, and one cursor per cabinet saying how far it is acknowledged.
// Saves own entries and dequeues own cursors, so the two never write the same
// record.
package catalog

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
)

// Entry is a cabinet's drawers, written by Save.
type Entry struct {
	Origin      domain.Origin
	ContentType string
	Drawers     []drawer.Meta // in position order; fully acknowledged ones are swept away
	Total       int64         // positions handed out so far
	// Holes are positions that aborted saves took and never filled, in
	// order. Readers skip a position they find empty only when it is a
	// recorded hole: anything else is a read that lags behind the catalog.
	Holes   []Hole
	Version string // store version; empty when not yet stored
}

// MaxDrawers is the most drawers a cabinet's entry lists, so that the entry
// stays a bounded document: at the widest (255-character content type,
// every number at 2^53) a drawer takes 166 bytes of the Cosmos document, so
// 5,000 drawers are 0.83 MB, well under the 2 MB item limit, with room left
// for holes (cosmos TestWidestEntryAtTheDrawerBoundFitsAnItem). That is 50
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

// Hole is a run of positions [Start, End) left empty by an aborted save.
type Hole struct{ Start, End int64 }

// InHoles reports whether every position of [from, to) is a recorded hole.
func (e Entry) InHoles(from, to int64) bool {
	for _, h := range e.Holes {
		if from >= to {
			return true
		}
		if h.Start <= from && from < h.End {
			from = h.End
		}
	}
	return from >= to
}

// SkipHoles returns the first position at or after pos that is not in a
// recorded hole.
func (e Entry) SkipHoles(pos int64) int64 {
	for _, h := range e.Holes {
		if h.Start <= pos && pos < h.End {
			pos = h.End
		}
	}
	return pos
}

// AddHole records [start, end) as a hole, keeping the holes ordered and
// merged; recording one twice changes nothing.
func (e *Entry) AddHole(start, end int64) {
	if start >= end || e.InHoles(start, end) {
		return
	}
	holes := append(slices.Clone(e.Holes), Hole{start, end})
	slices.SortFunc(holes, func(a, b Hole) int { return cmp.Compare(a.Start, b.Start) })
	merged := holes[:1]
	for _, h := range holes[1:] {
		last := &merged[len(merged)-1]
		if h.Start <= last.End {
			last.End = max(last.End, h.End)
			continue
		}
		merged = append(merged, h)
	}
	e.Holes = merged
}

// DropHolesBefore forgets the holes that end at or before pos (swept away).
func (e *Entry) DropHolesBefore(pos int64) {
	e.Holes = slices.DeleteFunc(slices.Clone(e.Holes), func(h Hole) bool { return h.End <= pos })
	if len(e.Holes) == 0 {
		e.Holes = nil
	}
}

// Cursor is how far a cabinet is acknowledged, written by Dequeue.
type Cursor struct {
	Origin      domain.Origin
	ContentType string
	Acked       int64 // positions before this are acknowledged
	HeadSeq     int64 // sequence number at Acked when known, else 0
	Version     string
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
