//go:build unix

package pebble

import (
	"syscall"
	"unsafe"
)

// The id index's table is mapped outside the Go heap. It is large (8 bytes
// per stored id: 128 MiB for 10 million) and holds no pointers, so the
// collector has nothing to do with it; inside the heap it would count
// towards the heap goal, and with GOGC=400 the hub would let four times that
// much garbage pile up before collecting.

// allocSlots returns n zeroed slots.
func allocSlots(n int) []uint64 {
	b, err := syscall.Mmap(-1, 0, n*8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		// Out of address space or memory: the heap fails the same way,
		// but with a message of its own.
		panic("embedded: mapping the id index: " + err.Error())
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), n) //nolint:gosec // audited: a page-aligned mapping of n*8 bytes viewed as n words

}

// freeSlots returns slots from allocSlots to the system; nothing may use
// them after.
func freeSlots(s []uint64) {
	if len(s) > 0 {
		_ = syscall.Munmap(unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*8)) //nolint:gosec // audited: the bytes of a mapping from allocSlots
	}
}
