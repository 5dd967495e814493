package drawer

import "slices"

// Append files items (already numbered with consecutive positions starting at
// the cabinet's Total) into the cabinet's drawers: the last run is filled up
// to its drawer's Capacity when it ends where the items start, then new
// drawers are opened with ids from newID. at is the save's time (unix
// milliseconds), recorded in the drawers it fills. It returns the drawers as
// they become and the pages to write; drawers is not modified.
func Append(drawers []Meta, items []Item, newID func() string, at int64) ([]Meta, []Page) {
	return appendItems(drawers, items, newID, at, false)
}

// AppendClosing is Append with the last drawer closed first: the items go
// into new drawers, whatever room the last one has left.
func AppendClosing(drawers []Meta, items []Item, newID func() string, at int64) ([]Meta, []Page) {
	return appendItems(drawers, items, newID, at, true)
}

func appendItems(drawers []Meta, items []Item, newID func() string, at int64, closed bool) ([]Meta, []Page) {
	out := make([]Meta, len(drawers), len(drawers)+2+len(items)/Capacity)
	copy(out, drawers)
	var pages []Page
	for len(items) > 0 {
		if len(out) == 0 || closed || out[len(out)-1].End() != items[0].Pos || lastHolds(out) >= Capacity {
			out = append(out, Meta{ID: newID(), Start: items[0].Pos, FirstSeq: items[0].Seq, FirstAt: at})
			closed = false
		}
		last := &out[len(out)-1]
		n := min(Capacity-lastHolds(out), len(items))
		chunk := items[:n]
		items = items[n:]
		last.Count += n
		last.LastSeq = chunk[n-1].Seq
		last.LastAt = at
		for len(chunk) > 0 {
			p := min(PageSize, len(chunk))
			pages = append(pages, Page{DrawerID: last.ID, Items: chunk[:p]})
			chunk = chunk[p:]
		}
	}
	return out, pages
}

// lastHolds counts the items of the last run's drawer: its runs are the
// last ones.
func lastHolds(runs []Meta) int {
	n := 0
	for i := len(runs) - 1; i >= 0 && runs[i].ID == runs[len(runs)-1].ID; i-- {
		n += runs[i].Count
	}
	return n
}

// First returns the first position at or after pos that a run holds, and
// the index of that run; -1 when none does.
func First(runs []Meta, pos int64) (int64, int) {
	for i, d := range runs {
		if d.Count > 0 && d.End() > pos {
			return max(pos, d.Start), i
		}
	}
	return 0, -1
}

// Held counts the positions at or after from that the runs hold.
func Held(runs []Meta, from int64) int64 {
	var n int64
	for _, d := range runs {
		n += max(d.End()-max(from, d.Start), 0)
	}
	return n
}

// Containing returns the index of the drawer holding position pos, or -1.
func Containing(drawers []Meta, pos int64) int {
	return slices.IndexFunc(drawers, func(d Meta) bool { return pos >= d.Start && pos < d.End() })
}
