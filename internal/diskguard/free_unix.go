//go:build unix

package diskguard

import (
	"errors"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Free reports the bytes available to unprivileged users on dir's volume.
// A dir not made yet is looked at through its nearest existing parent: the
// volume it will be on.
func Free(dir string) (uint64, error) {
	var st unix.Statfs_t
	for {
		err := unix.Statfs(dir, &st)
		if err == nil {
			break
		}
		if parent := filepath.Dir(dir); errors.Is(err, unix.ENOENT) && parent != dir {
			dir = parent
			continue
		}
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil //nolint:gosec // block counts and sizes are not negative
}

// SameVolume reports whether a and b are on one filesystem; a path not made
// yet is looked at through its nearest existing parent.
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
	for {
		err := unix.Stat(path, &st)
		if err == nil {
			return uint64(st.Dev), nil //nolint:gosec,unconvert // its type differs between platforms
		}
		if parent := filepath.Dir(path); errors.Is(err, unix.ENOENT) && parent != path {
			path = parent
			continue
		}
		return 0, err
	}
}
