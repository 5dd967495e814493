package hub

import (
	"slices"
	"testing"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// A dequeued record names its drawers only when the entry read covers the
// bundle without a gap and they and the holes within are few; holes are
// cut to the bundle's positions.
func TestDetachNamesTheDrawersCoveringTheBundle(t *testing.T) {
	d := func(id string, start int64, n int) drawer.Meta { return drawer.Meta{ID: id, Start: start, Count: n} }
	rec := bundle.Record{Origin: domain.OriginCharges, ContentType: "c", Start: 9_000, End: 10_500}
	state := func(drawers []drawer.Meta, holes ...catalog.Hole) store.RecipientState {
		return store.RecipientState{Entries: []catalog.Entry{
			{Origin: domain.OriginCharges, ContentType: "other", Drawers: []drawer.Meta{d("x", 0, 20_000)}},
			{Origin: domain.OriginCharges, ContentType: "c", Drawers: drawers, Holes: holes},
		}}
	}
	three := []drawer.Meta{d("a", 0, 8_000), d("b", 8_000, 2_000), d("c", 10_000, 600)}

	got, holes := detach(state(three, catalog.Hole{Start: 5, End: 9}, catalog.Hole{Start: 8_990, End: 9_010}, catalog.Hole{Start: 10_400, End: 10_700}), rec)
	if !slices.Equal(got, three[1:]) || !slices.Equal(holes, [][2]int64{{9_000, 9_010}, {10_400, 10_500}}) {
		t.Fatalf("detach: drawers %+v, holes %v", got, holes)
	}
	for name, st := range map[string]store.RecipientState{
		"a gap before the bundle's end": state(three[:2]),
		"a gap at its start":            state([]drawer.Meta{d("c", 9_500, 1_000)}),
		"no entry":                      {},
		"too many holes": state(three, func() []catalog.Hole {
			var hs []catalog.Hole
			for i := range maxDetachedHoles + 1 {
				hs = append(hs, catalog.Hole{Start: 9_000 + 2*int64(i), End: 9_001 + 2*int64(i)})
			}
			return hs
		}()...),
	} {
		if got, holes := detach(st, rec); got != nil || holes != nil {
			t.Errorf("%s: named drawers %+v holes %v, want none", name, got, holes)
		}
	}
	wide := bundle.Record{Origin: domain.OriginCharges, ContentType: "c", Start: 0, End: int64(maxDetachedDrawers+1) * 10}
	var many []drawer.Meta
	for i := range maxDetachedDrawers + 1 {
		many = append(many, d("m", int64(i)*10, 10))
	}
	if got, _ := detach(state(many), wide); got != nil {
		t.Errorf("a bundle over %d drawers named them", maxDetachedDrawers)
	}
}
