package drawer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/drawer"
)

// numbered returns n items at positions start, start+1, ... with sequence
// numbers that leave gaps (as sequence numbers may).
func numbered(start int64, n int) []drawer.Item {
	items := make([]drawer.Item, n)
	for i := range items {
		pos := start + int64(i)
		items[i] = drawer.Item{
			Pos: pos, Seq: 100 + 3*pos, ID: fmt.Sprintf("n-%d", pos),
			DocumentType: "doc", SupportsBundling: pos%7 != 0, Weight: 1 + pos%5,
		}
	}
	return items
}

// plain is numbered without the per-item strings, for fast fuzzing.
func plain(start int64, n int) []drawer.Item {
	items := make([]drawer.Item, n)
	for i := range items {
		pos := start + int64(i)
		items[i] = drawer.Item{Pos: pos, Seq: 100 + 3*pos, Weight: 1}
	}
	return items
}

// idSource hands out drawer ids d1, d2, ... and counts how many it gave.
type idSource struct{ n int }

func (s *idSource) next() string { s.n++; return fmt.Sprintf("d%d", s.n) }

// checkLayout fails unless drawers and pages are a correct filing of items:
// contiguous drawers of at most Capacity items, every one but the last full,
// metadata matching the items, and pages of at most PageSize items that stay
// within one drawer and together hold every item exactly once, in order.
func checkLayout(t *testing.T, drawers []drawer.Meta, pages []drawer.Page, items []drawer.Item) {
	t.Helper()
	byDrawer := map[string][]drawer.Item{}
	for i, p := range pages {
		if len(p.Items) == 0 || len(p.Items) > drawer.PageSize {
			t.Fatalf("page %d holds %d items, want 1..%d", i, len(p.Items), drawer.PageSize)
		}
		byDrawer[p.DrawerID] = append(byDrawer[p.DrawerID], p.Items...)
	}
	var pos int64
	if len(items) > 0 {
		pos = items[0].Pos
	}
	total := 0
	for i, d := range drawers {
		if d.Count < 1 || d.Count > drawer.Capacity {
			t.Fatalf("drawer %d (%s) holds %d items, want 1..%d", i, d.ID, d.Count, drawer.Capacity)
		}
		if i < len(drawers)-1 && d.Count < drawer.Capacity {
			t.Fatalf("drawer %d (%s) holds %d items but is not the last, want it full", i, d.ID, d.Count)
		}
		if d.Start != pos {
			t.Fatalf("drawer %d (%s) starts at %d, want %d", i, d.ID, d.Start, pos)
		}
		if total+d.Count > len(items) {
			t.Fatalf("drawers hold more than the %d items filed", len(items))
		}
		got := byDrawer[d.ID]
		want := items[total : total+d.Count]
		if !slices.Equal(got, want) {
			t.Fatalf("pages of drawer %d (%s) hold %d items [%v..], want %d items [%v..]", i, d.ID, len(got), first(got), len(want), first(want))
		}
		if d.FirstSeq != want[0].Seq || d.LastSeq != want[len(want)-1].Seq {
			t.Fatalf("drawer %d (%s) seqs %d..%d, want %d..%d", i, d.ID, d.FirstSeq, d.LastSeq, want[0].Seq, want[len(want)-1].Seq)
		}
		delete(byDrawer, d.ID)
		pos = d.End()
		total += d.Count
	}
	if total != len(items) {
		t.Fatalf("drawers hold %d items, want %d", total, len(items))
	}
	if len(byDrawer) != 0 {
		t.Fatalf("pages written to drawers that are not in the layout: %v", keys(byDrawer))
	}
}

func first(items []drawer.Item) any {
	if len(items) == 0 {
		return nil
	}
	return items[0].Pos
}

func keys(m map[string][]drawer.Item) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestAppendNeverOverfillsADrawerWhateverTheSaveSizes(t *testing.T) {
	ones := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = 1
		}
		return s
	}
	tests := []struct {
		name       string
		saves      []int
		wantCounts []int
	}{
		{"one item opens the first drawer", []int{1}, []int{1}},
		{"an empty save opens nothing", []int{0}, nil},
		{"exactly capacity fills one drawer", []int{10_000}, []int{10_000}},
		{"capacity plus one opens a second drawer", []int{10_001}, []int{10_000, 1}},
		{"9,999 then 2 fill the first drawer and spill one", []int{9_999, 2}, []int{10_000, 1}},
		{"a full drawer then one more opens a second", []int{10_000, 1}, []int{10_000, 1}},
		{"25,000 at once fill two drawers and half a third", []int{25_000}, []int{10_000, 10_000, 5_000}},
		{"5,000 three times fill one drawer and half another", []int{5_000, 5_000, 5_000}, []int{10_000, 5_000}},
		{"uneven saves straddle several drawers", []int{3_333, 9_999, 1, 6_667, 10_000, 1}, []int{10_000, 10_000, 10_000, 1}},
		{"the largest save after one item spans two drawers", []int{1, 10_000}, []int{10_000, 1}},
		{"10,001 saves of one item", ones(10_001), []int{10_000, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ids idSource
			var drawers []drawer.Meta
			var pages []drawer.Page
			var pos int64
			for _, n := range tt.saves {
				items := numbered(pos, n)
				opened := ids.n
				next, newPages := drawer.Append(drawers, items, ids.next, 0)
				if got, want := ids.n-opened, len(next)-len(drawers); got != want {
					t.Fatalf("save of %d: %d new ids asked for, %d drawers opened", n, got, want)
				}
				var written []drawer.Item
				for _, p := range newPages {
					written = append(written, p.Items...)
				}
				if !slices.Equal(written, items) {
					t.Fatalf("save of %d wrote %d items, want exactly its own %d in order", n, len(written), n)
				}
				drawers, pages, pos = next, append(pages, newPages...), pos+int64(n)
			}
			var counts []int
			for _, d := range drawers {
				counts = append(counts, d.Count)
			}
			if !slices.Equal(counts, tt.wantCounts) {
				t.Fatalf("drawer counts = %v, want %v", counts, tt.wantCounts)
			}
			for i, d := range drawers {
				if want := fmt.Sprintf("d%d", i+1); d.ID != want {
					t.Errorf("drawer %d has id %q, want %q from the id source", i, d.ID, want)
				}
			}
			checkLayout(t, drawers, pages, numbered(0, int(pos)))
		})
	}
}

func TestAppendCutsPagesAtPageSizeAndAtDrawerBoundaries(t *testing.T) {
	tests := []struct {
		name      string
		before    int // items already filed
		save      int
		wantPages []string // "drawer:size" of the save's pages
	}{
		{"a small save is one page", 0, 10, []string{"d1:10"}},
		{"a page holds at most 1,000 items", 0, 2_500, []string{"d1:1000", "d1:1000", "d1:500"}},
		{"a page never crosses into the next drawer", 9_500, 1_500, []string{"d1:500", "d2:1000"}},
		{"the last item of a drawer gets its own page", 9_999, 2, []string{"d1:1", "d2:1"}},
		{"a save over three drawers", 9_000, 11_001, []string{"d1:1000", "d2:1000", "d2:1000", "d2:1000", "d2:1000", "d2:1000", "d2:1000", "d2:1000", "d2:1000", "d2:1000", "d2:1000", "d3:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ids idSource
			drawers, _ := drawer.Append(nil, numbered(0, tt.before), ids.next, 0)
			_, pages := drawer.Append(drawers, numbered(int64(tt.before), tt.save), ids.next, 0)
			var got []string
			for _, p := range pages {
				got = append(got, fmt.Sprintf("%s:%d", p.DrawerID, len(p.Items)))
			}
			if !slices.Equal(got, tt.wantPages) {
				t.Errorf("pages = %v, want %v", got, tt.wantPages)
			}
			for _, p := range pages {
				if p.Start() != p.Items[0].Pos {
					t.Errorf("page Start() = %d, want its first position %d", p.Start(), p.Items[0].Pos)
				}
			}
		})
	}
}

func TestAppendContinuesTheLastDrawerAndKeepsItsIdentity(t *testing.T) {
	existing := []drawer.Meta{
		{ID: "old-1", Start: 0, Count: 10_000, FirstSeq: 100, LastSeq: 100 + 3*9_999},
		{ID: "old-2", Start: 10_000, Count: 4, FirstSeq: 100 + 3*10_000, LastSeq: 100 + 3*10_003},
	}
	var ids idSource
	got, _ := drawer.Append(existing, numbered(10_004, 9_997), ids.next, 0)
	want := []drawer.Meta{
		existing[0],
		{ID: "old-2", Start: 10_000, Count: 10_000, FirstSeq: 100 + 3*10_000, LastSeq: 100 + 3*19_999},
		{ID: "d1", Start: 20_000, Count: 1, FirstSeq: 100 + 3*20_000, LastSeq: 100 + 3*20_000},
	}
	if !slices.Equal(got, want) {
		t.Errorf("drawers = %+v\nwant      %+v", got, want)
	}
}

func TestAppendNeverModifiesTheDrawersItIsGiven(t *testing.T) {
	tests := []struct {
		name string
		save int
	}{
		{"filling the last drawer", 5},
		{"filling it and opening more", 25_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ids idSource
			base, _ := drawer.Append(nil, numbered(0, 9_990), ids.next, 0)
			// Spare capacity invites an in-place append; it must not happen.
			drawers := slices.Grow(slices.Clone(base), 10)
			before := slices.Clone(drawers)
			spare := drawers[:cap(drawers)]
			spareBefore := slices.Clone(spare)
			got, _ := drawer.Append(drawers, numbered(9_990, tt.save), ids.next, 0)
			if !slices.Equal(drawers, before) || !slices.Equal(spare, spareBefore) {
				t.Fatalf("Append modified its input: %+v, was %+v", drawers, before)
			}
			got[0].Count = -1
			if drawers[0].Count == -1 {
				t.Errorf("the result shares its backing array with the input")
			}
		})
	}
}

func TestContainingFindsTheDrawerOfAPosition(t *testing.T) {
	// Drawers from 100 on: the ones before were swept away.
	drawers := []drawer.Meta{
		{ID: "a", Start: 100, Count: 10_000},
		{ID: "b", Start: 10_100, Count: 10_000},
		{ID: "c", Start: 20_100, Count: 5},
	}
	tests := []struct {
		name string
		pos  int64
		want int
	}{
		{"the first position of the first drawer", 100, 0},
		{"the last position of the first drawer", 10_099, 0},
		{"the first position of the second drawer", 10_100, 1},
		{"a position in the middle of the second drawer", 15_000, 1},
		{"the last position of the last drawer", 20_104, 2},
		{"the position after the last drawer is in none", 20_105, -1},
		{"a swept position before the first drawer is in none", 99, -1},
		{"position 0 before the first drawer is in none", 0, -1},
		{"a negative position is in none", -1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := drawer.Containing(drawers, tt.pos); got != tt.want {
				t.Errorf("Containing(%d) = %d, want %d", tt.pos, got, tt.want)
			}
		})
	}
	if got := drawer.Containing(nil, 0); got != -1 {
		t.Errorf("Containing(no drawers, 0) = %d, want -1", got)
	}
}

func TestMetaEnd(t *testing.T) {
	if got := (drawer.Meta{Start: 7}).End(); got != 7 {
		t.Errorf("End() of an empty run = %d, want its start 7", got)
	}
	if got := (drawer.Meta{Start: 10, Count: 9_999}).End(); got != 10_009 {
		t.Errorf("End() = %d, want 10009", got)
	}
}

// A drawer whose store left positions empty is listed as the runs around
// them: the positions between runs are never expected, none is counted,
// and the first held position skips them.
func TestFirstAndHeldSkipThePositionsBetweenRuns(t *testing.T) {
	runs := []drawer.Meta{
		{ID: "a", Start: 100, Count: 3}, // 100..102
		{ID: "a", Start: 105, Count: 5}, // 105..109
		{ID: "b", Start: 110, Count: 0}, // a drawer with nothing left
		{ID: "c", Start: 120, Count: 2}, // 120..121
	}
	for _, tt := range []struct {
		pos, want int64
		run       int
	}{
		{0, 100, 0}, {101, 101, 0}, {103, 105, 1}, {109, 109, 1}, {110, 120, 3}, {121, 121, 3}, {122, 0, -1},
	} {
		if got, i := drawer.First(runs, tt.pos); got != tt.want || i != tt.run {
			t.Errorf("First(%d) = %d, run %d; want %d, run %d", tt.pos, got, i, tt.want, tt.run)
		}
	}
	for _, tt := range []struct{ from, want int64 }{{0, 10}, {101, 9}, {104, 7}, {110, 2}, {121, 1}, {200, 0}} {
		if got := drawer.Held(runs, tt.from); got != tt.want {
			t.Errorf("Held(%d) = %d, want %d", tt.from, got, tt.want)
		}
	}
}

// A last run that ends before the new items start (its drawer's tail was
// left empty) is not continued: the items open a new drawer at their own
// positions. A last run that continues counts its drawer's earlier runs
// against Capacity.
func TestAppendOpensADrawerAfterARunThatStopsShort(t *testing.T) {
	var ids idSource
	short := []drawer.Meta{{ID: "old", Start: 0, Count: 5}}
	got, pages := drawer.Append(short, numbered(8, 2), ids.next, 0)
	want := []drawer.Meta{short[0], {ID: "d1", Start: 8, Count: 2, FirstSeq: 100 + 3*8, LastSeq: 100 + 3*9}}
	if !slices.Equal(got, want) || len(pages) != 1 || pages[0].DrawerID != "d1" {
		t.Fatalf("after a short run: drawers %+v pages %+v; want %+v", got, pages, want)
	}
	split := []drawer.Meta{{ID: "old", Start: 0, Count: 6_000}, {ID: "old", Start: 6_010, Count: 3_000}}
	got, _ = drawer.Append(split, numbered(9_010, 1_500), ids.next, 0)
	if len(got) != 3 || got[1].Count != 4_000 || got[2].ID != "d2" || got[2].Start != 10_010 || got[2].Count != 500 {
		t.Fatalf("continuing a drawer of two runs: %+v; want its last run filled to 10,000 items and 500 in a new drawer", got)
	}
}

// FuzzAppend files a random run of saves and checks the layout after each.
func FuzzAppend(f *testing.F) {
	f.Add([]byte{0x27, 0x0f, 0x00, 0x02})             // 9,999 then 2
	f.Add([]byte{0x61, 0xa8})                         // 25,000
	f.Add([]byte{0x27, 0x10, 0x00, 0x01, 0x00, 0x00}) // 10,000, 1, 0
	f.Fuzz(func(t *testing.T, data []byte) {
		var ids idSource
		var drawers []drawer.Meta
		var pages []drawer.Page
		var pos int64
		for len(data) >= 2 && pos < 60_000 {
			n := (int(data[0])<<8 | int(data[1])) % 25_001
			data = data[2:]
			before := slices.Clone(drawers)
			next, newPages := drawer.Append(drawers, plain(pos, n), ids.next, 0)
			if !slices.Equal(drawers, before) {
				t.Fatalf("Append modified its input drawers")
			}
			for _, d := range next {
				if d.Count > drawer.Capacity {
					t.Fatalf("after a save of %d drawer %s holds %d items", n, d.ID, d.Count)
				}
			}
			drawers, pages, pos = next, append(pages, newPages...), pos+int64(n)
		}
		checkLayout(t, drawers, pages, plain(0, int(pos)))
	})
}

// memStore is an in-memory drawer store: a test double of the read function
// that honours from/to/limit, checks its arguments and records what it was
// asked for.
type memStore struct {
	t       *testing.T
	drawers map[string][]drawer.Item
	meta    map[string]drawer.Meta
	fail    map[string]error // drawer id → error to return

	// gate, when > 0, holds the first reads until this many are in flight
	// at once: reaching the limit is an event the test waits for, not a
	// race it hopes to win. Once open, the gate stays open.
	gate      int
	gateOnce  sync.Once
	gateOpen  chan struct{}
	inFlight  atomic.Int32
	maxFlight atomic.Int32

	mu    sync.Mutex
	calls []readCall
	batch []int // items requested per batch (see markBatch)
}

type readCall struct {
	drawerID string
	from, to int64
	limit    int
}

// newMemStore files items at positions 0.. into drawers of the given sizes.
func newMemStore(t *testing.T, sizes ...int) (*memStore, []drawer.Meta) {
	t.Helper()
	s := &memStore{
		t: t, drawers: map[string][]drawer.Item{}, meta: map[string]drawer.Meta{}, fail: map[string]error{},
		gateOpen: make(chan struct{}),
	}
	var metas []drawer.Meta
	var pos int64
	for i, n := range sizes {
		items := numbered(pos, n)
		m := drawer.Meta{ID: fmt.Sprintf("d%d", i+1), Start: pos, Count: n, FirstSeq: items[0].Seq, LastSeq: items[n-1].Seq}
		s.drawers[m.ID], s.meta[m.ID] = items, m
		metas = append(metas, m)
		pos += int64(n)
	}
	return s, metas
}

func (s *memStore) read(ctx context.Context, drawerID string, from, to int64, limit int) ([]drawer.Item, error) {
	cur := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		old := s.maxFlight.Load()
		if cur <= old || s.maxFlight.CompareAndSwap(old, cur) {
			break
		}
	}
	if s.gate > 0 {
		if cur >= int32(s.gate) {
			s.gateOnce.Do(func() { close(s.gateOpen) })
		}
		select {
		case <-s.gateOpen:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Minute):
			s.t.Errorf("reads never reached %d in flight at once", s.gate)
			s.gateOnce.Do(func() { close(s.gateOpen) })
		}
	}
	m, ok := s.meta[drawerID]
	s.mu.Lock()
	s.calls = append(s.calls, readCall{drawerID, from, to, limit})
	if len(s.batch) > 0 {
		s.batch[len(s.batch)-1] += int(to - from)
	}
	s.mu.Unlock()
	if !ok {
		s.t.Errorf("read of unknown drawer %q", drawerID)
		return nil, nil
	}
	if from < m.Start || to > m.End() || from >= to || limit < 1 {
		s.t.Errorf("read(%s, %d, %d, %d) outside drawer [%d, %d) or empty", drawerID, from, to, limit, m.Start, m.End())
	}
	if err := s.fail[drawerID]; err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []drawer.Item
	for _, it := range s.drawers[drawerID] {
		if it.Pos >= from && it.Pos < to && len(out) < limit {
			out = append(out, it)
		}
	}
	return out, nil
}

// markBatch starts counting a new batch of reads.
func (s *memStore) markBatch() {
	s.mu.Lock()
	s.batch = append(s.batch, 0)
	s.mu.Unlock()
}

func (s *memStore) readCalls() []readCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// positions lists the positions of items.
func positions(items []drawer.Item) []int64 {
	out := make([]int64, len(items))
	for i, it := range items {
		out[i] = it.Pos
	}
	return out
}

func span(from, to int64) []int64 {
	var out []int64
	for p := from; p < to; p++ {
		out = append(out, p)
	}
	return out
}

func TestReadRangeReturnsTheItemsOfARangeInOrderAcrossDrawers(t *testing.T) {
	tests := []struct {
		name      string
		from, to  int64
		wantReads int
	}{
		{"a range inside one drawer", 3, 7, 1},
		{"a whole drawer", 10, 20, 1},
		{"a range across three drawers", 5, 25, 3},
		{"every drawer", 0, 45, 5},
		{"a range running past the last drawer", 40, 1_000, 1},
		{"a range starting before the first drawer", -5, 3, 1},
		{"an empty range reads nothing", 12, 12, 0},
		{"a reversed range reads nothing", 20, 10, 0},
		{"a range after every drawer reads nothing", 45, 100, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, drawers := newMemStore(t, 10, 10, 10, 10, 5)
			items, err := drawer.ReadRange(context.Background(), store.read, drawers, tt.from, tt.to)
			if err != nil {
				t.Fatalf("ReadRange failed: %v", err)
			}
			want := span(max(tt.from, 0), min(tt.to, 45))
			if got := positions(items); !slices.Equal(got, want) && (len(got) != 0 || len(want) != 0) {
				t.Errorf("positions = %v, want %v", got, want)
			}
			for _, it := range items {
				if it.ID != fmt.Sprintf("n-%d", it.Pos) {
					t.Errorf("item at %d is %q, want the stored one", it.Pos, it.ID)
				}
			}
			if got := len(store.readCalls()); got != tt.wantReads {
				t.Errorf("%d reads, want %d (one per drawer touched)", got, tt.wantReads)
			}
		})
	}
}

func TestReadRangeReadsAtMostSixDrawersAtOnce(t *testing.T) {
	sizes := make([]int, 20)
	for i := range sizes {
		sizes[i] = 3
	}
	store, drawers := newMemStore(t, sizes...)
	store.gate = drawer.MaxParallelReads
	items, err := drawer.ReadRange(context.Background(), store.read, drawers, 0, 60)
	if err != nil {
		t.Fatalf("ReadRange failed: %v", err)
	}
	if !slices.Equal(positions(items), span(0, 60)) {
		t.Errorf("positions = %v, want 0..59 in order", positions(items))
	}
	if got := store.maxFlight.Load(); got != drawer.MaxParallelReads {
		t.Errorf("at most %d reads ran at once, want exactly %d", got, drawer.MaxParallelReads)
	}
}

func TestReadRangePropagatesAReadError(t *testing.T) {
	boom := errors.New("partition unavailable")
	tests := []struct {
		name    string
		failing string
	}{
		{"an error in the first drawer", "d1"},
		{"an error in a middle drawer", "d3"},
		{"an error in the last drawer", "d8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, drawers := newMemStore(t, 5, 5, 5, 5, 5, 5, 5, 5)
			store.fail[tt.failing] = boom
			items, err := drawer.ReadRange(context.Background(), store.read, drawers, 0, 40)
			if !errors.Is(err, boom) {
				t.Fatalf("ReadRange error = %v, want %v", err, boom)
			}
			if items != nil {
				t.Errorf("ReadRange returned %d items alongside its error, want nil", len(items))
			}
		})
	}
}

func TestScanFeedsItemsInOrderFromAPosition(t *testing.T) {
	tests := []struct {
		name  string
		sizes []int
		from  int64
	}{
		{"from the start of a small cabinet", []int{10}, 0},
		{"from the middle of the first drawer", []int{10, 10, 10}, 4},
		{"from the start of the second drawer", []int{10, 10, 10}, 10},
		{"from the last item", []int{10, 10, 10}, 29},
		{"past the end", []int{10, 10, 10}, 30},
		{"across full drawers", []int{10_000, 10_000, 10_000, 500}, 9_000},
		{"across more than six drawers", []int{100, 100, 100, 100, 100, 100, 100, 100, 100, 100}, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, drawers := newMemStore(t, tt.sizes...)
			var got []drawer.Item
			err := drawer.Scan(context.Background(), store.read, drawers, tt.from,
				func() int { return 1 << 30 },
				func(it drawer.Item) bool { got = append(got, it); return true })
			if err != nil {
				t.Fatalf("Scan failed: %v", err)
			}
			end := drawers[len(drawers)-1].End()
			if want := span(tt.from, end); !slices.Equal(positions(got), want) {
				t.Errorf("scanned %d items [%v..], want %d from %d", len(got), first(got), len(want), tt.from)
			}
		})
	}
}

func TestScanStopsWhenTakeSaysNo(t *testing.T) {
	tests := []struct {
		name   string
		stopAt int64 // take refuses the item at this position
	}{
		{"at the first item", 0},
		{"in the middle of the first read", 500},
		{"at the last item of the first read", 1_023},
		{"at the first item of the second read", 1_024},
		{"deep in a later drawer", 25_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, drawers := newMemStore(t, 10_000, 10_000, 10_000)
			var seen []int64
			err := drawer.Scan(context.Background(), store.read, drawers, 0,
				func() int { return 1 << 30 },
				func(it drawer.Item) bool { seen = append(seen, it.Pos); return it.Pos != tt.stopAt })
			if err != nil {
				t.Fatalf("Scan failed: %v", err)
			}
			if want := span(0, tt.stopAt+1); !slices.Equal(seen, want) {
				t.Errorf("take saw %d items up to %v, want %d up to %d", len(seen), last(seen), len(want), tt.stopAt)
			}
		})
	}
}

func last(s []int64) any {
	if len(s) == 0 {
		return nil
	}
	return s[len(s)-1]
}

func TestScanReadsNoMoreThanNeedAllows(t *testing.T) {
	tests := []struct {
		name   string
		sizes  []int
		budget int // take accepts this many items; need says how many are left (+1 look-ahead)
	}{
		{"a one-item bundle reads two items", []int{10_000}, 1},
		{"a small bundle stays within the first read", []int{10_000, 10_000}, 100},
		{"a bundle of exactly the first read", []int{10_000, 10_000}, 1_023},
		{"a bundle just over the first read", []int{10_000, 10_000}, 1_025},
		{"a bundle of the default weight limit", []int{10_000, 10_000, 10_000, 10_000, 10_000, 10_000, 10_000}, 51_200},
		{"a bundle over many small drawers", []int{300, 300, 300, 300, 300, 300, 300, 300, 300, 300}, 2_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, drawers := newMemStore(t, tt.sizes...)
			taken := 0
			var needs []int
			need := func() int {
				n := tt.budget - taken + 1
				needs = append(needs, n)
				store.markBatch()
				return n
			}
			take := func(drawer.Item) bool {
				if taken == tt.budget {
					return false
				}
				taken++
				return true
			}
			if err := drawer.Scan(context.Background(), store.read, drawers, 0, need, take); err != nil {
				t.Fatalf("Scan failed: %v", err)
			}
			if taken != tt.budget {
				t.Fatalf("took %d items, want %d", taken, tt.budget)
			}
			requested := 0
			for _, c := range store.readCalls() {
				requested += int(c.to - c.from)
			}
			inBatches := 0
			for _, n := range store.batch {
				inBatches += n
			}
			if len(needs) == 0 || requested != inBatches {
				t.Fatalf("%d items were read without asking need() first (need() asked %d times)", requested-inBatches, len(needs))
			}
			for i, requested := range store.batch {
				if i == 0 && requested > 1_024 {
					t.Errorf("the first read asked for %d items, want at most 1,024", requested)
				}
				if requested > needs[i] {
					t.Errorf("batch %d asked for %d items while need() was %d", i, requested, needs[i])
				}
			}
		})
	}
}

// spinning is what a test's need() panics with to stop a Scan that would
// otherwise never end.
type spinning struct{}

var errSpin = errors.New("scan keeps asking need() without making progress")

func TestScanEndsWhenNeedSaysNothingMoreFits(t *testing.T) {
	tests := []struct {
		name string
		need func(taken int) int
	}{
		{"need is zero from the start", func(int) int { return 0 }},
		{"need drops to zero after one item", func(taken int) int { return 1 - taken }},
		{"need goes negative after one item", func(taken int) int { return 1 - 5*taken }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, drawers := newMemStore(t, 1, 10)
			calls, taken := 0, 0
			need := func() int {
				calls++
				if calls > 1_000 {
					panic(spinning{})
				}
				return tt.need(taken)
			}
			take := func(drawer.Item) bool { taken++; return true }
			err := func() (err error) {
				defer func() {
					if r := recover(); r != nil {
						if _, ok := r.(spinning); !ok {
							panic(r)
						}
						err = errSpin
					}
				}()
				return drawer.Scan(context.Background(), store.read, drawers, 0, need, take)
			}()
			if err != nil {
				t.Fatalf("Scan did not end: %v (need() called %d times, %d items taken)", err, calls, taken)
			}
			if limit := max(tt.need(0), 0); taken > limit {
				t.Errorf("take was fed %d items though need() allowed %d", taken, limit)
			}
		})
	}
}

func TestScanReadsAtMostSixDrawersAtOnce(t *testing.T) {
	sizes := make([]int, 20)
	for i := range sizes {
		sizes[i] = 50
	}
	store, drawers := newMemStore(t, sizes...)
	store.gate = drawer.MaxParallelReads
	var got []drawer.Item
	err := drawer.Scan(context.Background(), store.read, drawers, 0,
		func() int { return 1 << 30 },
		func(it drawer.Item) bool { got = append(got, it); return true })
	if err != nil {
		t.Fatalf("Scan failed: %v", err)
	}
	if !slices.Equal(positions(got), span(0, 1_000)) {
		t.Errorf("scanned %d items, want positions 0..999 in order", len(got))
	}
	if n := store.maxFlight.Load(); n != drawer.MaxParallelReads {
		t.Errorf("at most %d reads ran at once, want exactly %d", n, drawer.MaxParallelReads)
	}
}

func TestScanPropagatesAReadErrorAndFeedsNothingOfTheFailedBatch(t *testing.T) {
	boom := errors.New("throttled")
	tests := []struct {
		name      string
		failing   string
		wantTaken int
	}{
		{"an error in the first read", "d1", 0},
		{"an error in a later drawer of the first read", "d2", 0},
		{"an error in a later read", "d3", 1_024},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, drawers := newMemStore(t, 1_000, 1_000, 1_000)
			store.fail[tt.failing] = boom
			taken := 0
			err := drawer.Scan(context.Background(), store.read, drawers, 0,
				func() int { return 1 << 30 },
				func(drawer.Item) bool { taken++; return true })
			if !errors.Is(err, boom) {
				t.Fatalf("Scan error = %v, want %v", err, boom)
			}
			if taken != tt.wantTaken {
				t.Errorf("take was fed %d items, want %d", taken, tt.wantTaken)
			}
		})
	}
}

func TestAppendRecordsWhenDrawersWereWritten(t *testing.T) {
	ids := &idSource{}
	drawers, _ := drawer.Append(nil, numbered(0, 100), ids.next, 1_000)
	drawers, _ = drawer.Append(drawers, numbered(100, drawer.Capacity), ids.next, 5_000)
	if len(drawers) != 2 {
		t.Fatalf("%d drawers, want 2", len(drawers))
	}
	first, second := drawers[0], drawers[1]
	if first.FirstAt != 1_000 || first.LastAt != 5_000 || second.FirstAt != 5_000 || second.LastAt != 5_000 {
		t.Fatalf("times %d..%d and %d..%d; want 1000..5000 and 5000..5000", first.FirstAt, first.LastAt, second.FirstAt, second.LastAt)
	}
	if got := first.SavedAt(0); got != 1_000 {
		t.Errorf("the first item was saved at %d, want 1000", got)
	}
	if got := first.SavedAt(first.End() - 1); got != 5_000 {
		t.Errorf("the last item was saved at %d, want 5000", got)
	}
	if mid := first.SavedAt(first.Start + int64(first.Count/2)); mid <= 1_000 || mid >= 5_000 {
		t.Errorf("an item in between was saved at %d, want between the two", mid)
	}
	if got := (drawer.Meta{Count: 10}).SavedAt(3); got != 0 {
		t.Errorf("a drawer without times says %d, want 0 (unknown)", got)
	}
}
