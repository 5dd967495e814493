//go:build linux || darwin

package content

import (
	"errors"
	"os"
	"path"
)

// renameNoReplace renames from to to, two names in one folder of root,
// and fails with an error that is fs.ErrExist when a file is at to: the
// system's rename that never replaces a file (renameNoReplaceAt), checked
// by the kernel under the folder's lock, so as atomic as a hard link.
func renameNoReplace(root *os.Root, from, to string) error {
	dir, fromName, toName := path.Dir(from), path.Base(from), path.Base(to)
	if path.Dir(to) != dir || !isName(fromName) || !isName(toName) {
		return errors.New("a rename that replaces nothing needs two names in one folder")
	}
	d, err := root.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	conn, err := d.SyscallConn()
	if err != nil {
		return err
	}
	var rerr error
	if err := conn.Control(func(fd uintptr) {
		rerr = renameNoReplaceAt(int(fd), fromName, toName) //nolint:gosec // a file descriptor fits an int
	}); err != nil {
		return err
	}
	if rerr != nil {
		return &os.LinkError{Op: "rename (never replacing)", Old: from, New: to, Err: rerr}
	}
	return nil
}

// isName says whether name names an entry of a folder, not the folder or
// its parent.
func isName(name string) bool { return name != "." && name != ".." && name != "/" }
