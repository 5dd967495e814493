//go:build !unix

package pebble

// allocSlots returns n zeroed slots (on the heap where mapping memory is
// not done: see idindex_slots_unix.go).
func allocSlots(n int) []uint64 { return make([]uint64, n) }

func freeSlots([]uint64) {}
