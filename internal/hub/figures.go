package hub

import (
	"context"

	"github.com/energydatahub/messagehub/internal/store"
)

// BacklogFigures reads the store's backlog figures with the parts asked for
// (store.Figures): one read each, however many recipients the store holds.
// They are as old as their last recount (ComputedAt; zero before the first).
func (r *Hub) BacklogFigures(ctx context.Context, parts store.FigureParts) (store.BacklogFigures, error) {
	if err := r.begin(); err != nil {
		return store.BacklogFigures{}, err
	}
	defer r.ops.Done()
	return r.store.ReadFigures(ctx, parts)
}
