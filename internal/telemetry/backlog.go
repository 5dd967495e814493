package telemetry

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// DefaultBacklogInterval is how often the backlog figures are read: the
// gauges are never older than the figures plus this, and a scrape never
// reads the store.
const DefaultBacklogInterval = 15 * time.Second

// backlogCollector exposes the last figures read: the backlog (and, when
// asked, the outbox). Ages are computed at scrape time, so they keep
// growing between reads and recounts.
type backlogCollector struct {
	notifications, oldestAge, recipients, figuresAge *prometheus.Desc
	pending, pendingAge                              *prometheus.Desc
	outboxNotices, outboxAge                         *prometheus.Desc
	outbox                                           bool

	last atomic.Pointer[store.BacklogFigures] // nil until the first figures are read
}

func newBacklogCollector(outbox bool) *backlogCollector {
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
		figuresAge: prometheus.NewDesc("messagehub_backlog_figures_age_seconds",
			"Age of the backlog figures the backlog and outbox gauges show (they are recounted minutes apart).", nil, nil),
		outboxNotices: prometheus.NewDesc("messagehub_outbox_notices",
			"Dequeues not yet told to their domains (BundleDequeued).", nil, nil),
		outboxAge: prometheus.NewDesc("messagehub_outbox_oldest_age_seconds",
			"Age of the oldest dequeue not yet told to its domain (0 without one).", nil, nil),
		outbox: outbox,
	}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.notifications
	ch <- c.oldestAge
	ch <- c.recipients
	ch <- c.pending
	ch <- c.pendingAge
	ch <- c.figuresAge
	if c.outbox {
		ch <- c.outboxNotices
		ch <- c.outboxAge
	}
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	last := c.last.Load()
	if last == nil {
		return // not read yet: no numbers rather than false zeros
	}
	now := time.Now()
	age := func(t time.Time, n int64) float64 {
		if t.IsZero() || n == 0 {
			return 0
		}
		return max(now.Sub(t).Seconds(), 0)
	}
	for _, o := range domain.Origins {
		b := last.Backlog.ByOrigin[o]
		name := messagehubv1.Domain(o).String()
		ch <- prometheus.MustNewConstMetric(c.notifications, prometheus.GaugeValue, float64(b.Notifications), name)
		ch <- prometheus.MustNewConstMetric(c.oldestAge, prometheus.GaugeValue, age(b.Oldest, b.Notifications), name)
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(b.PendingBundles), name)
		ch <- prometheus.MustNewConstMetric(c.pendingAge, prometheus.GaugeValue, age(b.OldestPending, b.PendingBundles), name)
	}
	ch <- prometheus.MustNewConstMetric(c.recipients, prometheus.GaugeValue, float64(last.Backlog.Recipients))
	ch <- prometheus.MustNewConstMetric(c.figuresAge, prometheus.GaugeValue, age(last.ComputedAt, 1))
	if c.outbox {
		ch <- prometheus.MustNewConstMetric(c.outboxNotices, prometheus.GaugeValue, float64(last.Notices))
		ch <- prometheus.MustNewConstMetric(c.outboxAge, prometheus.GaugeValue, age(last.OldestNotice, int64(last.Notices)))
	}
}

// WatchBacklog reads the backlog figures (their totals: store.Figures
// keeps them, recounted by one instance at a time) with read now and every
// interval, and exposes them as the messagehub_backlog_* gauges, and as the
// messagehub_outbox_* gauges when outbox is set, until stop is called; stop
// waits for a read in progress, so the store can be closed after it. A
// failed read keeps the last numbers and is logged; until the first
// recount there are no numbers.
func (t *Telemetry) WatchBacklog(read func(context.Context) (store.BacklogFigures, error), interval time.Duration, outbox bool, logger *slog.Logger) (stop func(), err error) {
	c := newBacklogCollector(outbox)
	if err := t.registry.Register(c); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	once := func() {
		rctx, cancel := context.WithTimeout(ctx, interval)
		defer cancel()
		f, err := read(rctx)
		if err == nil && !f.ComputedAt.IsZero() {
			c.last.Store(&f)
		}
		if err != nil && ctx.Err() == nil {
			logger.Warn("reading the backlog figures for its metrics failed", "error", err)
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
	return func() { cancel(); <-done }, nil
}
