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
	start := s.now()
	err := s.next.AppendAudit(ctx, events)
	s.observe(ctx, OpAppendAudit, start, err)
	return err
}

// AuditEvents implements store.AuditLog.
func (s *Store) AuditEvents(ctx context.Context, q audit.Query) (audit.Page, error) {
	start := s.now()
	p, err := s.next.AuditEvents(ctx, q)
	s.observe(ctx, OpAuditEvents, start, err)
	return p, err
}

// PruneAudit implements store.AuditLog.
func (s *Store) PruneAudit(ctx context.Context, before time.Time) error {
	start := s.now()
	err := s.next.PruneAudit(ctx, before)
	s.observe(ctx, OpPruneAudit, start, err)
	return err
}
