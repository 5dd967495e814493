//go:build !linux && !darwin

package content

import (
	"errors"
	"os"
)

// renameNoReplace has no rename that never replaces a file to call on this
// system: a folder without hard links stores no document here rather than
// replace one.
func renameNoReplace(*os.Root, string, string) error {
	return errors.New("no rename that never replaces a file on this system")
}
