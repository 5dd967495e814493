package drawer

// Append files items (already numbered with consecutive positions starting at
// the cabinet's Total) into the cabinet's drawers: the last drawer is filled up
// to Capacity, then new drawers are opened with ids from newID. at is the
// save's time (unix milliseconds), recorded in the drawers it fills. It
// returns the drawers as they become and the pages to write; drawers is not
// modified.
func Append(drawers []Meta, items []Item, newID func() string, at int64) ([]Meta, []Page) {
	out := make([]Meta, len(drawers), len(drawers)+1+len(items)/Capacity)
	copy(out, drawers)
	var pages []Page
	for len(items) > 0 {
		if len(out) == 0 || out[len(out)-1].Full() {
			out = append(out, Meta{ID: newID(), Start: items[0].Pos, FirstSeq: items[0].Seq, FirstAt: at})
		}
		last := &out[len(out)-1]
		n := min(Capacity-last.Count, len(items))
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

// Containing returns the index of the drawer holding position pos, or -1.
func Containing(drawers []Meta, pos int64) int {
	for i, d := range drawers {
		if pos >= d.Start && pos < d.End() {
			return i
		}
	}
	return -1
}
