package telemetry

import "github.com/prometheus/client_golang/prometheus"

// ObserveRetention exposes the recipients whose visits of retention keep
// failing on this instance (stuck, read at each scrape) as
// messagehub_retention_stuck_recipients.
func (t *Telemetry) ObserveRetention(stuck func() int) error {
	return t.registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "messagehub_retention_stuck_recipients",
		Help: "Recipients whose last 3 or more visits of the retention sweep on this instance all failed or conflicted: retention removes nothing of them (each is named in a WARN log). Only the instance holding the sweep lease visits.",
	}, func() float64 { return float64(stuck()) }))
}
