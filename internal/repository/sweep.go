package repository

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/drawer"
)

func (r *Repository) sweepLoop(ctx context.Context) {
	t := time.NewTicker(r.opts.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.sweep(ctx); err != nil && ctx.Err() == nil {
				r.logger.Error("retention sweep failed", "err", err)
			}
		}
	}
}

// SweepNow runs one retention pass at once, without waiting for the
// sweeper's turn (tests; operators who want the space back).
func (r *Repository) SweepNow(ctx context.Context) error { return r.sweep(ctx) }

// sweep removes what retention allows for every recipient: dequeued bundles
// older than the retention, and fully acknowledged drawers that no retained
// bundle covers. Nothing unacknowledged is ever removed.
func (r *Repository) sweep(ctx context.Context) error {
	cutoff := r.opts.Now().Add(-r.opts.Retention)
	return r.store.Recipients(ctx, func(recipient string) error {
		err := r.sweepRecipient(ctx, recipient, cutoff)
		if errors.Is(err, ErrConflict) {
			return nil // someone wrote meanwhile; the next sweep looks again
		}
		return err
	})
}

func (r *Repository) sweepRecipient(ctx context.Context, recipient string, cutoff time.Time) error {
	state, err := r.store.LoadRecipient(ctx, recipient)
	if err != nil {
		return err
	}
	dequeued, err := r.store.DequeuedBundles(ctx, recipient)
	if err != nil {
		return err
	}
	sw := Sweep{Recipient: recipient}
	var retained []catalog.Span
	for _, rec := range slices.Concat(state.Pending, dequeued) {
		if rec.State == bundle.Dequeued && rec.DequeuedAt.Before(cutoff) {
			sw.Bundles = append(sw.Bundles, rec.ID)
			continue
		}
		retained = append(retained, catalog.Span{
			Key: catalog.Key{Origin: rec.Origin, ContentType: rec.ContentType}, Start: rec.Start, End: rec.End,
		})
	}
	cursors := make(map[catalog.Key]catalog.Cursor)
	for _, c := range state.Cursors {
		cursors[c.Key()] = c
	}
	for _, e := range state.Entries {
		cur, ok := cursors[e.Key()]
		if !ok {
			cur = catalog.Cursor{Origin: e.Origin, ContentType: e.ContentType}
		}
		gone, dropEntry := catalog.Removable(e, cur, retained)
		for _, d := range gone {
			sw.Drawers = append(sw.Drawers, d.ID)
		}
		switch {
		case dropEntry:
			sw.DeleteEntries = append(sw.DeleteEntries, e)
			if ok {
				sw.DeleteCursors = append(sw.DeleteCursors, cur)
			}
		case len(gone) > 0:
			e.Drawers = slices.DeleteFunc(slices.Clone(e.Drawers), func(d drawer.Meta) bool {
				return slices.ContainsFunc(gone, func(g drawer.Meta) bool { return g.ID == d.ID })
			})
			e.DropHolesBefore(e.Drawers[0].Start)
			sw.Entries = append(sw.Entries, e)
		}
	}
	if len(sw.Bundles) == 0 && len(sw.Drawers) == 0 && len(sw.DeleteEntries) == 0 {
		return nil
	}
	if r.opts.ForgetBundles != nil && len(sw.Bundles) > 0 {
		if err := r.opts.ForgetBundles(ctx, recipient, sw.Bundles); err != nil {
			return err
		}
	}
	return r.store.ApplySweep(ctx, sw)
}
