//go:build unix

package diskguard

import (
	"errors"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Free reports the bytes available to unprivileged users on dir's volume.
func Free(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := nearest(dir, func(p string) error { return unix.Statfs(p, &st) }); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil //nolint:gosec // block counts and sizes are not negative
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
