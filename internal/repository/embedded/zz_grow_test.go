package embedded

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestZZGrowTime(t *testing.T) {
	const n = 12_500_000
	x := newIDIndex(n)
	r := rand.New(rand.NewPCG(1, 2))
	add := make([]uint64, 0, n)
	for range n {
		add = append(add, idEntry(r.Uint64()>>groupBits|1<<(hashBits-1), 1))
	}
	x.change(add, nil)
	t.Logf("slots %d count %d", len(x.slots), x.count)
	for i := 0; i < 2; i++ {
		t0 := time.Now()
		x.mu.Lock()
		x.grow(len(x.slots))
		x.mu.Unlock()
		t.Logf("grow to %d took %v", len(x.slots), time.Since(t0))
	}
}
