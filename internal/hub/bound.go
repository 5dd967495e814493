package hub

import (
	"fmt"
	"slices"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// checkCabinets refuses a recipient's planned save when it grows a
// cabinet's entry past max drawers. It runs before anything is written;
// the error wraps domain.ErrCabinetFull, on which group commit splits its
// group so that only the saves that do not fit fail.
func checkCabinets(state store.RecipientState, save store.RecipientSave, max int) error {
	before := make(map[catalog.Key]catalog.Entry, len(state.Entries))
	for _, e := range state.Entries {
		before[e.Key()] = e
	}
	for _, e := range save.Entries {
		if err := catalog.CheckDrawers(before[e.Key()], e, max); err != nil {
			return fmt.Errorf("recipient %s: %w", save.Recipient, err)
		}
	}
	return nil
}

// A dequeued bundle's record keeps the drawers and holes it reads back from
// only up to these counts (about 11 KB), so the record stays small; a
// bundle with more (a raised weight limit, many aborted saves within it)
// reads back through its entry, which then keeps those drawers.
const (
	maxDetachedDrawers = 64
	maxDetachedHoles   = 64
)

// detach returns the drawers of the bundle's cabinet that cover its
// positions, and the holes within them, for its record at dequeue; nil
// when the entry read does not cover them without a gap (a lagging read)
// or they are too many.
func detach(state store.RecipientState, rec bundle.Record) ([]drawer.Meta, [][2]int64) {
	i := slices.IndexFunc(state.Entries, func(e catalog.Entry) bool {
		return e.Origin == rec.Origin && e.ContentType == rec.ContentType
	})
	if i < 0 {
		return nil, nil
	}
	e := state.Entries[i]
	var drawers []drawer.Meta
	next := rec.Start
	for _, d := range e.Drawers {
		if d.End() <= rec.Start || d.Start >= rec.End {
			continue
		}
		if d.Start > next {
			return nil, nil
		}
		drawers = append(drawers, d)
		next = d.End()
	}
	var holes [][2]int64
	for _, h := range e.Holes {
		if h.End > rec.Start && h.Start < rec.End {
			holes = append(holes, [2]int64{max(h.Start, rec.Start), min(h.End, rec.End)})
		}
	}
	if len(drawers) == 0 || next < rec.End || len(drawers) > maxDetachedDrawers || len(holes) > maxDetachedHoles {
		return nil, nil
	}
	return drawers, holes
}
