package repository

import (
	"fmt"

	"github.com/energydatahub/messagehub/internal/catalog"
)

// checkCabinets refuses a recipient's planned save when it grows a
// cabinet's entry past max drawers. It runs before anything is written;
// the error wraps domain.ErrCabinetFull, on which group commit splits its
// group so that only the saves that do not fit fail.
func checkCabinets(state RecipientState, save RecipientSave, max int) error {
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
