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
