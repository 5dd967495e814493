package hub

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// The operators' read-only inspection (the Admin API): nothing here writes.

// CabinetBacklog is what one cabinet has saved and not yet dequeued.
type CabinetBacklog struct {
	Origin      domain.Origin
	ContentType string
	// Total is the positions handed out, Acked those acknowledged.
	Total, Acked int64
	// Waiting is the positions after Acked that hold notifications (the
	// entry's runs); InPending the part of it in pending bundles.
	Waiting, InPending int64
	// OldestSavedAt is when the first waiting notification was saved (unix
	// milliseconds, drawer.Meta.SavedAt); 0 when unknown.
	OldestSavedAt int64
	// Weight is the total weight of the first MaxWeighed waiting
	// notifications; WeightPartial says there are more.
	Weight        int64
	WeightPartial bool
}

// MaxWeighed bounds the waiting notifications of a cabinet whose weights
// Backlog reads and sums: the catalog keeps no weights, and a cabinet may
// hold millions.
const MaxWeighed = 10_000

// MaxBacklogCabinets bounds the cabinets a backlog lists: a recipient has a
// cabinet per content type a domain saved for it, with no bound, and each
// listed costs the reads of its weights and about 280 bytes of the answer
// (gRPC clients take 4 MiB by default, about 15,000 of them).
const MaxBacklogCabinets = 1_000

// RecipientBacklog is a recipient's backlog: its cabinets with waiting
// notifications (the oldest MaxBacklogCabinets, oldest first), how many
// there are, and its pending bundles (oldest first).
type RecipientBacklog struct {
	Cabinets     []CabinetBacklog
	CabinetCount int
	Pending      []bundle.Record
}

// Backlog reads the recipient's backlog: one read of its state
// (LoadRecipient), and the drawers of each listed cabinet's first
// MaxWeighed waiting notifications, for their weight.
func (r *Hub) Backlog(ctx context.Context, recipient string) (RecipientBacklog, error) {
	if err := r.begin(); err != nil {
		return RecipientBacklog{}, err
	}
	defer r.ops.Done()
	state, err := r.store.LoadRecipient(ctx, recipient)
	if err != nil {
		return RecipientBacklog{}, err
	}
	type waiting struct {
		backlog   CabinetBacklog
		candidate catalog.Candidate
	}
	var cabinets []waiting
	for _, c := range catalog.Candidates(state.Entries, state.Cursors, domain.GroupAll) {
		e := c.Entry
		cb := CabinetBacklog{Origin: e.Origin, ContentType: e.ContentType, Total: e.Total, Acked: c.Cursor.Acked}
		cb.Waiting = drawer.Held(e.Drawers, c.Cursor.Acked)
		if cb.Waiting <= 0 {
			continue // only positions its store left empty
		}
		if head, i := drawer.First(e.Drawers, c.Cursor.Acked); i >= 0 {
			cb.OldestSavedAt = e.Drawers[i].SavedAt(head)
		}
		for _, rec := range state.Pending {
			if rec.Origin == e.Origin && rec.ContentType == e.ContentType {
				cb.InPending += int64(rec.Count)
			}
		}
		cabinets = append(cabinets, waiting{cb, c})
	}
	slices.SortFunc(cabinets, func(x, y waiting) int {
		a, b := x.backlog, y.backlog
		return cmp.Or(cmp.Compare(a.OldestSavedAt, b.OldestSavedAt), cmp.Compare(a.Origin, b.Origin), cmp.Compare(a.ContentType, b.ContentType))
	})
	// Only the cabinets listed are weighed.
	out := RecipientBacklog{CabinetCount: len(cabinets)}
	for _, w := range cabinets[:min(len(cabinets), MaxBacklogCabinets)] {
		cb := w.backlog
		if cb.Weight, cb.WeightPartial, err = r.waitingWeight(ctx, state.Head.Watermark, w.candidate); err != nil {
			return RecipientBacklog{}, err
		}
		out.Cabinets = append(out.Cabinets, cb)
	}
	out.Pending = pendingIn(state, domain.GroupAll)
	return out, nil
}

// waitingWeight sums the weights of the cabinet's first MaxWeighed waiting
// notifications (saved: at or below the watermark), reading their drawers
// as a Peek does, and says whether more were left out.
func (r *Hub) waitingWeight(ctx context.Context, watermark int64, c catalog.Candidate) (weight int64, partial bool, err error) {
	n := 0
	need := func() int { return MaxWeighed + 1 - n } // one more tells whether any are left out
	take := func(it drawer.Item) bool {
		if it.Seq > watermark {
			return false
		}
		if n == MaxWeighed {
			partial = true
			return false
		}
		weight += it.Weight
		n++
		return true
	}
	err = drawer.Scan(ctx, r.store.ReadDrawer, c.Entry.Drawers, c.Cursor.Acked, need, take)
	return weight, partial, err
}

// runsOf returns the runs of drawer id, none when it has none.
func runsOf(drawers []drawer.Meta, id string) []drawer.Meta {
	return slices.DeleteFunc(slices.Clone(drawers), func(m drawer.Meta) bool { return m.ID != id })
}

// widest adds to runs, one drawer's, the runs of it that another record
// names, in order of their start. Each record names the drawer as it was
// when its bundle was dequeued: a run that a later save appended to is
// shorter in an earlier record, so of two runs that start alike the
// longer is kept.
func widest(runs, more []drawer.Meta) []drawer.Meta {
	for _, m := range more {
		i, found := slices.BinarySearchFunc(runs, m.Start, func(d drawer.Meta, start int64) int { return cmp.Compare(d.Start, start) })
		switch {
		case !found:
			runs = slices.Insert(runs, i, m)
		case m.Count > runs[i].Count:
			runs[i] = m
		}
	}
	return runs
}

// Preview is what the next Peek of a group would return.
type Preview struct {
	// Pending: Record is pending already (Peek returns it again); else it
	// is the bundle Peek would cut now, not stored, with no id.
	Pending bool
	Record  bundle.Record
	Bundle  *domain.Bundle
}

// PreviewNextBundle says what Peek(recipient, group, "") would return now,
// without storing anything: the group's oldest pending bundle, else the
// bundle cut (Peek's own cut) would make; nil when there is nothing. It reads
// the recipient's state and the drawers Peek would read.
func (r *Hub) PreviewNextBundle(ctx context.Context, recipient string, group domain.PeekGroup) (*Preview, error) {
	if err := r.begin(); err != nil {
		return nil, err
	}
	defer r.ops.Done()
	return retry(ctx, func() (*Preview, error) {
		state, err := r.store.LoadRecipient(ctx, recipient)
		if err != nil {
			return nil, err
		}
		if pending := pendingIn(state, group); len(pending) > 0 {
			b, err := r.materialize(ctx, recipient, state, pending[0])
			if err != nil {
				return nil, err
			}
			return &Preview{Pending: true, Record: pending[0], Bundle: b}, nil
		}
		rec, items, _, err := r.cut(ctx, state, group)
		if err != nil || rec == nil {
			return nil, err
		}
		return &Preview{Record: *rec, Bundle: toBundle(recipient, *rec, items)}, nil
	})
}

// TraceState is where a notification is.
type TraceState int

// Where a notification can be.
const (
	// TraceNotFound: no record of the id (never saved, or removed by
	// retention with its drawer).
	TraceNotFound TraceState = iota + 1
	// TraceElsewhere: the id is stored but in none of the recipient's
	// drawers (another recipient's, or retention is removing it).
	TraceElsewhere
	TraceWaiting
	TracePending
	TraceDequeued
)

// Trace is where a notification of a recipient is. Bundle is set for
// TracePending, and for TraceDequeued while retention keeps the record.
type Trace struct {
	State       TraceState
	Origin      domain.Origin
	ContentType string
	Position    int64
	SavedAt     int64 // unix milliseconds (drawer.Meta.SavedAt)
	Bundle      *bundle.Record
	// drawerID is the drawer holding it (AcknowledgeOnBehalf).
	drawerID string
}

// TraceNotification finds notification id of the recipient: its id record
// (LookupIDs) names its drawer; the recipient's state says which cabinet
// holds the drawer, whether its position is acknowledged and which pending
// bundle covers it; one read of the drawer gives the position. Past the
// cursor, the recipient's dequeued bundles (DequeuedBundles) name the
// bundle, and they also hold the drawers retention took out of the
// catalog.
func (r *Hub) TraceNotification(ctx context.Context, recipient, id string) (Trace, error) {
	if err := r.begin(); err != nil {
		return Trace{}, err
	}
	defer r.ops.Done()
	return retry(ctx, func() (Trace, error) { return r.traceOnce(ctx, recipient, id) })
}

func (r *Hub) traceOnce(ctx context.Context, recipient, id string) (Trace, error) {
	recs, err := r.store.LookupIDs(ctx, []string{id})
	if err != nil {
		return Trace{}, err
	}
	idRec, ok := recs[id]
	if !ok {
		return Trace{State: TraceNotFound}, nil
	}
	state, err := r.store.LoadRecipient(ctx, recipient)
	if err != nil {
		return Trace{}, err
	}
	var (
		entry    catalog.Entry
		runs     []drawer.Meta // the drawer's
		dequeued []bundle.Record
		loaded   bool
	)
	for _, e := range state.Entries {
		if runs = runsOf(e.Drawers, idRec.DrawerID); len(runs) > 0 {
			entry = e
			break
		}
	}
	if len(runs) == 0 {
		// Retention may have taken a dequeued bundle's drawers out of the
		// entry; the bundles' records keep them.
		if dequeued, err = r.store.DequeuedBundles(ctx, recipient); err != nil {
			return Trace{}, err
		}
		loaded = true
		for _, rec := range dequeued {
			if named := runsOf(rec.Drawers, idRec.DrawerID); len(named) > 0 {
				entry = catalog.Entry{Origin: rec.Origin, ContentType: rec.ContentType}
				runs = widest(runs, named)
			}
		}
	}
	if len(runs) == 0 {
		return Trace{State: TraceElsewhere}, nil
	}
	items, err := drawer.ReadRange(ctx, r.store.ReadDrawer, runs, runs[0].Start, runs[len(runs)-1].End())
	if err != nil {
		return Trace{}, err
	}
	i := slices.IndexFunc(items, func(it drawer.Item) bool { return it.ID == id })
	if i < 0 {
		// The id record says the drawer holds it: a replica lags.
		return Trace{}, fmt.Errorf("%w: notification %s missing from a read of drawer %s", store.ErrConflict, id, idRec.DrawerID)
	}
	pos := items[i].Pos
	meta := runs[drawer.Containing(runs, pos)]
	t := Trace{Origin: entry.Origin, ContentType: entry.ContentType, Position: pos, SavedAt: meta.SavedAt(pos), drawerID: meta.ID}
	in := func(rec bundle.Record) bool {
		if rec.State == bundle.Released || rec.Origin != entry.Origin || rec.ContentType != entry.ContentType || pos < rec.Start || pos >= rec.End {
			return false
		}
		// A bundle recording its drawers names the one it read from (a
		// cabinet restarted after retention reuses positions).
		return rec.Drawers == nil || slices.ContainsFunc(rec.Drawers, func(m drawer.Meta) bool { return m.ID == meta.ID })
	}
	cursor := slices.IndexFunc(state.Cursors, func(c catalog.Cursor) bool { return c.Key() == entry.Key() })
	acked := cursor >= 0 && state.Cursors[cursor].Acked > pos
	if !acked && len(entry.Drawers) > 0 { // still the entry's: not acknowledged
		if j := slices.IndexFunc(state.Pending, in); j >= 0 {
			t.State, t.Bundle = TracePending, &state.Pending[j]
			return t, nil
		}
		t.State = TraceWaiting
		return t, nil
	}
	t.State = TraceDequeued
	if !loaded {
		if dequeued, err = r.store.DequeuedBundles(ctx, recipient); err != nil {
			return Trace{}, err
		}
	}
	if j := slices.IndexFunc(dequeued, in); j >= 0 {
		t.Bundle = &dequeued[j]
	}
	return t, nil
}
