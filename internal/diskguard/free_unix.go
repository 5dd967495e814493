//go:build unix

package diskguard

import "golang.org/x/sys/unix"

// Free reports the bytes available to unprivileged users on dir's volume.
func Free(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil //nolint:gosec // block counts and sizes are not negative
}
