package instrumented

import (
	"context"
	"time"

	"github.com/energydatahub/messagehub/internal/audit"
)

// Operation names of the audit log's part of the store.
const (
	OpAppendAudit = "append_audit"
	OpAuditEvents = "audit_events"
	OpPruneAudit  = "prune_audit"
)

// AppendAudit implements store.AuditLog.
func (s *Store) AppendAudit(ctx context.Context, events []audit.Event) error {
	return s.timed(ctx, OpAppendAudit, func() error { return s.Store.AppendAudit(ctx, events) })
}

// AuditEvents implements store.AuditLog.
func (s *Store) AuditEvents(ctx context.Context, q audit.Query) (audit.Page, error) {
	return timedResult(ctx, s, OpAuditEvents, func() (audit.Page, error) { return s.Store.AuditEvents(ctx, q) })
}

// PruneAudit implements store.AuditLog.
func (s *Store) PruneAudit(ctx context.Context, before time.Time) error {
	return s.timed(ctx, OpPruneAudit, func() error { return s.Store.PruneAudit(ctx, before) })
}
