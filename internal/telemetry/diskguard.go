package telemetry

import "github.com/prometheus/client_golang/prometheus"

// DiskGuard is what the disk guard's gauges read (*diskguard.Guard), at
// each scrape: its state in memory, not the volume.
type DiskGuard interface {
	// Level is 0 while every write passes, 1 while saves are refused
	// (below the reserve), 2 while every write is (below half of it, or
	// the store opened read-only, until a restart).
	Level() int
	// Available is the estimated free space of the data volume: the last
	// look's measure less what was written since.
	Available() uint64
	// Reserve is the free space kept (--min-free-disk).
	Reserve() uint64
}

// WatchDiskGuard exposes g as messagehub_disk_guard_level,
// messagehub_disk_free_bytes and messagehub_disk_min_free_bytes.
func (t *Telemetry) WatchDiskGuard(g DiskGuard) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "messagehub_disk_guard_level",
			Help: "The disk guard's level: 0 every write passes, 1 saves are refused (free space below --min-free-disk), 2 every write is refused (below half of it, or the store opened read-only until a restart).",
		}, func() float64 { return float64(g.Level()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "messagehub_disk_free_bytes",
			Help: "Free space of the embedded store's volume as the disk guard estimates it: its last look (every 2 s) less what was written since.",
		}, func() float64 { return float64(g.Available()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "messagehub_disk_min_free_bytes",
			Help: "Free space the disk guard keeps on the embedded store's volume (--min-free-disk).",
		}, func() float64 { return float64(g.Reserve()) }),
	} {
		if err := t.registry.Register(c); err != nil {
			return err
		}
	}
	return nil
}
