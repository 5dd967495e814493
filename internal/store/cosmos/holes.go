package cosmos

import (
	"cmp"
	"slices"

	"github.com/energydatahub/messagehub/internal/drawer"
)

// Holes are the Cosmos store's own: positions a save took and gave back when
// it failed half-way (reserve.go), never to be filled. Its documents keep
// each drawer whole and its holes beside it (entryDoc.Holes,
// bundleDoc.Holes); the rest of the hub sees a drawer as the runs of
// positions around its holes (package drawer), so it never reads or
// expects a hole's position.

// addHole records [start, end) in holes, keeping them ordered and merged;
// recording one twice changes nothing.
func addHole(holes [][2]int64, start, end int64) [][2]int64 {
	if start >= end {
		return holes
	}
	all := append(slices.Clone(holes), [2]int64{start, end})
	slices.SortFunc(all, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	merged := all[:1]
	for _, h := range all[1:] {
		if last := &merged[len(merged)-1]; h[0] <= last[1] {
			last[1] = max(last[1], h[1])
		} else {
			merged = append(merged, h)
		}
	}
	return merged
}

// toRuns lists drawers as the runs of positions they hold: holes are cut out,
// and a drawer left with no position is a run of none at its start, so
// that retention still finds it.
func toRuns(drawers []drawerMeta, holes [][2]int64) []drawer.Meta {
	if len(drawers) == 0 {
		return nil
	}
	out := make([]drawer.Meta, 0, len(drawers))
	for _, dm := range drawers {
		d := drawer.Meta(dm)
		n, pos := len(out), d.Start
		for _, h := range holes {
			if h[1] <= pos || h[0] >= d.End() {
				continue
			}
			if h[0] > pos {
				out = append(out, piece(d, pos, h[0]))
			}
			pos = h[1]
		}
		if pos < d.End() {
			out = append(out, piece(d, pos, d.End()))
		}
		if len(out) == n {
			out = append(out, drawer.Meta{ID: d.ID, Start: d.Start})
		}
	}
	return out
}

// piece is positions [from, to) of drawer d as a run. The sequence numbers
// at a cut are not known without a read: 0, which readers take as unknown.
func piece(d drawer.Meta, from, to int64) drawer.Meta {
	if from == d.Start && to == d.End() {
		return d
	}
	p := drawer.Meta{ID: d.ID, Start: from, Count: int(to - from), FirstAt: d.SavedAt(from), LastAt: d.SavedAt(to - 1)}
	if from == d.Start {
		p.FirstSeq = d.FirstSeq
	}
	if to == d.End() {
		p.LastSeq = d.LastSeq
	}
	return p
}

// fromRuns is the inverse of toRuns: consecutive runs of one drawer are that
// drawer, and the positions between runs are holes.
func fromRuns(rs []drawer.Meta) ([]drawerMeta, [][2]int64) {
	var drawers []drawerMeta
	var holes [][2]int64
	for i, r := range rs {
		if i > 0 && rs[i-1].End() < r.Start {
			holes = addHole(holes, rs[i-1].End(), r.Start)
		}
		if n := len(drawers); n > 0 && drawers[n-1].ID == r.ID {
			last := &drawers[n-1]
			last.Count = int(r.End() - last.Start)
			last.LastSeq, last.LastAt = r.LastSeq, r.LastAt
			continue
		}
		drawers = append(drawers, drawerMeta(r))
	}
	return drawers, holes
}
