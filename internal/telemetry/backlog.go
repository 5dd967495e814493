package telemetry

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// DefaultBacklogInterval is how often the backlog is read: its gauges are
// never older than this, and a scrape never reads the store.
const DefaultBacklogInterval = 15 * time.Second

// backlogCollector exposes the last backlog read; the age of the oldest
// notification is computed at scrape time, so it keeps growing between reads.
type backlogCollector struct {
	notifications, oldestAge, recipients *prometheus.Desc
	pending, pendingAge                  *prometheus.Desc
	now                                  func() time.Time

	mu   sync.Mutex
	last *store.Backlog // nil until the first read
}

func newBacklogCollector(now func() time.Time) *backlogCollector {
	return &backlogCollector{
		notifications: prometheus.NewDesc("messagehub_backlog_notifications",
			"Notifications saved and not yet dequeued, by origin domain.", []string{"origin"}, nil),
		oldestAge: prometheus.NewDesc("messagehub_backlog_oldest_age_seconds",
			"Age of the oldest notification not yet dequeued, by origin domain (0 without one).", []string{"origin"}, nil),
		recipients: prometheus.NewDesc("messagehub_backlog_recipients",
			"Recipients with at least one notification not yet dequeued.", nil, nil),
		pending: prometheus.NewDesc("messagehub_backlog_pending_bundles",
			"Bundles peeked and not yet dequeued, by origin domain.", []string{"origin"}, nil),
		pendingAge: prometheus.NewDesc("messagehub_backlog_pending_oldest_age_seconds",
			"Age of the oldest bundle peeked and not yet dequeued, by origin domain (0 without one).", []string{"origin"}, nil),
		now: now,
	}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.notifications
	ch <- c.oldestAge
	ch <- c.recipients
	ch <- c.pending
	ch <- c.pendingAge
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	last := c.last
	c.mu.Unlock()
	if last == nil {
		return // not read yet: no numbers rather than false zeros
	}
	now := c.now()
	for _, o := range domain.Origins {
		b := last.ByOrigin[o]
		name := messagehubv1.Domain(o).String()
		ch <- prometheus.MustNewConstMetric(c.notifications, prometheus.GaugeValue, float64(b.Notifications), name)
		ch <- prometheus.MustNewConstMetric(c.oldestAge, prometheus.GaugeValue, ageOf(now, b.Oldest, b.Notifications), name)
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(b.PendingBundles), name)
		ch <- prometheus.MustNewConstMetric(c.pendingAge, prometheus.GaugeValue, ageOf(now, b.OldestPending, b.PendingBundles), name)
	}
	ch <- prometheus.MustNewConstMetric(c.recipients, prometheus.GaugeValue, float64(last.Recipients))
}

// ageOf is how old the oldest of n things, made at oldest, is at now: 0
// without one, or when unknown.
func ageOf(now, oldest time.Time, n int64) float64 {
	if oldest.IsZero() || n <= 0 {
		return 0
	}
	return max(now.Sub(oldest).Seconds(), 0)
}

func (c *backlogCollector) set(b store.Backlog) {
	c.mu.Lock()
	c.last = &b
	c.mu.Unlock()
}

// WatchBacklog reads the backlog with read now and every interval, and
// exposes it as the messagehub_backlog_* gauges (notifications and pending
// bundles), until stop is called; stop
// waits for a read in progress, so the store can be closed after it. A
// failed read keeps the last numbers and is logged.
func (t *Telemetry) WatchBacklog(read func(context.Context) (store.Backlog, error), interval time.Duration, logger *slog.Logger) (stop func(), err error) {
	c := newBacklogCollector(time.Now)
	if err := t.registry.Register(c); err != nil {
		return nil, err
	}
	return watch(func(ctx context.Context) error {
		b, err := read(ctx)
		if err == nil {
			c.set(b)
		}
		return err
	}, interval, logger, "the backlog"), nil
}

// WatchOutbox exposes the notices of dequeues not yet told to their domains
// (messagehub_outbox_notices, messagehub_outbox_oldest_age_seconds), read
// with read every interval until stop is called.
func (t *Telemetry) WatchOutbox(read func(context.Context) (int, time.Time, error), interval time.Duration, logger *slog.Logger) (stop func(), err error) {
	var mu sync.Mutex
	var n int
	var oldest time.Time
	known := false
	depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "messagehub_outbox_notices", Help: "Dequeues not yet told to their domains (BundleDequeued).",
	}, func() float64 { mu.Lock(); defer mu.Unlock(); return float64(n) })
	age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "messagehub_outbox_oldest_age_seconds", Help: "Age of the oldest dequeue not yet told to its domain (0 without one).",
	}, func() float64 {
		mu.Lock()
		defer mu.Unlock()
		if !known || n == 0 {
			return 0
		}
		return max(time.Since(oldest).Seconds(), 0)
	})
	for _, c := range []prometheus.Collector{depth, age} {
		if err := t.registry.Register(c); err != nil {
			return nil, err
		}
	}
	return watch(func(ctx context.Context) error {
		count, first, err := read(ctx)
		if err == nil {
			mu.Lock()
			n, oldest, known = count, first, true
			mu.Unlock()
		}
		return err
	}, interval, logger, "the outbox"), nil
}

// watch runs refresh now and every interval until the returned stop is
// called; stop waits for a refresh in progress.
func watch(refresh func(context.Context) error, interval time.Duration, logger *slog.Logger, what string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	once := func() {
		rctx, cancel := context.WithTimeout(ctx, interval)
		defer cancel()
		if err := refresh(rctx); err != nil && ctx.Err() == nil {
			logger.Warn("reading "+what+" for its metrics failed", "error", err)
		}
	}
	go func() {
		defer close(done)
		once()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				once()
			}
		}
	}()
	return func() { cancel(); <-done }
}
