package catalog_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
)

// metas lays out drawers of the given sizes from position start, with
// sequence numbers 1000+position.
func metas(start int64, sizes ...int) []drawer.Meta {
	var out []drawer.Meta
	pos := start
	for i, n := range sizes {
		out = append(out, drawer.Meta{
			ID: fmt.Sprintf("d%d@%d", i+1, start), Start: pos, Count: n,
			FirstSeq: 1000 + pos, LastSeq: 1000 + pos + int64(n) - 1,
		})
		pos += int64(n)
	}
	return out
}

func entry(o domain.Origin, ct string, drawers []drawer.Meta) catalog.Entry {
	e := catalog.Entry{Origin: o, ContentType: ct, Drawers: drawers}
	if n := len(drawers); n > 0 {
		e.Total = drawers[n-1].End()
	}
	return e
}

func cursor(o domain.Origin, ct string, acked, headSeq int64) catalog.Cursor {
	return catalog.Cursor{Origin: o, ContentType: ct, Acked: acked, HeadSeq: headSeq}
}

// cand is what a test expects of a candidate.
type cand struct {
	key     catalog.Key
	acked   int64
	headSeq int64
}

func summarize(t *testing.T, cs []catalog.Candidate, entries []catalog.Entry) []cand {
	t.Helper()
	var out []cand
	for _, c := range cs {
		if c.Cursor.Key() != c.Entry.Key() {
			t.Fatalf("candidate pairs entry %v with cursor %v", c.Entry.Key(), c.Cursor.Key())
		}
		if !slices.ContainsFunc(entries, func(e catalog.Entry) bool {
			return e.Key() == c.Entry.Key() && slices.Equal(e.Drawers, c.Entry.Drawers) && e.Total == c.Entry.Total
		}) {
			t.Fatalf("candidate entry %+v is not one of the entries given", c.Entry)
		}
		out = append(out, cand{c.Entry.Key(), c.Cursor.Acked, c.HeadSeq})
	}
	slices.SortFunc(out, func(a, b cand) int {
		if a.key.Origin != b.key.Origin {
			return int(a.key.Origin - b.key.Origin)
		}
		switch {
		case a.key.ContentType < b.key.ContentType:
			return -1
		case a.key.ContentType > b.key.ContentType:
			return 1
		}
		return 0
	})
	return out
}

func key(o domain.Origin, ct string) catalog.Key { return catalog.Key{Origin: o, ContentType: ct} }

func TestCandidatesKeepOnlyTheCabinetsTheGroupAllows(t *testing.T) {
	entries := []catalog.Entry{
		entry(domain.OriginTimeSeries, "ts", metas(0, 3)),
		entry(domain.OriginCharges, "ch", metas(0, 3)),
		entry(domain.OriginMarketRoles, "mr", metas(0, 3)),
		entry(domain.OriginMeteringPoints, "mp", metas(0, 3)),
		entry(domain.OriginAggregations, "ag", metas(0, 3)),
	}
	head := int64(1000) // the first drawer's first sequence number
	all := []cand{
		{key(domain.OriginTimeSeries, "ts"), 0, head},
		{key(domain.OriginCharges, "ch"), 0, head},
		{key(domain.OriginMarketRoles, "mr"), 0, head},
		{key(domain.OriginMeteringPoints, "mp"), 0, head},
		{key(domain.OriginAggregations, "ag"), 0, head},
	}
	tests := []struct {
		name  string
		group domain.PeekGroup
		want  []cand
	}{
		{"time series allows only time series", domain.GroupTimeSeries, all[:1]},
		{"aggregations allows only aggregations", domain.GroupAggregations, all[4:]},
		{"master data allows charges, market roles and metering points", domain.GroupMasterData, all[1:4]},
		{"all allows every cabinet", domain.GroupAll, all},
		{"unspecified allows every cabinet", domain.GroupUnspecified, all},
		{"an undefined group allows nothing", domain.GroupMasterData + 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarize(t, catalog.Candidates(entries, nil, tt.group), entries)
			if !slices.Equal(got, tt.want) {
				t.Errorf("candidates = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCandidatesResolveTheCursorAndHeadSequence(t *testing.T) {
	const ts, ch = domain.OriginTimeSeries, domain.OriginCharges
	three := metas(0, 10, 10, 5) // positions 0..24, seq 1000..1024
	// The second drawer's ten positions hold sequence numbers 1010..1020:
	// another cabinet took one of them.
	gapped := metas(0, 10, 10, 5)
	gapped[1].LastSeq++
	// Runs cut at a hole (the Cosmos store's) whose numbers at the cut are
	// not known.
	lastUnknown, firstUnknown := metas(0, 10, 10, 5), metas(0, 10, 10, 5)
	lastUnknown[1].LastSeq, firstUnknown[1].FirstSeq = 0, 0
	tests := []struct {
		name    string
		entries []catalog.Entry
		cursors []catalog.Cursor
		want    []cand
	}{
		{"a cabinet without a cursor starts at position 0 with its first drawer's head",
			[]catalog.Entry{entry(ts, "a", three)}, nil,
			[]cand{{key(ts, "a"), 0, 1000}}},
		{"a cursor's recorded head sequence wins",
			[]catalog.Entry{entry(ts, "a", three)}, []catalog.Cursor{cursor(ts, "a", 13, 7777)},
			[]cand{{key(ts, "a"), 13, 7777}}},
		{"a recorded head sequence wins even at a drawer start",
			[]catalog.Entry{entry(ts, "a", three)}, []catalog.Cursor{cursor(ts, "a", 10, 7777)},
			[]cand{{key(ts, "a"), 10, 7777}}},
		{"a cursor at a drawer start takes that drawer's first sequence",
			[]catalog.Entry{entry(ts, "a", three)}, []catalog.Cursor{cursor(ts, "a", 20, 0)},
			[]cand{{key(ts, "a"), 20, 1020}}},
		{"a cursor inside a drawer of consecutive sequence numbers counts its head from the drawer's first",
			[]catalog.Entry{entry(ts, "a", three)}, []catalog.Cursor{cursor(ts, "a", 13, 0)},
			[]cand{{key(ts, "a"), 13, 1013}}},
		{"a cursor inside a drawer whose sequence numbers have gaps leaves the head to be read",
			[]catalog.Entry{entry(ts, "a", gapped)}, []catalog.Cursor{cursor(ts, "a", 13, 0)},
			[]cand{{key(ts, "a"), 13, 0}}},
		{"a cursor inside a run whose last sequence number is not known leaves the head to be read",
			[]catalog.Entry{entry(ts, "a", lastUnknown)}, []catalog.Cursor{cursor(ts, "a", 13, 0)},
			[]cand{{key(ts, "a"), 13, 0}}},
		{"a cursor inside a run whose first sequence number is not known leaves the head to be read",
			[]catalog.Entry{entry(ts, "a", firstUnknown)}, []catalog.Cursor{cursor(ts, "a", 13, 0)},
			[]cand{{key(ts, "a"), 13, 0}}},
		{"a cursor at a position no drawer holds leaves the head to be read",
			[]catalog.Entry{{Origin: ts, ContentType: "a", Drawers: metas(0, 10), Total: 15}}, []catalog.Cursor{cursor(ts, "a", 10, 0)},
			[]cand{{key(ts, "a"), 10, 0}}},
		{"a fully acknowledged cabinet is left out",
			[]catalog.Entry{entry(ts, "a", three)}, []catalog.Cursor{cursor(ts, "a", 25, 0)},
			nil},
		{"a cabinet acknowledged past its total is left out",
			[]catalog.Entry{entry(ts, "a", three)}, []catalog.Cursor{cursor(ts, "a", 30, 0)},
			nil},
		{"a cabinet one short of fully acknowledged is kept",
			[]catalog.Entry{entry(ts, "a", three)}, []catalog.Cursor{cursor(ts, "a", 24, 0)},
			[]cand{{key(ts, "a"), 24, 1024}}},
		{"an entry with nothing handed out is left out",
			[]catalog.Entry{{Origin: ts, ContentType: "a"}}, nil,
			nil},
		{"a cursor of another content type does not apply",
			[]catalog.Entry{entry(ts, "a", three)}, []catalog.Cursor{cursor(ts, "b", 25, 0)},
			[]cand{{key(ts, "a"), 0, 1000}}},
		{"a cursor of another origin does not apply",
			[]catalog.Entry{entry(ts, "a", three)}, []catalog.Cursor{cursor(ch, "a", 25, 0)},
			[]cand{{key(ts, "a"), 0, 1000}}},
		{"a cursor without an entry yields nothing",
			nil, []catalog.Cursor{cursor(ts, "a", 3, 1003)},
			nil},
		{"swept drawers: a cursor at the first remaining drawer takes its head",
			[]catalog.Entry{entry(ts, "a", metas(20_000, 10_000, 7))}, []catalog.Cursor{cursor(ts, "a", 20_000, 0)},
			[]cand{{key(ts, "a"), 20_000, 21_000}}},
		{"each cabinet pairs with its own cursor",
			[]catalog.Entry{entry(ts, "a", three), entry(ts, "b", three), entry(ch, "a", three)},
			[]catalog.Cursor{cursor(ts, "b", 10, 0), cursor(ch, "a", 25, 0), cursor(ts, "a", 5, 0)},
			[]cand{{key(ts, "a"), 5, 1005}, {key(ts, "b"), 10, 1010}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarize(t, catalog.Candidates(tt.entries, tt.cursors, domain.GroupAll), tt.entries)
			if !slices.Equal(got, tt.want) {
				t.Errorf("candidates = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCandidatesFillInTheCursorOfACabinetWithoutOne(t *testing.T) {
	e := entry(domain.OriginAggregations, "agg", metas(0, 4))
	cs := catalog.Candidates([]catalog.Entry{e}, nil, domain.GroupAggregations)
	if len(cs) != 1 {
		t.Fatalf("got %d candidates, want 1", len(cs))
	}
	want := catalog.Cursor{Origin: domain.OriginAggregations, ContentType: "agg"}
	if cs[0].Cursor != want {
		t.Errorf("cursor = %+v, want %+v", cs[0].Cursor, want)
	}
}

func TestVisibleKeepsResolvedHeadsUpToTheWatermarkInSequenceOrder(t *testing.T) {
	c := func(ct string, head int64) catalog.Candidate {
		return catalog.Candidate{Entry: catalog.Entry{Origin: domain.OriginCharges, ContentType: ct}, HeadSeq: head}
	}
	tests := []struct {
		name      string
		cands     []catalog.Candidate
		watermark int64
		want      []string
	}{
		{"nothing in, nothing out", nil, 100, nil},
		{"candidates are ordered by head sequence", []catalog.Candidate{c("c", 30), c("a", 10), c("b", 20)}, 100, []string{"a", "b", "c"}},
		{"a head at the watermark is visible", []catalog.Candidate{c("a", 100)}, 100, []string{"a"}},
		{"a head above the watermark is hidden", []catalog.Candidate{c("a", 101), c("b", 99)}, 100, []string{"b"}},
		{"an unresolved head is dropped", []catalog.Candidate{c("a", 0), c("b", 5)}, 100, []string{"b"}},
		{"a negative head is dropped", []catalog.Candidate{c("a", -1)}, 100, nil},
		{"a zero watermark hides everything", []catalog.Candidate{c("a", 1)}, 0, nil},
		{"everything above the watermark leaves nothing", []catalog.Candidate{c("a", 7), c("b", 8)}, 6, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.cands)
			var got []string
			for _, v := range catalog.Visible(tt.cands, tt.watermark) {
				got = append(got, v.Entry.ContentType)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("visible = %v, want %v", got, tt.want)
			}
			if !slices.EqualFunc(tt.cands, before, func(a, b catalog.Candidate) bool {
				return a.HeadSeq == b.HeadSeq && a.Entry.ContentType == b.Entry.ContentType
			}) {
				t.Errorf("Visible reordered or changed its input")
			}
		})
	}
}

func TestRemovableDeletesOnlyAcknowledgedUncoveredDrawers(t *testing.T) {
	const ts, ch = domain.OriginTimeSeries, domain.OriginCharges
	three := metas(0, 10, 10, 10) // [0,10) [10,20) [20,30)
	// d1 with positions 4..6 left empty: runs [0,4) and [7,10).
	split := slices.Concat([]drawer.Meta{{ID: "d1@0", Start: 0, Count: 4}, {ID: "d1@0", Start: 7, Count: 3}}, three[1:])
	own := func(start, end int64) catalog.Span { return catalog.Span{Key: key(ts, "a"), Start: start, End: end} }
	tests := []struct {
		name     string
		entry    catalog.Entry
		acked    int64
		retained []catalog.Span
		wantIDs  []string
		wantDrop bool
	}{
		{"nothing acknowledged removes nothing", entry(ts, "a", three), 0, nil, nil, false},
		{"a partly acknowledged first drawer is kept", entry(ts, "a", three), 9, nil, nil, false},
		{"a fully acknowledged first drawer goes", entry(ts, "a", three), 10, nil, []string{"d1@0"}, false},
		{"two acknowledged drawers go", entry(ts, "a", three), 25, nil, []string{"d1@0", "d2@0"}, false},
		{"the last drawer is kept while a retained bundle covers an earlier one",
			entry(ts, "a", three), 30, []catalog.Span{own(5, 8)}, []string{"d2@0"}, false},
		{"a retained bundle keeps the drawer it covers",
			entry(ts, "a", three), 25, []catalog.Span{own(12, 15)}, []string{"d1@0"}, false},
		{"a retained bundle across a boundary keeps both drawers",
			entry(ts, "a", three), 30, []catalog.Span{own(8, 12)}, nil, false},
		{"a retained bundle starting where a drawer ends does not keep it",
			entry(ts, "a", three), 25, []catalog.Span{own(10, 14)}, []string{"d1@0"}, false},
		{"a retained bundle ending where a drawer starts does not keep it",
			entry(ts, "a", three), 25, []catalog.Span{own(6, 10)}, []string{"d2@0"}, false},
		{"a fully acknowledged, uncovered cabinet goes with its entry",
			entry(ts, "a", three), 30, nil, []string{"d1@0", "d2@0", "d3@0"}, true},
		{"a fully acknowledged cabinet with a retained bundle in its last drawer keeps the entry",
			entry(ts, "a", three), 30, []catalog.Span{own(25, 30)}, []string{"d1@0", "d2@0"}, false},
		{"retained bundles of another content type are ignored",
			entry(ts, "a", three), 30, []catalog.Span{{Key: key(ts, "b"), Start: 0, End: 30}}, []string{"d1@0", "d2@0", "d3@0"}, true},
		{"retained bundles of another origin are ignored",
			entry(ts, "a", three), 30, []catalog.Span{{Key: key(ch, "a"), Start: 0, End: 30}}, []string{"d1@0", "d2@0", "d3@0"}, true},
		{"a single acknowledged drawer goes only with the entry",
			entry(ts, "a", metas(0, 10)), 10, nil, []string{"d1@0"}, true},
		{"a single acknowledged drawer followed by a hole goes with the entry",
			catalog.Entry{Origin: ts, ContentType: "a", Drawers: metas(0, 10), Total: 12}, 10, nil, []string{"d1@0"}, true},
		{"a drawer followed by a hole is kept while unacknowledged",
			catalog.Entry{Origin: ts, ContentType: "a", Drawers: metas(0, 10), Total: 12}, 9, nil, nil, false},
		{"an entry without drawers and nothing left goes",
			catalog.Entry{Origin: ts, ContentType: "a", Total: 40}, 40, nil, nil, true},
		{"an entry whose positions are all holes goes",
			catalog.Entry{Origin: ts, ContentType: "a", Total: 40}, 0, nil, nil, true},
		{"a drawer of two runs goes once, when both are acknowledged",
			entry(ts, "a", split), 25, nil, []string{"d1@0", "d2@0"}, false},
		{"a drawer of two runs stays while its second is not acknowledged",
			entry(ts, "a", split), 9, nil, nil, false},
		{"after a sweep the remaining acknowledged drawers go",
			entry(ts, "a", metas(20_000, 10_000, 10_000, 3)), 40_000, nil, []string{"d1@20000", "d2@20000"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cursor(tt.entry.Origin, tt.entry.ContentType, tt.acked, 0)
			got, drop := catalog.Removable(tt.entry, c, tt.retained)
			var ids []string
			for _, d := range got {
				ids = append(ids, d.ID)
			}
			if !slices.Equal(ids, tt.wantIDs) || drop != tt.wantDrop {
				t.Errorf("Removable = %v, drop %v; want %v, drop %v", ids, drop, tt.wantIDs, tt.wantDrop)
			}
			checkRemovable(t, tt.entry, c, tt.retained, got, drop)
		})
	}
}

// checkRemovable fails unless Removable's answer obeys the retention rules
// (see removableViolation).
func checkRemovable(t *testing.T, e catalog.Entry, c catalog.Cursor, retained []catalog.Span, got []drawer.Meta, drop bool) {
	t.Helper()
	if msg := removableViolation(e, c, retained, got, drop); msg != "" {
		t.Fatalf("%s\n(entry %+v, cursor %+v, retained %v)", msg, e, c, retained)
	}
}

// removableViolation says how Removable's answer breaks the retention rules,
// or "" when it does not: it may remove only drawers of the entry whose runs
// are all fully acknowledged and not covered by a retained span of the same
// cabinet; it removes every such drawer but the last, each once (its first
// run), the last only together with the entry, and drops the entry exactly
// when every run is acknowledged and nothing of it is covered (positions
// beyond the runs are holes).
func removableViolation(e catalog.Entry, c catalog.Cursor, retained []catalog.Span, got []drawer.Meta, drop bool) string {
	covered := func(d drawer.Meta) bool {
		for _, s := range retained {
			if s.Key == e.Key() && s.Start < d.End() && d.Start < s.End {
				return true
			}
		}
		return false
	}
	free := func(id string) bool {
		return !slices.ContainsFunc(e.Drawers, func(d drawer.Meta) bool { return d.ID == id && (d.End() > c.Acked || covered(d)) })
	}
	for _, d := range got {
		if !slices.Contains(e.Drawers, d) {
			return fmt.Sprintf("removes drawer %+v that is not the entry's", d)
		}
		if !free(d.ID) {
			return fmt.Sprintf("removes drawer %s with a run holding unacknowledged positions (acked %d) or covered by a retained bundle", d.ID, c.Acked)
		}
	}
	allFree := true
	var want []drawer.Meta
	for i, d := range e.Drawers {
		allFree = allFree && free(d.ID)
		first := !slices.ContainsFunc(e.Drawers[:i], func(m drawer.Meta) bool { return m.ID == d.ID })
		if free(d.ID) && first && d.ID != e.Drawers[len(e.Drawers)-1].ID {
			want = append(want, d)
		}
	}
	wantDrop := allFree
	if wantDrop {
		want = nil
		for i, d := range e.Drawers {
			if !slices.ContainsFunc(e.Drawers[:i], func(m drawer.Meta) bool { return m.ID == d.ID }) {
				want = append(want, d)
			}
		}
	}
	if drop != wantDrop {
		return fmt.Sprintf("dropEntry = %v, want %v", drop, wantDrop)
	}
	if !slices.Equal(got, want) && (len(got) != 0 || len(want) != 0) {
		return fmt.Sprintf("removes %+v, want %+v", got, want)
	}
	return ""
}

func TestRemovableNeverRemovesAnythingUnacknowledgedOrRetained(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	keys := []catalog.Key{key(domain.OriginTimeSeries, "a"), key(domain.OriginTimeSeries, "b"), key(domain.OriginCharges, "a")}
	var drops, partial, protected int
	for i := range 20_000 {
		e := randomEntry(rng, keys[0])
		c := catalog.Cursor{Origin: e.Origin, ContentType: e.ContentType, Acked: rng.Int64N(e.Total + 3)}
		var retained []catalog.Span
		for range rng.IntN(4) {
			start := rng.Int64N(e.Total + 2)
			retained = append(retained, catalog.Span{Key: keys[rng.IntN(len(keys))], Start: start, End: start + 1 + rng.Int64N(8)})
		}
		entryBefore := slices.Clone(e.Drawers)
		retainedBefore := slices.Clone(retained)
		got, drop := catalog.Removable(e, c, retained)
		if !slices.Equal(e.Drawers, entryBefore) || !slices.Equal(retained, retainedBefore) {
			t.Fatalf("case %d: Removable modified its input", i)
		}
		if msg := removableViolation(e, c, retained, got, drop); msg != "" {
			t.Fatalf("case %d: %s\n(entry %+v, cursor %+v, retained %v)", i, msg, e, c, retained)
		}
		switch {
		case drop:
			drops++
		case len(got) > 0:
			partial++
		}
		if slices.ContainsFunc(e.Drawers, func(d drawer.Meta) bool {
			return d.End() <= c.Acked && slices.ContainsFunc(retained, func(s catalog.Span) bool {
				return s.Key == e.Key() && s.Start < d.End() && d.Start < s.End
			})
		}) {
			protected++
		}
	}
	// The random cases must exercise every outcome, or the check proves little.
	for name, n := range map[string]int{"entry dropped": drops, "some drawers removed": partial, "an acknowledged drawer protected": protected} {
		if n < 500 {
			t.Errorf("only %d of the random cases had %s", n, name)
		}
	}
}

// randomEntry is a cabinet of 0..5 contiguous drawers of 1..10 items,
// sometimes starting after swept positions, sometimes with positions handed
// out beyond its last drawer.
func randomEntry(rng *rand.Rand, k catalog.Key) catalog.Entry {
	start := int64(0)
	if rng.IntN(3) == 0 {
		start = rng.Int64N(20)
	}
	sizes := make([]int, rng.IntN(6))
	for i := range sizes {
		sizes[i] = 1 + rng.IntN(10)
	}
	e := catalog.Entry{Origin: k.Origin, ContentType: k.ContentType, Drawers: metas(start, sizes...), Total: start}
	if n := len(e.Drawers); n > 0 {
		e.Total = e.Drawers[n-1].End()
	}
	if rng.IntN(5) == 0 {
		e.Total += 1 + rng.Int64N(3)
	}
	return e
}

// FuzzRemovable drives the same property check from fuzzed bytes.
func FuzzRemovable(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(42), uint64(0))
	f.Fuzz(func(t *testing.T, seed1, seed2 uint64) {
		rng := rand.New(rand.NewPCG(seed1, seed2))
		k := key(domain.OriginMeteringPoints, "mp")
		e := randomEntry(rng, k)
		c := catalog.Cursor{Origin: k.Origin, ContentType: k.ContentType, Acked: rng.Int64N(e.Total + 3)}
		var retained []catalog.Span
		for range rng.IntN(4) {
			start := rng.Int64N(e.Total + 2)
			other := k
			if rng.IntN(3) == 0 {
				other.ContentType = "other"
			}
			retained = append(retained, catalog.Span{Key: other, Start: start, End: start + 1 + rng.Int64N(8)})
		}
		got, drop := catalog.Removable(e, c, retained)
		checkRemovable(t, e, c, retained, got, drop)
	})
}

// A save may not open a drawer past the bound; one that only fills the last
// drawer passes even when the entry is already past it (a lowered bound).
func TestCheckDrawers(t *testing.T) {
	entry := func(sizes ...int) catalog.Entry {
		return catalog.Entry{Origin: domain.OriginCharges, ContentType: "c", Drawers: metas(0, sizes...)}
	}
	for _, tt := range []struct {
		name          string
		before, after catalog.Entry
		ok            bool
	}{
		{"within the bound", entry(drawer.Capacity), entry(drawer.Capacity, 5), true},
		{"a new cabinet within the bound", catalog.Entry{}, entry(drawer.Capacity, 5), true},
		{"one drawer past the bound", entry(drawer.Capacity, drawer.Capacity), entry(drawer.Capacity, drawer.Capacity, 1), false},
		{"a new cabinet past the bound", catalog.Entry{}, entry(drawer.Capacity, drawer.Capacity, 1), false},
		{"already past, filling the last", entry(drawer.Capacity, drawer.Capacity, 1), entry(drawer.Capacity, drawer.Capacity, 9), true},
	} {
		err := catalog.CheckDrawers(tt.before, tt.after, 2)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, domain.ErrCabinetFull)) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}
