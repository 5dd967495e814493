package hub

import (
	"strconv"
	"testing"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// drainedState is a full state with one cabinet of 5 positions, acknowledged
// up to acked, at head version v.
func drainedState(v string, acked int64) store.RecipientState {
	key := catalog.Key{Origin: domain.OriginCharges, ContentType: "c"}
	return store.RecipientState{
		Head:    store.Head{NextSeq: 6, Watermark: 5, Version: v},
		Entries: []catalog.Entry{{Origin: key.Origin, ContentType: key.ContentType, Total: 5, Drawers: []drawer.Meta{{ID: "d", Start: 0, Count: 5}}}},
		Cursors: []catalog.Cursor{{Origin: key.Origin, ContentType: key.ContentType, Acked: acked}},
	}
}

// A recipient is marked on the second full state with nothing waiting at
// one head version, and only then.
func TestTheSecondEmptyLookAtOneHeadVersionMarks(t *testing.T) {
	m := newIdleMarks()
	steps := []struct {
		state store.RecipientState
		mark  bool
	}{
		{drainedState("v1", 5), false},
		{drainedState("v2", 5), false}, // another version: counts as a first look
		{drainedState("v2", 5), true},
		{drainedState("v2", 5), false}, // marked: counting starts over
		{drainedState("v2", 3), false}, // two positions waiting
		{drainedState("v2", 5), false},
		{drainedState("v2", 5), true},
	}
	for i, s := range steps {
		if got := m.seen("r", s.state); got != s.mark {
			t.Fatalf("look %d: mark = %v, want %v", i, got, s.mark)
		}
	}
}

// Nothing waits only when no position after a cursor is held, no bundle is
// pending and no save is under way; a hole after the cursor is no wait.
func TestNothingWaits(t *testing.T) {
	withHole := drainedState("v", 3)
	withHole.Entries[0].Drawers = []drawer.Meta{{ID: "d", Start: 0, Count: 3}} // positions 3 and 4 a hole
	underWay := drainedState("v", 5)
	underWay.Head.Watermark = 4
	pending := drainedState("v", 5)
	pending.Pending = append(pending.Pending, bundle.Record{ID: "b", Origin: domain.OriginCharges, ContentType: "c", Start: 5, End: 5})
	for name, c := range map[string]struct {
		state store.RecipientState
		want  bool
	}{
		"drained":             {drainedState("v", 5), true},
		"two waiting":         {drainedState("v", 3), false},
		"a hole after cursor": {withHole, true},
		"a save under way":    {underWay, false},
		"a pending bundle":    {pending, false},
		"no head":             {store.RecipientState{}, false},
	} {
		if got := nothingWaits(c.state); got != c.want {
			t.Errorf("%s: nothingWaits = %v, want %v", name, got, c.want)
		}
	}
}

// The recipients between their first and second empty look are bounded:
// past the bound one is forgotten, which only delays its mark.
func TestEmptyLooksRememberedAreBounded(t *testing.T) {
	m := newIdleMarks()
	for i := range maxEmptyRemembered + 100 {
		m.seen(strconv.Itoa(i), drainedState("v", 5))
	}
	if n := len(m.empty); n != maxEmptyRemembered {
		t.Fatalf("%d recipients remembered, want %d", n, maxEmptyRemembered)
	}
}
