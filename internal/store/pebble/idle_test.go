package pebble_test

import (
	"testing"

	"github.com/energydatahub/messagehub/internal/store/storetest"
)

// The embedded store keeps no idle mark: its loads are read from memory.
// The suite checks that the hub's marks and cheaper loads change nothing
// it answers.
func TestIdleContract(t *testing.T) {
	storetest.RunIdle(t, openChain)
}
