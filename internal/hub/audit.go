package hub

import (
	"context"
	"sync"
	"time"

	"github.com/energydatahub/messagehub/internal/audit"
)

// The audit log goes through the hub to the store, like every other call:
// nothing reaches the store once the hub is closed.

// AppendAudit stores audit events (audit.Writer). With the context of a
// Hold it is served also once Close has begun: the hold keeps the store
// open.
func (r *Hub) AppendAudit(ctx context.Context, events []audit.Event) error {
	if ctx.Value(heldKey{}) != any(r) {
		if err := r.begin(); err != nil {
			return err
		}
		defer r.ops.Done()
	}
	return r.store.AppendAudit(ctx, events)
}

// heldKey marks the context of a Hold.
type heldKey struct{}

// Hold keeps the hub open until release is called: Close waits for it,
// and AppendAudit with the context returned is served even once Close has
// begun. A remedy's call holds it from before the remedy starts until its
// audit record is written, so that a remedy that took effect is recorded
// also when a shutdown begins meanwhile (which stops an acknowledgement on
// an actor's behalf between bundles, and then refuses every call).
func (r *Hub) Hold(ctx context.Context) (held context.Context, release func(), err error) {
	if err := r.begin(); err != nil {
		return ctx, func() {}, err
	}
	var once sync.Once
	return context.WithValue(ctx, heldKey{}, any(r)), func() { once.Do(r.ops.Done) }, nil
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
