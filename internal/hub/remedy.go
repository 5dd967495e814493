package hub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// The operators' two remedies (the Admin API). Both go through the store's
// conditional writes, as Peek and Dequeue do, and race with the actor's own
// calls like any other writer.

// ReleaseBundle gives up a pending bundle of the recipient and returns it as
// it was pending. Nothing is acknowledged: the group's next Peek cuts a
// bundle afresh from the cabinet's cursor. The released id stays used while
// retention keeps its record: Dequeue does not find it, and a Peek naming it
// is refused as a used id (ErrBundleIDInUse) rather than given other
// notifications under an id the actor already holds.
func (r *Hub) ReleaseBundle(ctx context.Context, recipient, bundleID string) (bundle.Record, error) {
	if err := r.begin(); err != nil {
		return bundle.Record{}, err
	}
	defer r.ops.Done()
	// The bundle the first attempt finds pending is the one released: a
	// retry (after a conflict) that finds a later bundle pending under the
	// id (the first was dequeued or released, retention removed it and the
	// actor peeked with the id again) releases nothing, since the operator
	// asked about the bundle as it stood when the call began.
	var created time.Time
	rec, err := retry(ctx, func() (bundle.Record, error) {
		state, err := r.store.LoadRecipient(ctx, recipient)
		if err != nil {
			return bundle.Record{}, err
		}
		i := slices.IndexFunc(state.Pending, func(rec bundle.Record) bool { return rec.ID == bundleID })
		if i < 0 {
			return bundle.Record{}, r.notPending(ctx, recipient, bundleID)
		}
		switch {
		case created.IsZero():
			created = state.Pending[i].CreatedAt
		case !state.Pending[i].CreatedAt.Equal(created):
			return bundle.Record{}, fmt.Errorf("%w: bundle %s (created at %s) went while it was being released; the bundle pending under its id now is a later one (created at %s), left pending: nothing was released",
				domain.ErrNotFound, bundleID, created.UTC().Format(timeFormat), state.Pending[i].CreatedAt.UTC().Format(timeFormat))
		}
		// Its document is never served again, and goes first: a released
		// record may leave by the store's own expiry (Cosmos DB's ttl), which
		// no sweep sees, freeing the id for a later bundle that must not be
		// served this one's document. A failure changes nothing; a release
		// that fails after it leaves the bundle pending, its document built
		// again by its next content peek. It goes only while the bundle is
		// pending as read: the bundle may have been dequeued and removed by
		// retention since, and a later bundle under its id have stored its
		// document, which stays (the conflict reads the state again).
		if r.opts.ForgetBundles != nil {
			asRead := r.pendingAsRead(recipient, bundleID, state.Pending[i].Version)
			if err := r.opts.ForgetBundles(ctx, recipient, []string{bundleID}, asRead); err != nil {
				return bundle.Record{}, fmt.Errorf("%w: nothing was released: %w", domain.ErrUnavailable, err)
			}
		}
		released := state.Pending[i]
		released.State, released.ReleasedAt = bundle.Released, r.opts.Now()
		if err := r.store.ReleaseBundle(ctx, recipient, released); err != nil {
			return bundle.Record{}, outcome("release", state.Pending[i], err)
		}
		return state.Pending[i], nil
	})
	// A write whose outcome is unknown may have released the bundle, and
	// the operator's repeat finds it released and removes nothing: the
	// removal below is made for it too.
	unknown := new(OutcomeUnknown)
	if err != nil && !errors.As(err, &unknown) || r.opts.ForgetBundles == nil {
		return rec, err
	}
	// A build whose domain answered between the removal above and the
	// release's write stored the document while the bundle was still
	// pending, and kept it. A build that stores it after this removal finds
	// the bundle released and removes it itself. It goes only while no
	// bundle is pending under the id: the released record may have left
	// (its ttl, retention) and a later bundle under the id stored its
	// document meanwhile, which stays; so does the bundle's own when a
	// release of unknown outcome did not apply.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), forgetAgainTimeout)
	defer cancel()
	ferr := r.opts.ForgetBundles(fctx, recipient, []string{bundleID}, r.pendingAsRead(recipient, bundleID, ""))
	switch {
	case err != nil:
		if ferr != nil && !errors.Is(ferr, store.ErrConflict) {
			r.logger.Error("the document of a bundle whose release may have applied could not be removed; remove it if the bundle is released",
				"recipient", recipient, "bundle", bundleID, "error", ferr)
		}
	case errors.Is(ferr, store.ErrConflict):
		r.logger.Info("a later bundle is pending under a released bundle's id; the document stored under it is its own and stays",
			"recipient", recipient, "bundle", bundleID)
	case ferr != nil:
		r.logger.Error("the document of a released bundle could not be removed; remove it before its id is used again",
			"recipient", recipient, "bundle", bundleID, "error", ferr)
	}
	return rec, err
}

// pendingAsRead is the check a release makes before it removes a
// document under bundleID (Options.ForgetBundles' asRead): the bundle
// pending under the id is still the one at version, or none is when
// version is empty; else store.ErrConflict. It loads the recipient's state,
// which shows every write made before it on any instance.
func (r *Hub) pendingAsRead(recipient, bundleID, version string) func(context.Context) error {
	return func(ctx context.Context) error {
		state, err := r.store.LoadRecipient(ctx, recipient)
		if err != nil {
			return err
		}
		now := ""
		if i := slices.IndexFunc(state.Pending, func(rec bundle.Record) bool { return rec.ID == bundleID }); i >= 0 {
			now = state.Pending[i].Version
		}
		if now != version {
			return fmt.Errorf("%w: the bundle pending under id %s changed since it was read", store.ErrConflict, bundleID)
		}
		return nil
	}
}

// forgetAgainTimeout bounds the removal of a released bundle's document
// after its release is written, which the caller's end must not skip.
const forgetAgainTimeout = 10 * time.Second

// notPending says why bundleID is no pending bundle of the recipient:
// dequeued, released or unknown (ErrNotFound in each case).
func (r *Hub) notPending(ctx context.Context, recipient, bundleID string) error {
	rec, err := r.store.DequeuedBundle(ctx, recipient, bundleID)
	switch {
	case err == nil:
		return fmt.Errorf("%w: bundle %s is not pending: it was dequeued at %s", domain.ErrNotFound, bundleID, rec.DequeuedAt.UTC().Format(timeFormat))
	case !errors.Is(err, domain.ErrNotFound):
		return err
	}
	used, err := r.store.BundleExists(ctx, recipient, bundleID)
	switch {
	case err != nil:
		return err
	case used:
		return fmt.Errorf("%w: bundle %s is not pending: it was released", domain.ErrNotFound, bundleID)
	}
	return fmt.Errorf("%w: recipient %s has no bundle %s", domain.ErrNotFound, recipient, bundleID)
}

// timeFormat is how times appear in the remedies' messages.
const timeFormat = "2006-01-02T15:04:05.000Z"

// Acknowledged is what AcknowledgeOnBehalf dequeued.
type Acknowledged struct {
	// Bundles are the bundles dequeued, in order, as dequeued: at most
	// Options.MaxAcknowledgeBundles.
	Bundles []bundle.Record
	// Notifications is the count of notifications in them.
	Notifications int64
	// More says the call stopped at Options.MaxAcknowledgeBundles with
	// notifications up to the one named still to dequeue: the same call
	// again goes on from there.
	More bool
}

// DefaultMaxAcknowledgeBundles is Options.MaxAcknowledgeBundles' default.
// A bundle takes a few requests of the store (about 6 on Cosmos DB), so a
// call of this many bundles ends well within an operator's timeout of
// 30 s, its answer (one id per bundle) stays small, and so do the audit
// events it writes.
const DefaultMaxAcknowledgeBundles = 100

// AcknowledgeOnBehalf dequeues, on the recipient's behalf, every
// notification of its cabinet (origin, contentType) up to and including
// notification upTo, which must be waiting, pending or dequeued in that
// cabinet. It does what the actor's own Peek and Dequeue would: bundles are
// cut by the bundling rule (the last one ends at upTo), created under ids
// the hub makes up and acknowledged, so the cursor moves, the domain gets a
// dequeue notice for each and retention keeps them like any dequeued
// bundle. A pending bundle of the cabinet in the way is acknowledged whole,
// even when upTo lies within it; one of another cabinet of the same peek
// group stops it (ErrOtherBundlePending: it is released or dequeued first).
//
// One call dequeues at most Options.MaxAcknowledgeBundles bundles, each
// durable before the next is cut; when notifications up to upTo remain, it
// says so (More) and the same call again goes on from there. A notification
// dequeued already (by an earlier call, or the actor) leaves nothing to do:
// the answer is empty, not an error. A call that fails part-way keeps what
// it dequeued (its error names those bundles); calling it again goes on
// from there.
func (r *Hub) AcknowledgeOnBehalf(ctx context.Context, recipient string, origin domain.Origin, contentType, upTo string) (Acknowledged, error) {
	if err := r.begin(); err != nil {
		return Acknowledged{}, err
	}
	defer r.ops.Done()
	key := catalog.Key{Origin: origin, ContentType: contentType}
	target, err := retry(ctx, func() (Trace, error) { return r.traceOnce(ctx, recipient, upTo) })
	if err != nil {
		return Acknowledged{}, err
	}
	if err := checkTarget(target, key, recipient, upTo); err != nil || target.State == TraceDequeued {
		return Acknowledged{}, err
	}
	var done Acknowledged
	for len(done.Bundles) < r.opts.MaxAcknowledgeBundles {
		if r.opsCtx.Err() != nil { // Close waits for this call: stop between bundles
			return done, progress(errClosed, done)
		}
		st, err := retry(ctx, func() (step, error) { return r.acknowledgeStep(ctx, recipient, key, target) })
		if err != nil {
			return done, progress(err, done)
		}
		if st.finished {
			return done, nil
		}
		if st.dequeued != nil {
			done.Bundles = append(done.Bundles, *st.dequeued)
			done.Notifications += int64(st.dequeued.Count)
		}
	}
	// The bound is reached right after a dequeue: no bundle of the call's
	// is left pending. One more read says whether the target is reached.
	state, err := r.store.LoadRecipient(ctx, recipient)
	if err != nil {
		return done, progress(err, done)
	}
	done.More = !reached(state, key, target)
	return done, nil
}

// checkTarget refuses a target that is not waiting, pending or dequeued in
// the cabinet named.
func checkTarget(t Trace, key catalog.Key, recipient, id string) error {
	switch t.State {
	case TraceNotFound:
		return fmt.Errorf("%w: notification %s is not stored (never saved, or removed by retention)", domain.ErrNotFound, id)
	case TraceElsewhere:
		return fmt.Errorf("%w: notification %s is not one of recipient %s's", domain.ErrNotFound, id, recipient)
	}
	if t.Origin != key.Origin || t.ContentType != key.ContentType {
		return fmt.Errorf("%w: notification %s is in cabinet %s/%s of recipient %s, not in %s/%s",
			domain.ErrInvalidArgument, id, t.Origin.Name(), t.ContentType, recipient, key.Origin.Name(), key.ContentType)
	}
	return nil
}

// step is one round of AcknowledgeOnBehalf: a bundle dequeued, or none (a
// bundle created, to be dequeued next round), or the target reached.
type step struct {
	dequeued *bundle.Record
	finished bool
}

// acknowledgeStep reads the recipient's state once and moves one step
// towards acknowledging target's position: it dequeues the cabinet's
// pending bundle, or cuts and creates the next one. It is finished once the
// cursor is past the target, or the target's drawer has left the entry
// (only acknowledged drawers do).
func (r *Hub) acknowledgeStep(ctx context.Context, recipient string, key catalog.Key, target Trace) (step, error) {
	loaded := r.opts.Now()
	state, err := r.store.LoadRecipient(ctx, recipient)
	if err != nil {
		return step{}, err
	}
	if reached(state, key, target) {
		return step{finished: true}, nil
	}
	group := domain.GroupOf(key.Origin)
	if pending := pendingIn(state, group); len(pending) > 0 {
		p := pending[0]
		if p.Origin != key.Origin || p.ContentType != key.ContentType {
			return step{}, fmt.Errorf("%w: bundle %s of cabinet %s/%s is pending in the same peek group; release it or let the actor dequeue it first",
				domain.ErrOtherBundlePending, p.ID, p.Origin.Name(), p.ContentType)
		}
		rec, err := r.acknowledge(ctx, recipient, state, p)
		if err != nil {
			return step{}, err
		}
		return step{dequeued: &rec}, nil
	}
	rec, _, cursor, err := r.cutWithin(ctx, state, group, &cutLimit{key: key, end: target.Position + 1})
	if err != nil {
		return step{}, err
	}
	if rec == nil {
		// The target was found below the cursor's cabinet end but nothing
		// up to it is visible: a replica lags, or its save is not visible
		// yet.
		return step{}, fmt.Errorf("%w: nothing visible up to notification position %d of %s/%s", store.ErrConflict, target.Position, key.Origin.Name(), key.ContentType)
	}
	rec.ID = r.opts.NewID()
	return step{}, r.createBundle(ctx, loaded, recipient, *rec, cursor)
}

// reached says whether target's position is acknowledged in state: the
// cursor is past it, or its drawer has left the entry (only acknowledged
// drawers do).
func reached(state store.RecipientState, key catalog.Key, target Trace) bool {
	e := slices.IndexFunc(state.Entries, func(e catalog.Entry) bool { return e.Key() == key })
	if e < 0 || !slices.ContainsFunc(state.Entries[e].Drawers, func(m drawer.Meta) bool { return m.ID == target.drawerID }) {
		return true
	}
	c := slices.IndexFunc(state.Cursors, func(c catalog.Cursor) bool { return c.Key() == key })
	return c >= 0 && state.Cursors[c].Acked > target.Position
}

// progress adds to err the bundles a failed AcknowledgeOnBehalf dequeued
// before it failed: they stay dequeued.
func progress(err error, done Acknowledged) error {
	if len(done.Bundles) == 0 {
		return err
	}
	ids := make([]string, len(done.Bundles))
	for i, b := range done.Bundles {
		ids[i] = b.ID
	}
	return fmt.Errorf("%w (before that, %d notifications were dequeued in bundles %s)", err, done.Notifications, strings.Join(ids, ", "))
}
