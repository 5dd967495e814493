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

// A dequeued bundle's record keeps the drawer runs it reads back from only
// up to this count (about 11 KB), so the record stays small; a bundle over
// more (a raised weight limit, a drawer its store left in many pieces)
// reads back through its entry, which then keeps those drawers.
const maxDetachedDrawers = 64

// detach returns the runs of the bundle's cabinet within its positions, for
// its record at dequeue; nil when they are too many. ok is false when the
// entry read does not reach the bundle's end: a load answered in pages read
// it before a save appended what the bundle, read in a later page, holds.
// A record stored without its drawers then would be taken for one over
// more runs than a record names, and retention could take its drawer out
// of the entry while it still reads through it.
func detach(state store.RecipientState, rec bundle.Record) (runs []drawer.Meta, ok bool) {
	i := slices.IndexFunc(state.Entries, func(e catalog.Entry) bool {
		return e.Origin == rec.Origin && e.ContentType == rec.ContentType
	})
	if i < 0 {
		return nil, false
	}
	for _, d := range state.Entries[i].Drawers {
		if d.Count > 0 && d.End() > rec.Start && d.Start < rec.End {
			runs = append(runs, d)
		}
	}
	switch {
	case len(runs) == 0 || runs[len(runs)-1].End() < rec.End:
		return nil, false
	case len(runs) > maxDetachedDrawers:
		return nil, true
	}
	return runs, true
}
