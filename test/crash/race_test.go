//go:build race

package crash

// raceEnabled builds the binary under test with the race detector when the
// test itself runs with it.
const raceEnabled = true
