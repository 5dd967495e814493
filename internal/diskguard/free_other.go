//go:build !unix

package diskguard

import "math"

// Free cannot be read on this platform: the guard never refuses.
func Free(string) (uint64, error) { return math.MaxUint64, nil }

// Size cannot be read on this platform: every reserve fits.
func Size(string) (uint64, error) { return math.MaxUint64, nil }

// SameVolume cannot tell on this platform: it says they are, so that a
// backup is held to the reserve.
func SameVolume(string, string) (bool, error) { return true, nil }
