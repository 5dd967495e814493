package diskguard

import (
	"fmt"
	"strconv"
	"strings"
)

var units = []struct {
	suffix string
	bytes  uint64
}{
	// Longest suffixes first, so that "GiB" is not read as "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// ParseSize reads a byte size: a whole number with an optional unit (B, KB,
// MB, GB, TB, KiB, MiB, GiB, TiB; case-insensitive), e.g. "1GiB", "500MB".
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	mult := uint64(1)
	for _, u := range units {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.bytes
			break
		}
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size like 1GiB or 500MB", s)
	}
	if n > 0 && mult > ^uint64(0)/n {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}

// FormatSize writes a byte size in binary units.
func FormatSize(n uint64) string {
	for i := len(units) - 6; i >= 0; i-- { // TiB down to KiB
		if u := units[i]; n >= u.bytes {
			return strconv.FormatFloat(float64(n)/float64(u.bytes), 'f', 1, 64) + u.suffix
		}
	}
	return strconv.FormatUint(n, 10) + "B"
}
