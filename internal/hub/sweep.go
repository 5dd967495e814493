package hub

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// sweepSpread is the part of the interval a pass is spread over: a pass
// paces its recipients instead of bursting, and ends before the next.
const sweepSpread = 3 // quarters

func (r *Hub) sweepLoop(ctx context.Context) {
	holder := uuid.NewString()
	timer := time.NewTimer(jittered(r.opts.SweepInterval))
	defer timer.Stop()
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
			if err := r.sweepTurn(ctx, holder); err != nil && ctx.Err() == nil {
				r.logger.Error("retention sweep failed", "err", err)
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

// sweepTurn runs one pass if this instance may: on a shared store only the
// holder of the lease sweeps, at low priority. The lease outlasts the pass
// and is extended as the pass goes on; a holder that dies frees it after two
// intervals.
func (r *Hub) sweepTurn(ctx context.Context, holder string) error {
	interval := r.opts.SweepInterval
	hold := func(ctx context.Context) (bool, error) { return r.store.HoldSweepLease(ctx, holder, 2*interval) }
	ctx = r.store.LowPriority(ctx)
	if held, err := hold(ctx); err != nil || !held {
		return err
	}
	return r.sweepPaced(ctx, interval*sweepSpread/4, hold)
}

// SweepNow runs one retention pass at once, without waiting for the
// sweeper's turn (tests; operators who want the space back).
func (r *Hub) SweepNow(ctx context.Context) error { return r.sweep(ctx) }

// sweep removes what retention allows for every recipient at once.
func (r *Hub) sweep(ctx context.Context) error { return r.sweepPaced(ctx, 0, nil) }

// sweepPaced removes what retention allows for every recipient: dequeued
// and released bundles older than the retention, and fully acknowledged
// drawers that no retained bundle covers. Nothing unacknowledged is ever
// removed. The recipients are spread evenly over spread; hold, when set, is
// asked again every half of it and ends the pass when the lease is lost.
func (r *Hub) sweepPaced(ctx context.Context, spread time.Duration, hold func(context.Context) (bool, error)) error {
	var recipients []string
	if err := r.store.Recipients(ctx, func(recipient string) error {
		recipients = append(recipients, recipient)
		return nil
	}); err != nil {
		return err
	}
	cutoff := r.opts.Now().Add(-r.opts.Retention)
	var pause time.Duration
	if len(recipients) > 0 {
		pause = spread / time.Duration(len(recipients))
	}
	held := time.Now()
	for i, recipient := range recipients {
		if i > 0 && pause > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(pause):
			}
		}
		if hold != nil && time.Since(held) > spread/2 {
			if ok, err := hold(ctx); err != nil || !ok {
				return err // another instance sweeps now
			}
			held = time.Now()
		}
		err := r.sweepRecipient(ctx, recipient, cutoff)
		if err != nil && !errors.Is(err, store.ErrConflict) { // a conflict: someone wrote meanwhile; the next pass looks again
			return err
		}
	}
	return nil
}

func (r *Hub) sweepRecipient(ctx context.Context, recipient string, cutoff time.Time) error {
	state, err := r.store.LoadRecipient(ctx, recipient)
	if err != nil {
		return err
	}
	dequeued, err := r.store.DequeuedBundles(ctx, recipient)
	if err != nil {
		return err
	}
	sw := store.Sweep{Recipient: recipient}
	// Retained bundles that read back through the entry keep their drawers
	// in it; those whose records name their drawers (dequeued since they
	// do) only keep the drawers, out of the entry, so that it stays small.
	var throughEntry []catalog.Span
	detached := map[string]bool{}    // drawers retained records name
	var expiredDrawers []drawer.Meta // drawers expired records name
	for _, rec := range slices.Concat(state.Pending, dequeued) {
		if rec.State == bundle.Released {
			// It reads nothing back, so it keeps no drawer; its record
			// only keeps its id used until the retention has passed.
			if rec.ReleasedAt.Before(cutoff) {
				sw.Bundles = append(sw.Bundles, rec.ID)
			}
			continue
		}
		if rec.State == bundle.Dequeued && rec.DequeuedAt.Before(cutoff) {
			sw.Bundles = append(sw.Bundles, rec.ID)
			expiredDrawers = append(expiredDrawers, rec.Drawers...)
			continue
		}
		if rec.Drawers != nil {
			for _, d := range rec.Drawers {
				detached[d.ID] = true
			}
			continue
		}
		throughEntry = append(throughEntry, catalog.Span{
			Key: catalog.Key{Origin: rec.Origin, ContentType: rec.ContentType}, Start: rec.Start, End: rec.End,
		})
	}
	cursors := make(map[catalog.Key]catalog.Cursor)
	for _, c := range state.Cursors {
		cursors[c.Key()] = c
	}
	inEntries := map[string]bool{}
	for _, e := range state.Entries {
		cur, ok := cursors[e.Key()]
		if !ok {
			cur = catalog.Cursor{Origin: e.Origin, ContentType: e.ContentType}
		}
		out, dropEntry := catalog.Removable(e, cur, throughEntry)
		for _, d := range e.Drawers {
			inEntries[d.ID] = true
		}
		for _, d := range out {
			if !detached[d.ID] { // else it leaves the entry, kept for the records that name it
				sw.Drawers = append(sw.Drawers, d.ID)
			}
		}
		switch {
		case dropEntry:
			sw.DeleteEntries = append(sw.DeleteEntries, e)
			if ok {
				sw.DeleteCursors = append(sw.DeleteCursors, cur)
			}
		case len(out) > 0:
			e.Drawers = slices.DeleteFunc(slices.Clone(e.Drawers), func(d drawer.Meta) bool {
				return slices.ContainsFunc(out, func(g drawer.Meta) bool { return g.ID == d.ID })
			})
			sw.Entries = append(sw.Entries, e)
		}
	}
	// A drawer out of the entry goes with the last retained record naming it.
	for _, d := range expiredDrawers {
		if !inEntries[d.ID] && !detached[d.ID] && !slices.Contains(sw.Drawers, d.ID) {
			sw.Drawers = append(sw.Drawers, d.ID)
		}
	}
	if len(sw.Bundles) == 0 && len(sw.Drawers) == 0 && len(sw.DeleteEntries) == 0 && len(sw.Entries) == 0 {
		return nil
	}
	if r.opts.ForgetBundles != nil && len(sw.Bundles) > 0 {
		if err := r.opts.ForgetBundles(ctx, recipient, sw.Bundles); err != nil {
			return err
		}
	}
	return r.store.ApplySweep(ctx, sw)
}
