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

// A dequeued record names the runs within the bundle's positions when
// they are few; a run of no positions is not named. An entry read that
// does not reach the bundle's end is a stale read (not ok), never a record
// that names nothing.
func TestDetachNamesTheRunsWithinTheBundle(t *testing.T) {
	d := func(id string, start int64, n int) drawer.Meta { return drawer.Meta{ID: id, Start: start, Count: n} }
	rec := bundle.Record{Origin: domain.OriginCharges, ContentType: "c", Start: 9_000, End: 10_500}
	state := func(drawers []drawer.Meta) store.RecipientState {
		return store.RecipientState{Entries: []catalog.Entry{
			{Origin: domain.OriginCharges, ContentType: "other", Drawers: []drawer.Meta{d("x", 0, 20_000)}},
			{Origin: domain.OriginCharges, ContentType: "c", Drawers: drawers},
		}}
	}
	// Drawer b holds nothing at 8,990..9,009, drawer c nothing at 10,400..10,449.
	runs := []drawer.Meta{d("a", 0, 8_000), d("b", 8_000, 990), d("b", 9_010, 990), d("e", 10_000, 0), d("c", 10_000, 400), d("c", 10_450, 150)}
	if got, ok := detach(state(runs), rec); !ok || !slices.Equal(got, []drawer.Meta{runs[2], runs[4], runs[5]}) {
		t.Fatalf("detach: %+v, %v, want the runs at 9,010, 10,000 and 10,450", got, ok)
	}
	for name, st := range map[string]store.RecipientState{
		"a read short of the bundle's end": state(runs[:5]),
		"no entry":                         {},
	} {
		if got, ok := detach(st, rec); ok || got != nil {
			t.Errorf("%s: named runs %+v, %v, want a stale read", name, got, ok)
		}
	}
	wide := bundle.Record{Origin: domain.OriginCharges, ContentType: "c", Start: 0, End: int64(maxDetachedDrawers+1) * 10}
	var many []drawer.Meta
	for i := range maxDetachedDrawers + 1 {
		many = append(many, d("m", int64(i)*10, 10))
	}
	if got, ok := detach(state(many), wide); !ok || got != nil {
		t.Errorf("a bundle over %d drawers: %+v, %v, want none named", maxDetachedDrawers, got, ok)
	}
}
