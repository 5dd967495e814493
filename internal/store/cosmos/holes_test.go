package cosmos

import (
	"slices"
	"testing"

	"github.com/energydatahub/messagehub/internal/drawer"
)

func TestHolesAreRecordedMerged(t *testing.T) {
	var h [][2]int64
	h = addHole(h, 10, 20)
	h = addHole(h, 30, 40)
	h = addHole(h, 20, 25) // touches the first: merged
	h = addHole(h, 12, 14) // inside: nothing changes
	h = addHole(h, 5, 5)   // empty: nothing changes
	if want := [][2]int64{{10, 25}, {30, 40}}; !slices.Equal(h, want) {
		t.Fatalf("holes = %v, want %v", h, want)
	}
	if again := addHole(h, 30, 40); !slices.Equal(again, h) {
		t.Fatalf("recording [30, 40) again: %v, want %v", again, h)
	}
}

// The hub sees a drawer as the runs around its holes, and what it writes
// back is the drawer whole with the same holes: a hole may cross from one
// drawer into the next, and a drawer all holes is a run of none.
func TestRunsCutHolesOutOfDrawersAndBackAgain(t *testing.T) {
	whole := []drawerMeta{
		{ID: "a", Start: 0, Count: 100, FirstSeq: 1, LastSeq: 100, FirstAt: 1_000, LastAt: 1_099},
		{ID: "b", Start: 100, Count: 50, FirstSeq: 101, LastSeq: 150, FirstAt: 2_000, LastAt: 2_000},
		{ID: "c", Start: 150, Count: 10, FirstSeq: 151, LastSeq: 160, FirstAt: 3_000, LastAt: 3_000},
		{ID: "d", Start: 160, Count: 5, FirstSeq: 161, LastSeq: 165, FirstAt: 4_000, LastAt: 4_000},
	}
	holes := [][2]int64{{0, 2}, {40, 45}, {98, 103}, {150, 160}, {163, 165}}
	want := []drawer.Meta{
		{ID: "a", Start: 2, Count: 38, LastSeq: 0, FirstAt: 1_002, LastAt: 1_039},
		{ID: "a", Start: 45, Count: 53, FirstAt: 1_045, LastAt: 1_097},
		{ID: "b", Start: 103, Count: 47, LastSeq: 150, FirstAt: 2_000, LastAt: 2_000},
		{ID: "c", Start: 150},
		{ID: "d", Start: 160, Count: 3, FirstSeq: 161, FirstAt: 4_000, LastAt: 4_000},
	}
	got := toRuns(whole, holes)
	if !slices.Equal(got, want) {
		t.Fatalf("runs\n%+v\nwant\n%+v", got, want)
	}
	for i, r := range got {
		if r.Count > 0 && r.FirstAt != drawer.Meta(whole[slices.IndexFunc(whole, func(d drawerMeta) bool { return d.ID == r.ID })]).SavedAt(r.Start) {
			t.Errorf("run %d: first saved at %d, not its drawer's estimate", i, r.FirstAt)
		}
	}
	if got := drawer.Held(got, 0); got != 165-2-5-5-10-2 {
		t.Errorf("runs hold %d positions, want %d", got, 165-2-5-5-10-2)
	}
	// Written back, a drawer starts at its first run and ends at its last;
	// the positions between runs are holes (those before the first run and
	// after the last are no drawer's).
	drawers, back := fromRuns(got)
	if wantHoles := [][2]int64{{40, 45}, {98, 103}, {150, 160}}; !slices.Equal(back, wantHoles) {
		t.Fatalf("holes written back %v, want %v", back, wantHoles)
	}
	if again := toRuns(drawers, back); !slices.Equal(again, got) {
		t.Fatalf("runs read back\n%+v\nwant\n%+v", again, got)
	}
	if toRuns(nil, holes) != nil {
		t.Error("no drawers read back as some")
	}
}
