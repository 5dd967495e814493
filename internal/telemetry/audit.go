package telemetry

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// ObserveAuditLog exposes the audit log's buffer: the events dropped since
// the start (a full buffer, or a store that would not take them), and the
// events waiting for the next flush. The functions are read at each scrape.
func (t *Telemetry) ObserveAuditLog(dropped, buffered func() int64) error {
	return errors.Join(
		t.registry.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "messagehub_audit_events_dropped_total",
			Help: "Audit events dropped: the buffer was full or the store did not take them (logged at WARN).",
		}, func() float64 { return float64(dropped()) })),
		t.registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "messagehub_audit_events_buffered",
			Help: "Audit events waiting for the next flush to the store: actors' calls' and inspections', and those of writes the store refused.",
		}, func() float64 { return float64(buffered()) })),
	)
}
