//go:build unix

package diskguard

import (
	"errors"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Free reports the bytes available to unprivileged users on dir's volume,
// or fewer when its free inodes run out first: each counts for the volume's
// bytes per inode. A volume with no inode left is full whatever its free
// bytes, for pebble cannot create a table or a log, and its start-up flush
// would wait for one forever. A volume that reports no inode count (btrfs)
// makes inodes as it needs them.
func Free(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := nearest(dir, func(p string) error { return unix.Statfs(p, &st) }); err != nil {
		return 0, err
	}
	free := uint64(st.Bavail) * uint64(st.Bsize) //nolint:gosec // block counts and sizes are not negative
	if files := uint64(st.Files); files > 0 {    //nolint:gosec,unconvert // its type differs between platforms
		perInode := uint64(st.Blocks) * uint64(st.Bsize) / files //nolint:gosec // block counts and sizes are not negative
		free = min(free, uint64(st.Ffree)*perInode)              //nolint:gosec,unconvert // its type differs between platforms
	}
	return free, nil
}

// Size reports the size of dir's volume, in bytes.
func Size(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := nearest(dir, func(p string) error { return unix.Statfs(p, &st) }); err != nil {
		return 0, err
	}
	return uint64(st.Blocks) * uint64(st.Bsize), nil //nolint:gosec // block counts and sizes are not negative
}

// SameVolume reports whether a and b are on one filesystem.
func SameVolume(a, b string) (bool, error) {
	da, err := device(a)
	if err != nil {
		return false, err
	}
	db, err := device(b)
	return da == db, err
}

func device(path string) (uint64, error) {
	var st unix.Stat_t
	err := nearest(path, func(p string) error { return unix.Stat(p, &st) })
	return uint64(st.Dev), err //nolint:gosec,unconvert // its type differs between platforms
}

// nearest calls stat with path, or with its nearest existing parent: a path
// not made yet is looked at through the volume it will be on.
func nearest(path string, stat func(string) error) error {
	for {
		err := stat(path)
		parent := filepath.Dir(path)
		if !errors.Is(err, unix.ENOENT) || parent == path {
			return err
		}
		path = parent
	}
}
