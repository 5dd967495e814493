package cosmos

import (
	"strconv"
	"testing"
)

// A save reserves on the head its planning load read only when the load saw
// the version the plan names; heads with reservations are not kept, and
// the heads kept stay within their bound.
func TestKnownHeadsServeOnlyTheVersionLoaded(t *testing.T) {
	var k knownHeads
	k.keep("r", headDoc{ID: headID, Next: 7, ETag: "v1"})
	if h, ok := k.get("r", "v1"); !ok || h.Next != 7 {
		t.Fatalf("get(v1) = %+v, %v; want the head loaded", h, ok)
	}
	if _, ok := k.get("r", "v2"); ok {
		t.Fatal("a head of another version served")
	}
	k.keep("r", headDoc{ID: headID, Next: 9, ETag: "v3", Reservations: []reservation{{Save: "s"}}})
	if _, ok := k.get("r", "v1"); ok {
		t.Fatal("a head kept after a load saw it with reservations")
	}
	for i := range 2 * maxKnownHeads {
		k.keep(strconv.Itoa(i), headDoc{ETag: "v"})
	}
	if n := len(k.m); n > maxKnownHeads {
		t.Fatalf("%d heads kept, want at most %d", n, maxKnownHeads)
	}
}
