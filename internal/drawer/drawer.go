// Package drawer holds the drawer layout: a cabinet's
// notifications are appended to drawers of at most Capacity items; a drawer
// is stored as pages of items. Positions number a cabinet's notifications
// 0, 1, 2, ... in sequence order. A cabinet lists its drawers as runs of
// positions in order, [Start, Start+Count) each: a drawer is one run,
// unless its store left some of its positions empty for good (Cosmos DB
// gives back the positions of a save that failed half-way), in which case
// it is the runs around them, or one run of no positions when none is left.
// Positions that no run holds hold nothing, and readers never expect them.
package drawer

// Capacity is the most notifications one drawer ever holds.
const Capacity = 10_000

// PageSize is the most items stored in one page. Pages keep stored documents
// small while packing many notifications per write.
const PageSize = 1_000

// Meta describes one run of a drawer of a cabinet.
type Meta struct {
	ID       string // GUID; in Cosmos DB the drawer's own logical partition
	Start    int64  // cabinet position of its first item
	Count    int    // items written, ≤ Capacity
	FirstSeq int64  // sequence number of its first item; 0 when not known
	LastSeq  int64  // sequence number of its last item; 0 when not known
	// FirstAt and LastAt are when its first and last items were saved (unix
	// milliseconds).
	FirstAt, LastAt int64
}

// SavedAt estimates when the item at pos was saved (unix milliseconds): the
// save times of the drawer's first and last items, interpolated by
// position. It is exact for both ends and for a drawer written by one save.
func (m Meta) SavedAt(pos int64) int64 {
	if m.Count <= 1 || m.LastAt <= m.FirstAt {
		return m.FirstAt
	}
	offset := min(max(pos-m.Start, 0), int64(m.Count-1))
	return m.FirstAt + (m.LastAt-m.FirstAt)*offset/int64(m.Count-1)
}

// End is the position after the drawer's last item.
func (m Meta) End() int64 { return m.Start + int64(m.Count) }

// Item is a stored notification: the fields that vary within a cabinet plus
// its position and sequence number. Recipient, origin and content type are
// the cabinet's.
type Item struct {
	Pos              int64
	Seq              int64
	ID               string
	DocumentType     string
	SupportsBundling bool
	Weight           int64
}

// Page is a run of consecutive items of one drawer, written together.
type Page struct {
	DrawerID string
	Items    []Item
}

// Start is the position of the page's first item.
func (p Page) Start() int64 { return p.Items[0].Pos }
