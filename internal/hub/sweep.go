package hub

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// sweepParallel bounds the recipients a pass sweeps at once.
const sweepParallel = 8

// sweepSkew is the margin on "dequeued since the last pass": instances'
// clocks, which stamp dequeues, need only agree to well within it.
const sweepSkew = time.Minute

// cabinetDropDelay is how long a drained cabinet's cursor must have stood
// still before retention takes the cabinet out whole, its entry and cursor
// with it. A bundle cut from a cabinet with no cursor stored is written on
// the condition that there is still none: the cursor a dequeue of the same
// notifications created meanwhile (the actor peeked them again elsewhere)
// is what makes that write fail, so the cursor must outlast the write.
// Writes land within bundleWriteBound of the load they were cut from, which
// began before the move; the move is stamped by its instance's clock and
// the drop decided by the sweeper's, which agree to within sweepSkew; and a
// request can linger in the network after its caller gave up. So:
// cabinetDropDelay > bundleWriteBound + sweepSkew + the network's lag,
// with minutes to spare.
const cabinetDropDelay = 10 * time.Minute

func (r *Hub) sweepLoop(ctx context.Context) {
	holder := uuid.NewString()
	timer := time.NewTimer(jittered(r.opts.SweepInterval))
	defer timer.Stop()
	// The start of this holder's last pass: the next visits the recipients
	// that dequeued since. A new holder looks back two intervals, as far as
	// a holder that stopped can have left undone. retry: the recipients
	// whose visit failed in a pass that visited all the others, each with
	// the since of its visit, which the next pass visits again.
	var last time.Time
	var retry map[string]time.Time
	for {
		select {
		case <-ctx.Done():
			// Shutting down: hand the lease over now (the store closes only
			// after this loop ends).
			release, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := r.store.ReleaseSweepLease(release, holder); err != nil {
				r.logger.Warn("releasing the sweep lease failed; it runs out by itself", "err", err)
			}
			cancel()
			return
		case <-timer.C:
			started := r.opts.Now()
			since := last
			if since.IsZero() {
				since = started.Add(-2 * r.opts.SweepInterval)
			}
			swept, failed, err := r.sweepTurn(ctx, holder, since.Add(-sweepSkew), retry)
			switch {
			case errors.Is(err, store.ErrNotHolder):
				// The pass outlasted its lease (this instance stalled, or
				// the clocks disagree): the holder now sweeps. Should this
				// one hold the lease again, its next pass looks back as far
				// as this one did.
				r.logger.Warn(SweepLeaseLost, "err", err)
				last = since
			case err != nil && failed != nil:
				// Every recipient was visited, and only these failed: the
				// next pass visits them again, looking back as far, and
				// goes on from this one's start. Held at the last pass
				// that succeeded, one recipient that never sweeps (a full
				// partition, a record it cannot read) would make every
				// pass visit and read all that was dequeued since.
				r.logger.Error("retention sweep failed", "err", err)
				last, retry = started, failed
			case err != nil && ctx.Err() == nil:
				r.logger.Error("retention sweep failed", "err", err)
			case err == nil && swept:
				last, retry = started, nil
			}
			timer.Reset(jittered(r.opts.SweepInterval))
		}
	}
}

// jittered is d ± 10%, so that instances started together do not ask for
// the lease at the same moment forever.
func jittered(d time.Duration) time.Duration {
	return d - d/10 + time.Duration(rand.Int64N(int64(d/5)+1))
}

// SweepLeaseLost is the warning of a pass that found its sweep lease taken
// over: the recipients it had not visited are left to the new holder.
const SweepLeaseLost = "the sweep lease was taken over during a retention pass; the instance holding it now sweeps"

// sweepTurn runs one pass if this instance may: on a shared store only the
// holder of the lease sweeps, at low priority. The lease outlasts the pass
// and is extended as the pass goes on; a holder that dies frees it after two
// intervals. It reports whether it swept and the recipients that failed
// (sweepPass); a pass that lost the lease midway reports
// store.ErrNotHolder.
func (r *Hub) sweepTurn(ctx context.Context, holder string, since time.Time, retry map[string]time.Time) (bool, map[string]time.Time, error) {
	interval := r.opts.SweepInterval
	hold := func(ctx context.Context) (bool, error) { return r.store.HoldSweepLease(ctx, holder, 2*interval) }
	ctx = r.store.LowPriority(ctx)
	if held, err := hold(ctx); err != nil || !held {
		return false, nil, err
	}
	failed, err := r.sweepPass(ctx, since, interval/2, hold, retry)
	return true, failed, err
}

// SweepNow runs one retention pass at once, without waiting for the
// sweeper's turn (tests; operators who want the space back): it visits
// every recipient that retains a dequeued bundle.
func (r *Hub) SweepNow(ctx context.Context) error { return r.sweep(ctx) }

// SweepSince runs one retention pass as the sweeper's turn does, without
// its lease: it visits the recipients with something due and those that
// dequeued since since (the start of the previous pass, less a margin).
func (r *Hub) SweepSince(ctx context.Context, since time.Time) error {
	_, err := r.sweepPass(ctx, since, 0, nil, nil)
	return err
}

// sweep is a pass that visits every recipient retaining a dequeued bundle
// (since the cutoff: every retained one is dequeued before or after it).
func (r *Hub) sweep(ctx context.Context) error {
	_, err := r.sweepPass(ctx, r.opts.Now().Add(-r.opts.Retention), 0, nil, nil)
	return err
}

// RetentionWaits is the debug line of a retention pass that waits for the one
// running on the same hub (SweepNow during the sweeper's turn).
const RetentionWaits = "a retention sweep waits for the one running on this instance"

// sweepPass removes what retention allows: dequeued and released bundles
// older than the retention, and fully acknowledged drawers that no retained
// bundle covers.
// Nothing unacknowledged is ever removed. It visits only the recipients the
// store's index of dequeue times names (Retention.DueRecipients): those
// with a bundle due, and those that dequeued since since (their catalog
// may hold drawers to let go); a recipient with neither costs nothing. Up
// to sweepParallel recipients are swept at once; hold, when set, is asked
// again every renew, and a lease found lost ends the pass with
// store.ErrNotHolder once the visits under way end (their removals are
// conditional on what they read, so they remove nothing the new holder's
// pass or a later bundle owns). A recipient whose sweep fails is reported
// once the others are swept: the error names it, and failed holds every
// such recipient with the since of its visit (nil unless the pass visited
// every recipient). The recipients of retry are visited too, each looking
// back to its own since when that is earlier.
func (r *Hub) sweepPass(ctx context.Context, since time.Time, renew time.Duration, hold func(context.Context) (bool, error), retry map[string]time.Time) (map[string]time.Time, error) {
	// One pass at a time on an instance (the sweeper's turn, SweepNow):
	// two would visit the same recipients, the later one only to meet
	// conflicts. Passes of two instances
	// overlap only when one outlasts its lease; a recipient's sweep removes
	// the documents of the bundles it read only while those are as read
	// (store.Retention.BundlesAsRead), on the version found before, so
	// that a later bundle under a freed id keeps its document.
	select {
	case r.sweeping <- struct{}{}:
	default:
		r.logger.Debug(RetentionWaits)
		select {
		case r.sweeping <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	defer func() { <-r.sweeping }()
	cutoff := r.opts.Now().Add(-r.opts.Retention)
	var due []string
	visits := map[string]time.Time{} // recipient → the since of its visit
	if err := r.store.DueRecipients(ctx, cutoff, since, func(recipient string) error {
		due = append(due, recipient)
		visits[recipient] = since
		return nil
	}); err != nil {
		return nil, err
	}
	// The recipients of retry, and those a visit asked to come back to
	// whose time has come, are visited too, looking back as far as asked.
	for _, also := range []map[string]time.Time{retry, r.revisits.take(r.opts.Now())} {
		for _, recipient := range slices.Sorted(maps.Keys(also)) {
			if at, listed := visits[recipient]; !listed || also[recipient].Before(at) {
				if !listed {
					due = append(due, recipient)
				}
				visits[recipient] = also[recipient]
			}
		}
	}
	r.pruneAudit(ctx, cutoff)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(sweepParallel)
	var (
		mu     sync.Mutex
		failed []string
		first  error
	)
	failedSince := func() map[string]time.Time {
		out := make(map[string]time.Time, len(failed))
		for _, recipient := range failed {
			out[recipient] = visits[recipient]
		}
		return out
	}
	held := time.Now()
	for i, recipient := range due {
		if gctx.Err() != nil {
			break
		}
		if hold != nil && time.Since(held) > renew {
			if ok, err := hold(gctx); err != nil || !ok {
				_ = g.Wait()
				if err == nil {
					err = fmt.Errorf("%w: the sweep lease was taken over with %d of %d recipients not visited", store.ErrNotHolder, len(due)-i, len(due))
				}
				return nil, err
			}
			held = time.Now()
		}
		g.Go(func() error {
			err := r.sweepRecipient(gctx, recipient, cutoff, visits[recipient])
			switch {
			case err == nil:
				r.stuck.swept(recipient)
				return nil
			case errors.Is(err, store.ErrConflict): // someone wrote meanwhile; the next pass looks again
				r.sweepFailed(recipient, err)
				return nil
			case gctx.Err() != nil:
				return err
			}
			r.sweepFailed(recipient, err)
			// One recipient the store keeps failing (a full partition, a
			// record it cannot read) must not hold up everyone else's
			// retention: the pass goes on and reports it at the end.
			mu.Lock()
			if failed = append(failed, recipient); first == nil {
				first = err
			}
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if len(failed) > 0 {
		return failedSince(), fmt.Errorf("retention of %d recipients failed (%s first): %w", len(failed), failed[0], first)
	}
	return nil, nil
}

// stuckAfter is how many visits in a row of one recipient must fail or
// conflict before retention warns of it (SweepKeepsFailing): a conflict
// is someone writing the recipient's catalog between the visit's read and
// its writes, which the next visit, reading again, gets past; one that
// comes back visit after visit is the visit's own doing (a write built on
// something that is not as it read it), and the recipient's storage grows
// until someone looks.
const stuckAfter = 3

// maxStuck bounds the recipients whose failed visits are counted; one
// forgotten only delays its warning.
const maxStuck = 10_000

// SweepKeepsFailing is the warning of a recipient whose last visits of
// retention all failed or conflicted: retention removes nothing of it
// until what fails them is found.
const SweepKeepsFailing = "retention keeps failing for a recipient: nothing of it is removed"

// stuckSweeps counts, per recipient, the visits of retention in a row
// that failed or conflicted, on the instance that visits (the holder of
// the sweep lease), in memory: a new holder counts afresh.
type stuckSweeps struct {
	mu   sync.Mutex
	runs map[string]int
}

// swept notes a visit of the recipient that succeeded.
func (s *stuckSweeps) swept(recipient string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.runs, recipient)
}

// failed notes a visit of the recipient that failed or conflicted, and
// returns how many in a row did.
func (s *stuckSweeps) failed(recipient string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == nil {
		s.runs = map[string]int{}
	}
	if _, ok := s.runs[recipient]; !ok && len(s.runs) >= maxStuck {
		for other := range s.runs { // any one: map order is random
			delete(s.runs, other)
			break
		}
	}
	s.runs[recipient]++
	return s.runs[recipient]
}

// count is the recipients whose last stuckAfter visits or more failed.
func (s *stuckSweeps) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, runs := range s.runs {
		if runs >= stuckAfter {
			n++
		}
	}
	return n
}

// StuckSweeps is how many recipients' last visits of retention on this
// instance failed or conflicted, stuckAfter in a row or more (a gauge:
// messagehub_retention_stuck_recipients).
func (r *Hub) StuckSweeps() int { return r.stuck.count() }

// sweepFailed counts a failed or conflicting visit of the recipient and
// warns once stuckAfter came in a row, and again each time the count
// doubles, so that a recipient stuck for good is named without a line a
// pass.
func (r *Hub) sweepFailed(recipient string, err error) {
	n := r.stuck.failed(recipient)
	if n >= stuckAfter && n%stuckAfter == 0 && (n/stuckAfter)&(n/stuckAfter-1) == 0 {
		r.logger.Warn(SweepKeepsFailing, "recipient", recipient, "visits", n, "err", err)
	}
}

// sweepRecipient removes what retention allows of one recipient. It reads
// the recipient's catalog and only the bundles that are due or new
// (LoadRetention), and decides from them whenever it can: a fully
// acknowledged drawer whose last bundle (the one covering its end; every
// bundle covering it was dequeued before) is due goes at once. Only when a
// drawer must leave the catalog while bundles may still read it, or a due
// bundle names a drawer the catalog no longer holds, does it read every
// retained bundle (DequeuedBundles) and decide on all of them.
func (r *Hub) sweepRecipient(ctx context.Context, recipient string, cutoff, since time.Time) error {
	st, err := r.store.LoadRetention(ctx, recipient, cutoff, since)
	if err != nil {
		return err
	}
	if st.DueBefore.After(cutoff) {
		cutoff = st.DueBefore // the store's bound on what one recipient retains
	}
	// A cabinet bounded to one drawer starts afresh once drained: its last
	// drawer kept would leave no room for a save that needs a new one.
	keepDrained := r.opts.MaxCabinetDrawers > 1
	movedBefore := r.opts.Now().Add(-cabinetDropDelay)
	sw, settled := sweepOfDue(recipient, st, cutoff, keepDrained, movedBefore)
	if !settled {
		all, err := r.store.DequeuedBundles(ctx, recipient)
		if err != nil {
			return err
		}
		st.Bundles = all
		sw = sweepOfAll(recipient, st, cutoff, keepDrained, movedBefore)
	}
	if !sw.revisit.IsZero() {
		// Nothing else may bring a pass back to the recipient before a
		// bundle of it is due: come back for the cabinet once it may go,
		// looking back as far, so that the bundles this visit read as new
		// are read again and the visit decides on them alone.
		r.revisits.note(recipient, sw.revisit, since)
	}
	if len(sw.Bundles) == 0 && len(sw.Drawers) == 0 && len(sw.DeleteEntries) == 0 && len(sw.Entries) == 0 && len(sw.Done) == 0 {
		return nil
	}
	if r.opts.ForgetBundles != nil && len(sw.Bundles) > 0 {
		ids := make([]string, len(sw.Bundles))
		for i, rec := range sw.Bundles {
			ids[i] = rec.ID
		}
		asRead := func(ctx context.Context) error { return r.store.BundlesAsRead(ctx, recipient, sw.Bundles) }
		if err := r.opts.ForgetBundles(ctx, recipient, ids, asRead); err != nil {
			return err
		}
	}
	return r.store.ApplySweep(ctx, sw.Sweep)
}

// expired lists the bundles past their retention.
func expired(bundles []bundle.Record, cutoff time.Time) []bundle.Record {
	var out []bundle.Record
	for _, rec := range bundles {
		if (rec.State == bundle.Released && rec.ReleasedAt.Before(cutoff)) ||
			(rec.State == bundle.Dequeued && rec.DequeuedAt.Before(cutoff)) {
			out = append(out, rec)
		}
	}
	return out
}

// sweepOfDue plans the sweep from the due and new bundles and the kept
// drawers that are due. A fully acknowledged drawer of an entry goes at
// once when the bundle covering its last position is due with a margin
// for clocks (every other bundle covering it was dequeued before that
// one, so it is due too); when that bundle is new, the drawer leaves the
// entry and is kept until that bundle is due (Sweep.Keep), so that the
// entry stays small while retained bundles still read from the drawer;
// but a drained cabinet's last drawer stays in its entry, to be appended
// to, while it is younger than the retention (keepDrainedCabinet).
// Bundles that read back through the entry (their records name no
// drawers) keep theirs in it: the new ones are seen here; older ones span
// more runs than a record names, so an entry of no more runs than that
// holds none of them. Settled is false, and every retained bundle is
// needed (sweepOfAll), when a drawer must leave an entry of more runs, or
// the bundle covering its end is not among those read. A drained cabinet
// whose cursor moved at or after movedBefore stays (dropWhenStill).
func sweepOfDue(recipient string, st store.RetentionState, cutoff time.Time, keepDrained bool, movedBefore time.Time) (sw sweepPlan, settled bool) {
	sw = sweepPlan{Sweep: store.Sweep{Recipient: recipient, Bundles: expired(st.Bundles, cutoff)}}
	settledBy := cutoff.Add(-sweepSkew)
	// last finds a dequeued bundle read that covers the drawer's end: one
	// that names it, or one that names none and was dequeued after the
	// drawer's last item was saved (not a bundle of the same positions
	// before the cabinet restarted).
	last := func(key catalog.Key, d drawer.Meta) (bundle.Record, bool) {
		for _, rec := range st.Bundles {
			if rec.State == bundle.Dequeued && rec.Origin == key.Origin && rec.ContentType == key.ContentType &&
				rec.Start < d.End() && d.End() <= rec.End &&
				(slices.ContainsFunc(rec.Drawers, func(m drawer.Meta) bool { return m.ID == d.ID }) ||
					(rec.Drawers == nil && rec.DequeuedAt.UnixMilli() >= d.LastAt)) {
				return rec, true
			}
		}
		return bundle.Record{}, false
	}
	var throughEntry []catalog.Span
	for _, rec := range st.Bundles {
		if rec.State == bundle.Dequeued && rec.Drawers == nil && !rec.DequeuedAt.Before(cutoff) {
			throughEntry = append(throughEntry, spanOf(rec))
		}
	}
	for e, cur := range cabinets(st) {
		out, drop := catalog.Removable(e, cur, throughEntry)
		if drop && keepDrained {
			out, drop = keepDrainedCabinet(e, out, cutoff, func(id string) bool {
				rec, found := last(e.Key(), lastRun(e.Drawers, id))
				return found && !rec.DequeuedAt.Before(settledBy)
			})
		}
		out, drop = dropWhenStill(&sw, e, cur, out, drop, movedBefore)
		keep := store.Kept{Cabinet: e.Key()}
		for _, d := range out {
			rec, found := last(e.Key(), lastRun(e.Drawers, d.ID))
			switch {
			case !found:
				return sweepPlan{}, false
			case rec.DequeuedAt.Before(settledBy):
				free(&sw.Sweep, d.ID, pagesEnd(e))
			case len(e.Drawers) > maxDetachedDrawers:
				return sweepPlan{}, false
			default:
				keep.Drawers = append(keep.Drawers, d.ID)
				if until := rec.DequeuedAt.Add(sweepSkew); until.After(keep.Until) {
					keep.Until = until // the others covering it, by other clocks
				}
			}
		}
		removeFromEntry(&sw.Sweep, e, cur, out, drop, keep)
	}
	addKept(&sw.Sweep, st.Kept)
	return sw, true
}

// keepDrainedCabinet decides on a cabinet whose positions are all
// acknowledged (out its drawers to remove, the entry to drop): when its last
// drawer was opened at or after cutoff and a retained bundle still reads it
// (retained, asked of that drawer's id), the cabinet stays, its entry and
// cursor with it, and its last drawer stays in the entry, to be appended
// to; only its other drawers leave. It returns out and whether the entry
// goes. A recipient that drains its cabinets between saves would otherwise
// have each entry and cursor deleted by the pass after every Dequeue and
// created again by the next Save and Peek, with a kept record and a new
// drawer for every Save (TestSteadyStateCostOfSavesSpreadOverManyRecipients).
// A drawer opened before cutoff leaves with the rest, so that no
// acknowledged notification outlives its retention by more than the
// retention again, however slowly its drawer fills; the cabinet goes whole
// once the bundle reading its last drawer is due.
func keepDrainedCabinet(e catalog.Entry, out []drawer.Meta, cutoff time.Time, retained func(drawerID string) bool) ([]drawer.Meta, bool) {
	if len(e.Drawers) == 0 {
		return out, true
	}
	lastID := e.Drawers[len(e.Drawers)-1].ID
	first := e.Drawers[slices.IndexFunc(e.Drawers, func(d drawer.Meta) bool { return d.ID == lastID })] // its first run
	if first.FirstAt < cutoff.UnixMilli() || !retained(lastID) {
		return out, true
	}
	return withoutLast(e, out), false
}

// dropWhenStill keeps a cabinet that would go whole (drop) while its cursor
// moved at or after movedBefore (cabinetDropDelay): it is treated as one
// not drained, its last drawer staying in the entry and its other drawers
// in out leaving; sw notes when a later visit may take it out
// (sweepPlan.revisit). It returns out and whether the entry goes.
func dropWhenStill(sw *sweepPlan, e catalog.Entry, cur catalog.Cursor, out []drawer.Meta, drop bool, movedBefore time.Time) ([]drawer.Meta, bool) {
	if !drop || cur.MovedAt < movedBefore.UnixMilli() {
		return out, drop
	}
	if at := time.UnixMilli(cur.MovedAt).Add(cabinetDropDelay + time.Millisecond); at.After(sw.revisit) {
		sw.revisit = at
	}
	return withoutLast(e, out), false
}

// sweepPlan is a visit's sweep, and when it kept a drained cabinet only
// because its cursor moved lately (dropWhenStill), the time from which a
// visit takes that cabinet out (the latest, of several).
type sweepPlan struct {
	store.Sweep
	revisit time.Time
}

// maxRevisits bounds the recipients a pass is asked to come back to; one
// forgotten waits for its next dequeue or due bundle.
const maxRevisits = 10_000

// revisits holds the recipients a visit asked a later pass to come back
// to: from when, and the since of that visit. In memory, on the instance
// that sweeps: a new holder of the sweep lease, or a pass that stops
// early, leaves them to the index of dequeue times.
type revisits struct {
	mu sync.Mutex
	by map[string]revisit
}

type revisit struct{ at, since time.Time }

// note asks a pass from at on to visit the recipient, looking back to
// since.
func (v *revisits) note(recipient string, at, since time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.by == nil {
		v.by = map[string]revisit{}
	}
	old, ok := v.by[recipient]
	if !ok && len(v.by) >= maxRevisits {
		return
	}
	if ok && old.since.Before(since) {
		since = old.since
	}
	if old.at.After(at) {
		at = old.at
	}
	v.by[recipient] = revisit{at: at, since: since}
}

// take returns, and forgets, the recipients whose time has come by now,
// each with its since.
func (v *revisits) take(now time.Time) map[string]time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string]time.Time{}
	for recipient, rv := range v.by {
		if !now.Before(rv.at) {
			out[recipient] = rv.since
			delete(v.by, recipient)
		}
	}
	return out
}

// withoutLast is out without the cabinet's last drawer, which stays in its
// entry to be appended to.
func withoutLast(e catalog.Entry, out []drawer.Meta) []drawer.Meta {
	if len(e.Drawers) == 0 {
		return out
	}
	lastID := e.Drawers[len(e.Drawers)-1].ID
	return slices.DeleteFunc(slices.Clone(out), func(d drawer.Meta) bool { return d.ID == lastID })
}

// spanOf is the positions of a cabinet a bundle covers.
func spanOf(rec bundle.Record) catalog.Span {
	return catalog.Span{Key: catalog.Key{Origin: rec.Origin, ContentType: rec.ContentType}, Start: rec.Start, End: rec.End}
}

// cabinets pairs each entry with its cabinet's cursor, a new one (no
// Version) when none is stored.
func cabinets(st store.RetentionState) iter.Seq2[catalog.Entry, catalog.Cursor] {
	return func(yield func(catalog.Entry, catalog.Cursor) bool) {
		cursors := make(map[catalog.Key]catalog.Cursor)
		for _, c := range st.Cursors {
			cursors[c.Key()] = c
		}
		for _, e := range st.Entries {
			cur, ok := cursors[e.Key()]
			if !ok {
				cur = catalog.Cursor{Origin: e.Origin, ContentType: e.ContentType}
			}
			if !yield(e, cur) {
				return
			}
		}
	}
}

// free adds a drawer the catalog names to those the sweep deletes, with
// the end below which its pages go (pagesEnd).
func free(sw *store.Sweep, id string, end int64) {
	sw.Drawers = append(sw.Drawers, id)
	if sw.DrawerEnds == nil {
		sw.DrawerEnds = map[string]int64{}
	}
	sw.DrawerEnds[id] = end
}

// pagesEnd is where the pages of a freed drawer of e stop being the
// sweep's: the positions e had handed out as read, whatever the cursor
// says. Below them, a freed drawer holds the runs the sweep saw
// acknowledged and due, and holes, whose pages (a failed save's that its
// rollback could not delete) go with it: the cursor stops short of a hole
// at the drawer's end, and those pages would be left to nothing once the
// drawer leaves the catalog. At or beyond them, a save appended meanwhile:
// also one a cursor read after the entry shows acknowledged (a load
// answered in pages, each of another moment), whose bundle the sweep did
// not weigh and may be retained.
func pagesEnd(e catalog.Entry) int64 {
	return e.Total
}

// removeFromEntry adds the change of one entry to the sweep: deleted with
// its cursor when drop, else rewritten without the drawers in out; keep
// holds those of them kept for retained bundles.
func removeFromEntry(sw *store.Sweep, e catalog.Entry, cur catalog.Cursor, out []drawer.Meta, drop bool, keep store.Kept) {
	switch {
	case drop:
		sw.DeleteEntries = append(sw.DeleteEntries, e)
		if cur.Version != "" {
			sw.DeleteCursors = append(sw.DeleteCursors, cur)
		}
	case len(out) > 0:
		e.Drawers = slices.DeleteFunc(slices.Clone(e.Drawers), func(d drawer.Meta) bool {
			return slices.ContainsFunc(out, func(g drawer.Meta) bool { return g.ID == d.ID })
		})
		sw.Entries = append(sw.Entries, e)
	}
	if len(keep.Drawers) > 0 {
		sw.Keep = append(sw.Keep, keep)
	}
}

// addKept adds the due kept drawers to the sweep.
func addKept(sw *store.Sweep, kept []store.Kept) {
	for _, k := range kept {
		for _, d := range k.Drawers {
			if !slices.Contains(sw.Drawers, d) {
				sw.Drawers = append(sw.Drawers, d)
			}
		}
		if k.ID != "" {
			sw.Done = append(sw.Done, k.ID)
		}
	}
}

// lastRun is the last run of the drawer among runs.
func lastRun(runs []drawer.Meta, id string) drawer.Meta {
	var last drawer.Meta
	for _, d := range runs {
		if d.ID == id && d.End() >= last.End() {
			last = d
		}
	}
	return last
}

// sweepOfAll plans the sweep from every retained bundle of the recipient.
// Retained bundles that read back through the entry keep their drawers in
// it; those whose records name their drawers (dequeued since they do) only
// keep the drawers, out of the entry, so that it stays small. A drained
// cabinet whose cursor moved at or after movedBefore stays (dropWhenStill).
func sweepOfAll(recipient string, st store.RetentionState, cutoff time.Time, keepDrained bool, movedBefore time.Time) sweepPlan {
	sw := sweepPlan{Sweep: store.Sweep{Recipient: recipient, Bundles: expired(st.Bundles, cutoff)}}
	var throughEntry []catalog.Span
	detached := map[string]time.Time{} // drawers retained records name: the last one's dequeue
	for _, rec := range st.Bundles {
		switch {
		case rec.State == bundle.Released, rec.DequeuedAt.Before(cutoff):
			// It reads nothing back (any more), so it keeps no drawer: a
			// released record only keeps its id used until the retention
			// has passed, and the drawers an expired one named are in an
			// entry or kept (Sweep.Keep), and go from there.
		case rec.Drawers != nil:
			for _, d := range rec.Drawers {
				if rec.DequeuedAt.After(detached[d.ID]) {
					detached[d.ID] = rec.DequeuedAt
				}
			}
		default:
			throughEntry = append(throughEntry, spanOf(rec))
		}
	}
	for e, cur := range cabinets(st) {
		out, dropEntry := catalog.Removable(e, cur, throughEntry)
		if dropEntry && keepDrained {
			out, dropEntry = keepDrainedCabinet(e, out, cutoff, func(id string) bool {
				_, ok := detached[id]
				return ok
			})
		}
		out, dropEntry = dropWhenStill(&sw, e, cur, out, dropEntry, movedBefore)
		keep := store.Kept{Cabinet: e.Key()}
		for _, d := range out {
			if until, ok := detached[d.ID]; ok { // it leaves the entry, kept for the records that name it
				keep.Drawers = append(keep.Drawers, d.ID)
				if until.After(keep.Until) {
					keep.Until = until
				}
				continue
			}
			free(&sw.Sweep, d.ID, pagesEnd(e))
		}
		removeFromEntry(&sw.Sweep, e, cur, out, dropEntry, keep)
	}
	addKept(&sw.Sweep, st.Kept)
	return sw
}
