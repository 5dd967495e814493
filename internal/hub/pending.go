package hub

import (
	"context"
	"slices"

	"github.com/energydatahub/messagehub/internal/bundle"
)

// IsPending says whether bundleID is a pending (peeked, not dequeued) bundle
// of the recipient.
func (r *Hub) IsPending(ctx context.Context, recipient, bundleID string) (bool, error) {
	if err := r.begin(); err != nil {
		return false, err
	}
	defer r.ops.Done()
	state, err := r.store.LoadRecipient(ctx, recipient)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(state.Pending, func(rec bundle.Record) bool { return rec.ID == bundleID }), nil
}

// HoldsBundle says whether the bundle pending under bundleID holds exactly
// the notifications notificationIDs, in order: the very bundle a document
// was built for, not a later one under the id once the first was gone. A
// record that differs in count settles it without reading the drawers.
func (r *Hub) HoldsBundle(ctx context.Context, recipient, bundleID string, notificationIDs []string) (bool, error) {
	if err := r.begin(); err != nil {
		return false, err
	}
	defer r.ops.Done()
	state, err := r.store.LoadRecipient(ctx, recipient)
	if err != nil {
		return false, err
	}
	i := slices.IndexFunc(state.Pending, func(rec bundle.Record) bool { return rec.ID == bundleID })
	if i < 0 || state.Pending[i].Count != len(notificationIDs) {
		return false, nil
	}
	b, err := r.materialize(ctx, recipient, state, state.Pending[i])
	if err != nil {
		return false, err
	}
	return slices.Equal(b.NotificationIDs, notificationIDs), nil
}
