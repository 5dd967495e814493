package catalog

import (
	"cmp"
	"slices"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
)

// Candidate is a cabinet with unacknowledged notifications.
type Candidate struct {
	Entry  Entry
	Cursor Cursor
	// HeadSeq is the sequence number of the first unacknowledged
	// notification; 0 when it has to be read from the drawer at Cursor.Acked.
	HeadSeq int64
}

// Candidates returns the cabinets the group allows that have notifications
// after their cursor. A cabinet without a cursor is acknowledged up to
// position 0.
func Candidates(entries []Entry, cursors []Cursor, group domain.PeekGroup) []Candidate {
	byKey := make(map[Key]Cursor, len(cursors))
	for _, c := range cursors {
		byKey[c.Key()] = c
	}
	var out []Candidate
	for _, e := range entries {
		if !group.Contains(e.Origin) {
			continue
		}
		cur, ok := byKey[e.Key()]
		if !ok {
			cur = Cursor{Origin: e.Origin, ContentType: e.ContentType}
		}
		if cur.Acked >= e.Total {
			continue
		}
		out = append(out, Candidate{Entry: e, Cursor: cur, HeadSeq: headSeq(e, cur)})
	}
	return out
}

// headSeq is the sequence number at the cursor when it is known without a
// read: recorded by the last dequeue, the first of a run, or counted from
// it in a run whose sequence numbers are consecutive.
func headSeq(e Entry, c Cursor) int64 {
	if c.HeadSeq > 0 {
		return c.HeadSeq
	}
	i := drawer.Containing(e.Drawers, c.Acked)
	if i < 0 {
		return 0
	}
	d := e.Drawers[i]
	if d.Start == c.Acked {
		return d.FirstSeq
	}
	// A cabinet's sequence numbers grow with its positions, so a run with
	// as many numbers from its first to its last as it has positions holds
	// them one apart: a recipient's notifications of this cabinet alone,
	// the case of a recipient with one cabinet.
	if d.FirstSeq > 0 && d.LastSeq-d.FirstSeq == int64(d.Count-1) {
		return d.FirstSeq + c.Acked - d.Start
	}
	return 0
}

// Visible keeps the candidates whose head is at or below the watermark,
// ordered by head sequence number: the first is where the next bundle comes
// from. All HeadSeq must be resolved.
func Visible(cands []Candidate, watermark int64) []Candidate {
	out := slices.DeleteFunc(slices.Clone(cands), func(c Candidate) bool {
		return c.HeadSeq <= 0 || c.HeadSeq > watermark
	})
	slices.SortFunc(out, func(a, b Candidate) int { return cmp.Compare(a.HeadSeq, b.HeadSeq) })
	return out
}

// Span is a run of positions [Start, End) of one cabinet.
type Span struct {
	Key        Key
	Start, End int64
}

// Removable decides what retention may delete of a cabinet: drawers whose
// runs are all acknowledged and that no retained bundle covers, each once
// (its first run). The last drawer is kept for appending unless the whole
// cabinet goes, which it does when every run is acknowledged and no
// retained bundle covers any of it. Positions handed out beyond the runs
// (up to Total) are holes, given back by saves that failed: they never hold
// a notification, and a cursor never passes those at the cabinet's end (a
// bundle ends after its last item), so they do not keep the cabinet.
func Removable(e Entry, c Cursor, retained []Span) (drawers []drawer.Meta, dropEntry bool) {
	covered := func(d drawer.Meta) bool {
		return slices.ContainsFunc(retained, func(s Span) bool { return s.Key == e.Key() && s.Start < d.End() && d.Start < s.End })
	}
	kept := map[string]bool{}
	for _, d := range e.Drawers {
		if d.End() > c.Acked || covered(d) {
			kept[d.ID] = true
		}
	}
	drop := len(kept) == 0
	if !drop && len(e.Drawers) > 0 {
		kept[e.Drawers[len(e.Drawers)-1].ID] = true
	}
	for _, d := range e.Drawers {
		if !kept[d.ID] {
			drawers = append(drawers, d)
			kept[d.ID] = true
		}
	}
	return drawers, drop
}
