package app

import (
	"context"
	"time"

	"github.com/energydatahub/messagehub/internal/audit"
)

// auditFlushTimeout bounds the audit log's last flush at shutdown: what it
// has not written by then is dropped, counted and logged. It gets at most
// half of what shutdown has left, the rest being the hub's and the store's.
const auditFlushTimeout = 5 * time.Second

// openAudit starts the audit log over the hub. It is closed (its buffer
// written, and what the calls cut off record as they end) after the
// servers stopped and before the hub closes.
func (a *App) openAudit(w audit.Writer) (*audit.Log, error) {
	opts := a.cfg.auditOptions
	opts.Logger = a.logger
	log := audit.NewLog(w, opts)
	a.onClose("audit log", func() error {
		timeout := auditFlushTimeout
		if !a.stopStarted.IsZero() { // zero: New failed, nothing was recorded
			timeout = max(min(auditFlushTimeout, time.Until(a.stopStarted.Add(a.shutdownTimeout()))/2), 0)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := log.Close(ctx); err != nil {
			a.logger.Warn("audit log: events buffered at shutdown were not all written", "dropped_total", log.Dropped(), "error", err)
		}
		return nil
	})
	if err := a.tel.ObserveAuditLog(log.Dropped, log.Buffered); err != nil {
		return nil, err
	}
	return log, nil
}
