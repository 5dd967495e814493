package hub

import (
	"context"
	"time"

	"github.com/energydatahub/messagehub/internal/audit"
)

// The audit log goes through the hub to the store, like every other call:
// nothing reaches the store once the hub is closed.

// AppendAudit stores audit events (audit.Writer).
func (r *Hub) AppendAudit(ctx context.Context, events []audit.Event) error {
	if err := r.begin(); err != nil {
		return err
	}
	defer r.ops.Done()
	return r.store.AppendAudit(ctx, events)
}

// AuditEvents reads one page of a recipient's audit log.
func (r *Hub) AuditEvents(ctx context.Context, q audit.Query) (audit.Page, error) {
	if err := r.begin(); err != nil {
		return audit.Page{}, err
	}
	defer r.ops.Done()
	return r.store.AuditEvents(ctx, q)
}

// pruneAudit removes the audit events older than the retention, as part of
// a sweep; a failure is logged and the sweep goes on (the next one tries
// again).
func (r *Hub) pruneAudit(ctx context.Context, cutoff time.Time) {
	if err := r.store.PruneAudit(ctx, cutoff); err != nil && ctx.Err() == nil {
		r.logger.Warn("removing audit events older than the retention failed", "before", cutoff, "err", err)
	}
}
