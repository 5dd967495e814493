package embedded

import (
	"crypto/rand"
	"testing"
)

// Every key added is found, and keys never added are rarely reported, also
// after the filter is encoded and decoded.
func TestBlockedBloomFindsEveryKeyAndFewOthers(t *testing.T) {
	const n = 100_000
	b := newBlockedBloom(n)
	key := func() []byte {
		k := make([]byte, 17)
		_, _ = rand.Read(k)
		return k
	}
	added := make([][]byte, n)
	for i := range added {
		added[i] = key()
		b.add(added[i])
	}
	decoded, err := decodeBlockedBloom(b.appendTo(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*blockedBloom{b, decoded} {
		for _, k := range added {
			if !f.mayContain(k) {
				t.Fatalf("added key %x not found", k)
			}
		}
		falsePositives := 0
		for range n {
			if f.mayContain(key()) {
				falsePositives++
			}
		}
		if rate := float64(falsePositives) / n; rate > 0.015 {
			t.Fatalf("false-positive rate %.4f when full, want about 0.007", rate)
		}
	}
	if _, err := decodeBlockedBloom(b.appendTo(nil)[:100]); err == nil {
		t.Fatal("a truncated filter decoded")
	}
}
