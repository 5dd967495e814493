package diskguard

import (
	"context"
	"time"

	"github.com/energydatahub/messagehub/internal/audit"
)

// auditEventBytes is an audit event's share beyond its strings: its key
// (recipient and event key) and its numbers.
const auditEventBytes = recordBytes + 64

// AppendAudit implements store.AuditLog: refused below the floor, like
// every write that is not a save.
func (s *guardedStore) AppendAudit(ctx context.Context, events []audit.Event) error {
	n := 0
	for _, e := range events {
		n += auditEventBytes + len(e.Subject) + len(e.BundleID) + len(e.Detail)
	}
	return s.write(uint64(n)*writeFactor, s.g.Floor(), func() error { return s.Store.AppendAudit(ctx, events) }) //nolint:gosec // a sum of lengths is not negative
}

// PruneAudit implements store.AuditLog: refused below the floor (its range
// deletions are small records until compactions drop what they cover).
func (s *guardedStore) PruneAudit(ctx context.Context, before time.Time) error {
	return s.write(leaseBytes, s.g.Floor(), func() error { return s.Store.PruneAudit(ctx, before) })
}
