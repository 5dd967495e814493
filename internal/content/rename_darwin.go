package content

import "golang.org/x/sys/unix"

// renameNoReplaceAt is renameatx_np with RENAME_EXCL (EEXIST when to is
// there).
func renameNoReplaceAt(dirfd int, from, to string) error {
	return unix.RenameatxNp(dirfd, from, dirfd, to, unix.RENAME_EXCL)
}
