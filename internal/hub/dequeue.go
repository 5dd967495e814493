package hub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// Dequeue acknowledges exactly the notifications of a pending bundle of the
// recipient. A bundle that does not exist, belongs to someone else or was
// already dequeued is not found.
func (r *Hub) Dequeue(ctx context.Context, recipient, bundleID string) error {
	if err := r.begin(); err != nil {
		return err
	}
	defer r.ops.Done()
	first := true
	_, err := retry(ctx, func() (struct{}, error) {
		err := r.dequeueOnce(ctx, recipient, bundleID, first)
		first = false
		return struct{}{}, err
	})
	return err
}

// dequeueOnce acknowledges the bundle from one reading of the recipient's
// state. The first attempt's reading may lag (store.MayLag, one request
// less on a remote store), or be the bundle as the store created it
// itself (store.OwnBundle, no request): everything it leads to writing is
// conditional on the bundle's and the cursor's versions, so a stale
// reading ends in ErrConflict and the retry reads fresh. Only "no such
// pending bundle" is taken from a fresh reading, as a lagging one may not
// have the bundle yet.
func (r *Hub) dequeueOnce(ctx context.Context, recipient, bundleID string, mayLag bool) error {
	var opts []store.LoadOption
	if mayLag {
		opts = append(opts, store.MayLag, store.OwnBundle(bundleID))
	}
	state, err := r.store.LoadRecipient(ctx, recipient, opts...)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(state.Pending, func(rec bundle.Record) bool { return rec.ID == bundleID })
	if i < 0 && mayLag {
		return r.dequeueOnce(ctx, recipient, bundleID, false)
	}
	if i < 0 {
		return fmt.Errorf("%w: no pending bundle %s", domain.ErrNotFound, bundleID)
	}
	_, err = r.acknowledge(ctx, recipient, state, state.Pending[i])
	return err
}

// acknowledge dequeues rec, a pending bundle of the recipient's state:
// marks it dequeued and moves its cabinet's cursor past it in one
// conditional write (with the notice to its domain when it gets one), and
// returns it as dequeued.
func (r *Hub) acknowledge(ctx context.Context, recipient string, state store.RecipientState, rec bundle.Record) (bundle.Record, error) {
	cursor := catalog.Cursor{Origin: rec.Origin, ContentType: rec.ContentType}
	if j := slices.IndexFunc(state.Cursors, func(c catalog.Cursor) bool { return c.Key() == cursor.Key() }); j >= 0 {
		cursor = state.Cursors[j]
	}
	if cursor.Acked != rec.Start {
		// While rec is pending its cursor is at its start, and only rec's
		// dequeue moves it: the state holds rec and its cursor as of two
		// moments (a store that answers a load in pages, each from another
		// replica), a stale read, which the retry reads again.
		return bundle.Record{}, fmt.Errorf("%w: bundle %s starts at %d but its cabinet is acknowledged up to %d", store.ErrConflict, rec.ID, rec.Start, cursor.Acked)
	}
	drawers, ok := detach(state, rec)
	if !ok {
		// Its entry was read at another moment than rec (the pages of
		// one load): a stale read, which the retry reads again.
		return bundle.Record{}, fmt.Errorf("%w: bundle %s ends at %d beyond its cabinet's entry as read", store.ErrConflict, rec.ID, rec.End)
	}
	rec.State = bundle.Dequeued
	rec.DequeuedAt = r.opts.Now()
	rec.Drawers = drawers
	rec.Notice = r.opts.Notices != nil && r.opts.Notices(rec.Origin)
	cursor.Acked = rec.End
	cursor.HeadSeq = rec.NextSeq
	cursor.MovedAt = rec.DequeuedAt.UnixMilli() // holds back retention's drop of the cabinet (cabinetDropDelay)
	if err := r.store.Acknowledge(ctx, recipient, rec, cursor); err != nil {
		return bundle.Record{}, outcome("dequeue", rec, err)
	}
	if rec.Notice && r.opts.OnNotice != nil {
		r.opts.OnNotice(store.Notice{Recipient: recipient, BundleID: rec.ID, Origin: rec.Origin, DequeuedAt: rec.DequeuedAt})
	}
	return rec, nil
}

// OutcomeUnknown is the error of a bundle's dequeue or release whose write
// failed without saying whether it applied: its answer was lost and the
// store could not tell (a remote store's look on its primary failed too),
// or the call ended while it was written. Bundle, as read before the write,
// may be dequeued or released: a repeat of the call finds it so and does
// nothing, so this error is the only word of that change (the audit log
// records it).
type OutcomeUnknown struct {
	// Change is what was written: "dequeue" or "release".
	Change string
	Bundle bundle.Record
	Err    error
}

func (e *OutcomeUnknown) Error() string {
	return fmt.Sprintf("the %s of bundle %s may have applied (its outcome is unknown): %v", e.Change, e.Bundle.ID, e.Err)
}

func (e *OutcomeUnknown) Unwrap() error { return e.Err }

// outcome is the error of a failed write of change to rec: the store's own
// refusal when it wrote nothing (a conflict, its limits, a full disk or
// partition, its credentials), else OutcomeUnknown.
func outcome(change string, rec bundle.Record, err error) error {
	for _, refused := range []error{store.ErrConflict, store.ErrTooLarge, domain.ErrStorageFull, domain.ErrStoreRefuses} {
		if errors.Is(err, refused) {
			return err
		}
	}
	return &OutcomeUnknown{Change: change, Bundle: rec, Err: err}
}

// DequeuedBundle returns a dequeued bundle of the recipient as it was
// dequeued; ErrNotFound once retention removed it. It reads the one record.
func (r *Hub) DequeuedBundle(ctx context.Context, recipient, bundleID string) (*domain.Bundle, error) {
	return r.dequeuedBundle(ctx, recipient, bundleID, time.Time{})
}

// NoticedBundle returns the dequeued bundle a notice tells of, for telling
// its domain: ErrNotFound once retention removed it, and when the record is
// of another dequeue under the same id (a bundle id is free again once its
// record is gone), so that a domain is told of each dequeue by its own
// notice only.
func (r *Hub) NoticedBundle(ctx context.Context, n store.Notice) (*domain.Bundle, error) {
	return r.dequeuedBundle(ctx, n.Recipient, n.BundleID, n.DequeuedAt)
}

// dequeuedBundle reads the bundle dequeued at the microsecond of at (any
// time when at is zero).
func (r *Hub) dequeuedBundle(ctx context.Context, recipient, bundleID string, at time.Time) (*domain.Bundle, error) {
	if err := r.begin(); err != nil {
		return nil, err
	}
	defer r.ops.Done()
	return retry(ctx, func() (*domain.Bundle, error) {
		rec, err := r.store.DequeuedBundle(ctx, recipient, bundleID)
		if err != nil {
			return nil, err
		}
		if !at.IsZero() && rec.DequeuedAt.UnixMicro() != at.UnixMicro() {
			return nil, fmt.Errorf("%w: bundle %s was dequeued again under its id since", domain.ErrNotFound, bundleID)
		}
		state, err := r.store.LoadRecipient(ctx, recipient)
		if err != nil {
			return nil, err
		}
		return r.materialize(ctx, recipient, state, rec)
	})
}
