//go:build race

package server

// raceEnabled says that the tests run with the race detector, under which
// the same answers take more of the heap.
const raceEnabled = true
