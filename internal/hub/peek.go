package hub

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// Peek returns the recipient's next bundle for group, or nil when there is
// nothing to deliver. bundleID may be empty. While a bundle is pending every
// Peek of its group returns it. Concurrent identical peeks share one
// execution, but only one that begins after they started, so a Peek sees
// every Save and Dequeue that returned before it.
func (r *Hub) Peek(ctx context.Context, recipient string, group domain.PeekGroup, bundleID string) (*domain.Bundle, error) {
	if err := r.begin(); err != nil {
		return nil, err
	}
	defer r.ops.Done()
	key := recipient + "|" + strconv.Itoa(int(group)) + "|" + bundleID
	return r.peeks.do(ctx, key, r.spawn, func() (*domain.Bundle, error) {
		// Shared by several callers, so no single caller's cancellation
		// aborts it; Close does.
		ctx, cancel := context.WithTimeout(r.opsCtx, opTimeout)
		defer cancel()
		return retry(ctx, func() (*domain.Bundle, error) { return r.peekOnce(ctx, recipient, group, bundleID) })
	})
}

// peekOnce answers a Peek from one reading of the recipient's state. It
// returns ErrConflict when another writer won a race; the caller retries.
// An idle recipient's state (store.MayBeIdle) has nothing pending and
// nothing to cut, so it takes the same path to its empty answer (or to
// ErrBundleIDInUse for a bundle id that was used).
func (r *Hub) peekOnce(ctx context.Context, recipient string, group domain.PeekGroup, bundleID string) (*domain.Bundle, error) {
	loaded := r.opts.Now()
	state, err := r.store.LoadRecipient(ctx, recipient, store.MayBeIdle)
	if err != nil {
		return nil, err
	}
	r.noteState(ctx, recipient, state)
	pending := pendingIn(state, group)
	if bundleID != "" {
		if i := slices.IndexFunc(pending, func(rec bundle.Record) bool { return rec.ID == bundleID }); i >= 0 {
			return r.materialize(ctx, recipient, state, pending[i])
		}
		if len(pending) > 0 {
			return nil, fmt.Errorf("%w: bundle %s is pending", domain.ErrOtherBundlePending, pending[0].ID)
		}
		if slices.ContainsFunc(state.Pending, func(rec bundle.Record) bool { return rec.ID == bundleID }) {
			return nil, fmt.Errorf("%w: %s is pending in another group", domain.ErrBundleIDInUse, bundleID)
		}
		// A dequeued or released bundle's id stays used while its record is
		// kept: the actor that holds it must not get other notifications
		// under it.
		used, err := r.store.BundleExists(ctx, recipient, bundleID)
		if err != nil {
			return nil, err
		}
		if used {
			return nil, fmt.Errorf("%w: %s was dequeued, or released by an operator; peek with a new bundle id", domain.ErrBundleIDInUse, bundleID)
		}
	} else if len(pending) > 0 {
		return r.materialize(ctx, recipient, state, pending[0])
	}

	rec, items, cursor, err := r.cut(ctx, state, group)
	if err == nil && rec == nil {
		// Nothing to deliver, perhaps only until a save's lease ends.
		r.wakes.wakeAfter(recipient, state.HeldFor)
	}
	if err != nil || rec == nil {
		return nil, err
	}
	rec.ID = bundleID
	if rec.ID == "" {
		rec.ID = r.opts.NewID()
	}
	if err := r.createBundle(ctx, loaded, recipient, *rec, cursor); err != nil {
		return nil, err
	}
	return toBundle(recipient, *rec, items), nil
}

// bundleWriteBound bounds how late a bundle's CreateBundle may land after
// the start of the load it was cut from. A cut from a cabinet with no
// cursor stored is conditional only on there being none still: should
// retention take the cabinet out, its cursor with it, before the write
// lands (the actor dequeued the same notifications meanwhile, from another
// Peek), the write would succeed over a cabinet a Save starts again at
// position 0. Retention drops a drained cabinet only once its cursor has
// not moved for cabinetDropDelay (by the clock that stamped the move, which
// happened after the load began): so the delay must exceed this bound plus
// the instances' clock skew (sweepSkew) plus the time a request spends in
// the network after its caller gave up on it.
const bundleWriteBound = time.Minute

// createBundle stores rec, cut from the state whose load began at loaded,
// within bundleWriteBound of that by the hub's clock: a load older than
// that is a conflict (the caller reads again and cuts afresh), and the
// store's call is given what is left of the bound.
func (r *Hub) createBundle(ctx context.Context, loaded time.Time, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	left := bundleWriteBound - r.opts.Now().Sub(loaded)
	if left <= 0 {
		return fmt.Errorf("%w: bundle %s was cut from a load of %v ago; reading again", store.ErrConflict, rec.ID, bundleWriteBound-left)
	}
	ctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	return r.store.CreateBundle(ctx, recipient, rec, cursor)
}

// pendingIn returns the recipient's pending bundles in group, oldest first:
// a Peek without a bundle id returns the first. Oldest is the earliest cut
// (CreatedAt), not the earliest stored. For one group the two are the same
// bundle, as a group has at most one pending (the store refuses a second;
// the loser of that race re-reads and answers the winner's). For ALL they
// can differ: a group's peek may cut its bundle, an ALL peek meanwhile cut
// and store another group's, and once the group's lands ALL answers it,
// being cut first. Both bundles are pending in their own groups, with no
// notification in common, and each dequeues exactly its own
// (storetest.RunRepository's racing peeks show it on every store).
func pendingIn(state store.RecipientState, group domain.PeekGroup) []bundle.Record {
	var pending []bundle.Record
	for _, rec := range state.Pending {
		if group.Contains(rec.Origin) {
			pending = append(pending, rec)
		}
	}
	slices.SortFunc(pending, func(a, b bundle.Record) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return pending
}

// cut builds a new bundle from the visible cabinet of the group whose first
// unacknowledged notification is oldest. It returns nil when there is none.
// It only reads: Peek stores what it returns, PreviewNextBundle does not.
func (r *Hub) cut(ctx context.Context, state store.RecipientState, group domain.PeekGroup) (*bundle.Record, []drawer.Item, catalog.Cursor, error) {
	return r.cutWithin(ctx, state, group, nil)
}

// cutLimit confines a cut to one cabinet and to its positions before end.
type cutLimit struct {
	key catalog.Key
	end int64
}

// cutWithin is cut, confined by limit when it is not nil: the bundle is the
// one the bundling rule makes of that cabinet, ended early at limit.end.
func (r *Hub) cutWithin(ctx context.Context, state store.RecipientState, group domain.PeekGroup, limit *cutLimit) (*bundle.Record, []drawer.Item, catalog.Cursor, error) {
	cands := catalog.Candidates(state.Entries, state.Cursors, group)
	if limit != nil {
		cands = slices.DeleteFunc(cands, func(c catalog.Candidate) bool { return c.Entry.Key() != limit.key })
	}
	watermark := state.Head.Watermark
	for i := range cands {
		if cands[i].HeadSeq == 0 {
			seq, err := r.firstSeqFrom(ctx, cands[i].Entry, cands[i].Cursor.Acked, watermark)
			if err != nil {
				return nil, nil, catalog.Cursor{}, err
			}
			cands[i].HeadSeq = seq
		}
	}
	visible := catalog.Visible(cands, watermark)
	if len(visible) == 0 {
		return nil, nil, catalog.Cursor{}, nil
	}
	cand := visible[0]
	cutter := domain.NewBundleCutter(r.opts.MaxBundleWeight)
	var items []drawer.Item
	var nextSeq int64
	// next is the position the scan should find, or the first one a
	// run holds after it: an item further on means the positions
	// between were not read, a drawer read that lags the catalog.
	next := cand.Cursor.Acked
	var stale error
	need := func() int {
		// Every weight is at least 1, plus one look-ahead item. A first
		// notification over the limit leaves room for the look-ahead only.
		// Capped before the look-ahead is added: the room of the largest
		// limit, math.MaxInt64, would overflow.
		return int(min(max(r.opts.MaxBundleWeight-cutter.Weight(), 0), 1<<30-1) + 1)
	}
	take := func(it drawer.Item) bool {
		if it.Seq > watermark {
			return false
		}
		if it.Pos != next {
			if want, _ := drawer.First(cand.Entry.Drawers, next); it.Pos != want {
				stale = missing(cand.Entry, want, it.Pos)
				return false
			}
		}
		next = it.Pos + 1
		if limit != nil && it.Pos >= limit.end {
			nextSeq = it.Seq
			return false
		}
		if !cutter.Offer(it.SupportsBundling, it.Weight) {
			nextSeq = it.Seq
			return false
		}
		items = append(items, it)
		return !cutter.Closed()
	}
	if err := drawer.Scan(ctx, r.store.ReadDrawer, cand.Entry.Drawers, cand.Cursor.Acked, need, take); err != nil {
		return nil, nil, catalog.Cursor{}, err
	}
	if stale != nil {
		return nil, nil, catalog.Cursor{}, stale
	}
	if len(items) == 0 {
		// Its head is at or below the watermark, so it was saved.
		head, _ := drawer.First(cand.Entry.Drawers, cand.Cursor.Acked)
		return nil, nil, catalog.Cursor{}, missing(cand.Entry, head, head+1)
	}
	rec := &bundle.Record{
		Origin:        cand.Entry.Origin,
		ContentType:   cand.Entry.ContentType,
		Group:         domain.GroupOf(cand.Entry.Origin),
		Start:         cand.Cursor.Acked,
		End:           items[len(items)-1].Pos + 1,
		Count:         len(items),
		Weight:        cutter.Weight(),
		DocumentTypes: documentTypes(items),
		NextSeq:       nextSeq,
		State:         bundle.Pending,
		CreatedAt:     r.opts.Now(),
	}
	return rec, items, cand.Cursor, nil
}

// missing is the conflict of a drawer read that lacks positions [from, to)
// of the entry's runs.
func missing(e catalog.Entry, from, to int64) error {
	return fmt.Errorf("%w: %v/%s positions %d..%d missing from a drawer read", store.ErrConflict, e.Origin, e.ContentType, from, to)
}

// firstSeqFrom reads the sequence number of the first item at or after pos
// that the entry's runs hold; 0 when it is not written yet (a save in flight
// took the position in the entry before writing its page, and its numbers
// are above the watermark). That position must hold an item: one found
// further on at or below the watermark means the read lags (numbers grow
// with positions, so the missed one was saved), and so does none in a run
// whose last number is at or below the watermark (saved whole). Taken for
// unwritten, such a read would hide the cabinet, and a newer cabinet's
// notifications would be delivered before its own. One found further on
// above the watermark, a later save's that wrote its page first, tells
// nothing: confirmUnwritten decides.
func (r *Hub) firstSeqFrom(ctx context.Context, e catalog.Entry, pos, watermark int64) (int64, error) {
	want, i := drawer.First(e.Drawers, pos)
	if i < 0 {
		return 0, nil
	}
	for _, d := range e.Drawers[i:] {
		if d.Count == 0 {
			continue
		}
		items, err := r.store.ReadDrawer(ctx, d.ID, max(want, d.Start), d.End(), 1)
		if err != nil {
			return 0, err
		}
		if len(items) > 0 {
			if items[0].Pos == want {
				return items[0].Seq, nil
			}
			if items[0].Seq <= watermark {
				return 0, missing(e, want, items[0].Pos)
			}
			return 0, r.confirmUnwritten(ctx, e, e.Drawers[i], want, items[0].Pos)
		}
		if d.LastSeq > 0 && d.LastSeq <= watermark {
			return 0, missing(e, want, d.End())
		}
	}
	return 0, nil
}

// confirmUnwritten tells apart the two reasons a read of the entry's run
// from want on found nothing before found, a position above the watermark:
// the read lags, or want's save, in flight, has not written it yet (its
// number is then above the watermark too: a save writes its pages before
// it commits, and the watermark stays below every save not finalized). A
// read of everything the drawer holds decides: want found there is a stale
// read (ErrConflict); not found, it is not written (nil).
func (r *Hub) confirmUnwritten(ctx context.Context, e catalog.Entry, run drawer.Meta, want, found int64) error {
	items, err := r.store.ReadDrawerLatest(ctx, run.ID, want, want+1, 1)
	if err != nil {
		return err
	}
	if len(items) > 0 {
		return missing(e, want, found)
	}
	return nil
}

// materialize reads a bundle's notifications back from its drawers: those
// its record names (dequeued ones), else those of its catalog entry.
func (r *Hub) materialize(ctx context.Context, recipient string, state store.RecipientState, rec bundle.Record) (*domain.Bundle, error) {
	drawers := rec.Drawers
	if drawers == nil {
		i := slices.IndexFunc(state.Entries, func(e catalog.Entry) bool {
			return e.Origin == rec.Origin && e.ContentType == rec.ContentType
		})
		if i < 0 {
			return nil, fmt.Errorf("bundle %s has no catalog entry", rec.ID)
		}
		drawers = state.Entries[i].Drawers
	}
	// Not the entry when the record names its drawers: retention may have
	// taken them out of it, or dropped it and a new one restarted the
	// cabinet's positions.
	items, err := drawer.ReadRange(ctx, r.store.ReadDrawer, drawers, rec.Start, rec.End)
	if err != nil {
		return nil, err
	}
	if len(items) != rec.Count {
		// Its notifications were read when it was cut, so a replica lags.
		return nil, fmt.Errorf("%w: bundle %s: read %d of %d notifications", store.ErrConflict, rec.ID, len(items), rec.Count)
	}
	if rec.DocumentTypes == nil {
		rec.DocumentTypes = documentTypes(items) // a store that keeps no copy
	}
	return toBundle(recipient, rec, items), nil
}

func toBundle(recipient string, rec bundle.Record, items []drawer.Item) *domain.Bundle {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	return &domain.Bundle{
		ID:              rec.ID,
		Recipient:       recipient,
		Origin:          rec.Origin,
		ContentType:     rec.ContentType,
		DocumentTypes:   rec.DocumentTypes,
		NotificationIDs: ids,
		Weight:          rec.Weight,
	}
}

// documentTypes lists the distinct document types in order of first appearance.
func documentTypes(items []drawer.Item) []string {
	var out []string
	seen := make(map[string]bool)
	for _, it := range items {
		if !seen[it.DocumentType] {
			seen[it.DocumentType] = true
			out = append(out, it.DocumentType)
		}
	}
	return out
}
