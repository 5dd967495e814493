package hub

import (
	"context"
	"slices"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/store"
)

// IsPending says whether bundleID is a pending (peeked, not dequeued) bundle
// of the recipient.
func (r *Hub) IsPending(ctx context.Context, recipient, bundleID string) (bool, error) {
	_, rec, err := r.pendingRecord(ctx, recipient, bundleID)
	return rec != nil, err
}

// pendingRecord loads the recipient's state and returns it with the
// pending record of bundleID, or nil.
func (r *Hub) pendingRecord(ctx context.Context, recipient, bundleID string) (store.RecipientState, *bundle.Record, error) {
	if err := r.begin(); err != nil {
		return store.RecipientState{}, nil, err
	}
	defer r.ops.Done()
	state, err := r.store.LoadRecipient(ctx, recipient)
	if err != nil {
		return store.RecipientState{}, nil, err
	}
	i := slices.IndexFunc(state.Pending, func(rec bundle.Record) bool { return rec.ID == bundleID })
	if i < 0 {
		return state, nil, nil
	}
	return state, &state.Pending[i], nil
}

// HoldsBundle says whether the bundle pending under bundleID holds exactly
// the notifications notificationIDs, in order: the very bundle a document
// was built for, not a later one under the id once the first was gone. A
// record that differs in count settles it without reading the drawers.
func (r *Hub) HoldsBundle(ctx context.Context, recipient, bundleID string, notificationIDs []string) (bool, error) {
	state, rec, err := r.pendingRecord(ctx, recipient, bundleID)
	if err != nil || rec == nil || rec.Count != len(notificationIDs) {
		return false, err
	}
	if err := r.begin(); err != nil {
		return false, err
	}
	defer r.ops.Done()
	b, err := r.materialize(ctx, recipient, state, *rec)
	if err != nil {
		return false, err
	}
	return slices.Equal(b.NotificationIDs, notificationIDs), nil
}
