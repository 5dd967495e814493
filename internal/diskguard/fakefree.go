//go:build messagehub_fakefree

package diskguard

import (
	"fmt"
	"os"
)

// fakeFreeEnv names the variable that, in a binary built with the
// messagehub_fakefree tag (the end-to-end tests' binary, never a release),
// sets the free space a guard reads for its volume, a size like 24MiB: the
// tests put a hub on a nearly full volume without filling a real one. The
// volume's size is still the volume's own, and the guard's counting and
// refusals are the real ones.
const fakeFreeEnv = "MESSAGEHUB_FAKE_DISK_FREE"

func init() {
	v, ok := os.LookupEnv(fakeFreeEnv)
	if !ok {
		return
	}
	n, err := ParseSize(v)
	if err != nil {
		panic(fmt.Sprintf("%s: %v", fakeFreeEnv, err))
	}
	volumeFree = func(string) (uint64, error) { return n, nil }
}
