package content

import "golang.org/x/sys/unix"

// renameNoReplaceAt is renameat2 with RENAME_NOREPLACE (EEXIST when to is
// there; EINVAL on a filesystem that cannot honour it, which then stores
// no document rather than replace one).
func renameNoReplaceAt(dirfd int, from, to string) error {
	return unix.Renameat2(dirfd, from, dirfd, to, unix.RENAME_NOREPLACE)
}
