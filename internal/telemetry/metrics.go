// Package telemetry sets up MessageHub's OpenTelemetry providers (metrics
// exported to Prometheus, traces by OTLP when configured) and holds the
// domain metrics the service records.
package telemetry

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// instrumentationName names the meter of MessageHub's own metrics.
const instrumentationName = "github.com/energydatahub/messagehub"

// Bucket boundaries. Bundle sizes span one notification to a full bundle of
// the default weight limit (51,200) and beyond; store operations span a
// cached point read to a slow remote batch.
var (
	bundleSizeBuckets = []float64{1, 2, 5, 10, 50, 100, 500, 1000, 5000, 10000, 25000, 51200, 100000}
	latencyBuckets    = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
)

// Attribute keys.
const (
	attrOperation = attribute.Key("operation")
	attrError     = attribute.Key("error")
	attrOutcome   = attribute.Key("outcome")
	attrStatus    = attribute.Key("status_code")
	attrOrigin    = attribute.Key("origin")
	attrReason    = attribute.Key("reason")
)

// Metrics records MessageHub's domain metrics. Its methods are safe for
// concurrent use. The zero value is not usable; a Metrics from Discard
// records nothing.
type Metrics struct {
	saved, duplicates     metric.Int64Counter
	peeks                 metric.Int64Counter
	bundlesPeeked         metric.Int64Counter
	bundleNotifications   metric.Int64Histogram
	bundleWeight          metric.Int64Histogram
	bundlesDequeued       metric.Int64Counter
	notificationsDequeued metric.Int64Counter
	storeDuration         metric.Float64Histogram
	storeErrors           metric.Int64Counter
	requestCharge         metric.Float64Counter
	requests              metric.Int64Counter
	providerCalls         metric.Int64Counter
	providerDuration      metric.Float64Histogram
	contentBytes          metric.Int64Counter
	jwksReloads           metric.Int64Counter
	buildsInBackoff       metric.Int64UpDownCounter
	noticesHeld           metric.Int64UpDownCounter
	bellErrors            metric.Int64Counter

	// The attributes of each store operation's duration, made once: a new
	// set per operation (sorted and hashed) cost more than recording it.
	storeOps     sync.Map     // operation → metric.RecordOption
	storeOpsKept atomic.Int32 // entries in storeOps
}

// maxStoreOps bounds the operations whose attributes are kept; the names
// are the store's constants, far fewer.
const maxStoreOps = 64

// Discard returns a Metrics that records nothing.
func Discard() *Metrics {
	m, err := NewMetrics(noop.NewMeterProvider())
	if err != nil {
		panic(err) // the no-op provider never fails
	}
	return m
}

// NewMetrics creates the instruments on mp.
func NewMetrics(mp metric.MeterProvider) (*Metrics, error) {
	meter := mp.Meter(instrumentationName)
	var m Metrics
	var errs []error
	made := func(err error) { errs = append(errs, err) }
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		made(err)
		return c
	}
	histogram := func(name, unit, desc string, buckets []float64) metric.Int64Histogram {
		h, err := meter.Int64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(buckets...))
		made(err)
		return h
	}
	seconds := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(latencyBuckets...))
		made(err)
		return h
	}
	m.saved = counter("messagehub.notifications.saved", "{notification}",
		"Notifications newly stored by Save.")
	m.duplicates = counter("messagehub.notifications.duplicates", "{notification}",
		"Notifications of a Save that were already stored with identical content.")
	m.peeks = counter("messagehub.peeks", "{call}",
		"Successful Peek and content peek calls, by outcome: bundle (a bundle was returned) or empty.")
	m.bundlesPeeked = counter("messagehub.bundles.peeked", "{bundle}",
		"New bundles cut by Peek or an operator's AcknowledgeOnBehalf; a re-peek of a pending bundle is not counted again.")
	m.bundleNotifications = histogram("messagehub.bundle.notifications", "{notification}",
		"Notifications per new bundle.", bundleSizeBuckets)
	m.bundleWeight = histogram("messagehub.bundle.weight", "1",
		"Total weight per new bundle.", bundleSizeBuckets)
	m.bundlesDequeued = counter("messagehub.bundles.dequeued", "{bundle}",
		"Bundles acknowledged by Dequeue or an operator's AcknowledgeOnBehalf.")
	m.notificationsDequeued = counter("messagehub.notifications.dequeued", "{notification}",
		"Notifications acknowledged by Dequeue or an operator's AcknowledgeOnBehalf.")
	m.storeErrors = counter("messagehub.store.operation.errors", "{error}",
		"Failed store operations, by operation and kind of error (conflict is an optimistic-concurrency retry).")
	m.requests = counter("messagehub.store.requests", "{request}",
		"Requests sent to a remote store backend (Cosmos DB), by operation and status code.")
	m.providerCalls = counter("messagehub.content.provider.calls", "{call}",
		"CreateBundleContent calls to domains' providers, by origin and outcome (ok, error, invalid, or not_stored: the hub could not store the answer).")
	m.contentBytes = counter("messagehub.content.stored", "By",
		"Bytes of bundle documents stored, by origin.")
	m.jwksReloads = counter("messagehub.jwks.reloads", "{reload}",
		"Reloads of a changed JWKS file, by outcome: ok, or error (unreadable or unusable; the last good keys stay).")
	m.bellErrors = counter("messagehub.wake.bell.errors", "{error}",
		"Failed rings and reads of the bells that carry Saves to the Peeks waiting on other instances, by operation (ring, read); while reads fail, waiting Peeks re-check every 5 s.")
	m.storeDuration = seconds("messagehub.store.operation.duration", "Duration of store operations, by operation.")
	m.providerDuration = seconds("messagehub.content.provider.duration", "Duration of CreateBundleContent calls, by origin.")
	var err error
	m.buildsInBackoff, err = meter.Int64UpDownCounter("messagehub.content.builds.backoff", metric.WithUnit("{build}"),
		metric.WithDescription("Bundle document builds waiting out a backoff after their domain's provider failed, or after a retry found no room in the build memory."))
	made(err)
	m.noticesHeld, err = meter.Int64UpDownCounter("messagehub.content.notices.held", metric.WithUnit("{notice}"),
		metric.WithDescription("Notices of dequeues the notifier holds back on a backoff of their own while their domain hears of the others, by origin and reason: unreadable (their bundle cannot be read) or refused (the domain refuses them while it takes others)."))
	made(err)
	m.requestCharge, err = meter.Float64Counter("messagehub.store.request.charge", metric.WithUnit("{request_unit}"),
		metric.WithDescription("Request units charged by a remote store backend (Cosmos DB), by operation."))
	made(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &m, nil
}

// RecordSave counts what a Save did.
func (m *Metrics) RecordSave(ctx context.Context, saved, duplicates int) {
	m.saved.Add(ctx, int64(saved))
	m.duplicates.Add(ctx, int64(duplicates))
}

// Outcomes of a Peek.
var (
	peekBundle = metric.WithAttributeSet(attribute.NewSet(attrOutcome.String("bundle")))
	peekEmpty  = metric.WithAttributeSet(attribute.NewSet(attrOutcome.String("empty")))
)

// RecordPeek counts a successful Peek, whether it returned a bundle or not.
func (m *Metrics) RecordPeek(ctx context.Context, delivered bool) {
	outcome := peekEmpty
	if delivered {
		outcome = peekBundle
	}
	m.peeks.Add(ctx, 1, outcome)
}

// RecordBundleCreated counts a new bundle and its size.
func (m *Metrics) RecordBundleCreated(ctx context.Context, notifications int, weight int64) {
	m.bundlesPeeked.Add(ctx, 1)
	m.bundleNotifications.Record(ctx, int64(notifications))
	m.bundleWeight.Record(ctx, weight)
}

// RecordBundleDequeued counts an acknowledged bundle of notifications.
func (m *Metrics) RecordBundleDequeued(ctx context.Context, notifications int) {
	m.bundlesDequeued.Add(ctx, 1)
	m.notificationsDequeued.Add(ctx, int64(notifications))
}

// RecordStoreOperation records one store operation's duration and, when
// errKind is not empty, its failure (errKind says what kind: "conflict",
// "unavailable", "canceled", "other", ...).
func (m *Metrics) RecordStoreOperation(ctx context.Context, operation string, d time.Duration, errKind string) {
	m.storeDuration.Record(ctx, d.Seconds(), m.storeOp(operation))
	if errKind != "" {
		m.storeErrors.Add(ctx, 1, metric.WithAttributes(attrOperation.String(operation), attrError.String(errKind)))
	}
}

// storeOp is the record option of operation's duration.
func (m *Metrics) storeOp(operation string) metric.RecordOption {
	if o, ok := m.storeOps.Load(operation); ok {
		return o.(metric.RecordOption)
	}
	o := metric.RecordOption(metric.WithAttributeSet(attribute.NewSet(attrOperation.String(operation))))
	if m.storeOpsKept.Load() < maxStoreOps {
		if _, loaded := m.storeOps.LoadOrStore(operation, o); !loaded {
			m.storeOpsKept.Add(1)
		}
	}
	return o
}

// RequestRecorder receives one record per request a remote store backend
// sends: the operation it served (a short stable name such as
// "read_recipient" or "commit_batch"), the request charge the service billed
// (Cosmos DB request units; 0 if unknown) and the HTTP status code of the
// answer (0 when none arrived). *Metrics implements it; a Cosmos store takes
// one in its options.
type RequestRecorder interface {
	RecordRequest(ctx context.Context, operation string, requestCharge float64, statusCode int)
}

// RecordRequest implements RequestRecorder: it adds to
// messagehub.store.requests and messagehub.store.request.charge.
func (m *Metrics) RecordRequest(ctx context.Context, operation string, requestCharge float64, statusCode int) {
	op := attrOperation.String(operation)
	m.requests.Add(ctx, 1, metric.WithAttributes(op, attrStatus.Int(statusCode)))
	if requestCharge > 0 {
		m.requestCharge.Add(ctx, requestCharge, metric.WithAttributes(op))
	}
}

var _ RequestRecorder = (*Metrics)(nil)

// RecordProviderCall records one call for a bundle's document: its domain,
// its outcome ("ok", "error", "invalid" for an answer the hub refuses, or
// "not_stored" for one it could not store) and how long it took; bytes is what was stored (0 unless ok).
func (m *Metrics) RecordProviderCall(ctx context.Context, origin, outcome string, d time.Duration, bytes int64) {
	o := attrOrigin.String(origin)
	m.providerCalls.Add(ctx, 1, metric.WithAttributes(o, attrOutcome.String(outcome)))
	m.providerDuration.Record(ctx, d.Seconds(), metric.WithAttributes(o))
	if bytes > 0 {
		m.contentBytes.Add(ctx, bytes, metric.WithAttributes(o))
	}
}

// RecordBuildBackoff adds delta to the document builds in backoff; it
// implements content.ProviderMetrics with RecordProviderCall.
func (m *Metrics) RecordBuildBackoff(ctx context.Context, delta int64) {
	m.buildsInBackoff.Add(ctx, delta)
}

// RecordNoticesHeld adds delta to the notices held back of a domain, by
// reason ("unreadable" or "refused"); it implements content.NoticeMetrics.
func (m *Metrics) RecordNoticesHeld(ctx context.Context, origin, reason string, delta int64) {
	m.noticesHeld.Add(ctx, delta, metric.WithAttributes(attrOrigin.String(origin), attrReason.String(reason)))
}

// RecordJWKSReload counts a reload of a changed JWKS file, by outcome ("ok"
// or "error"); it implements auth.ReloadRecorder.
func (m *Metrics) RecordJWKSReload(ctx context.Context, outcome string) {
	m.jwksReloads.Add(ctx, 1, metric.WithAttributes(attrOutcome.String(outcome)))
}

// RecordBellError counts a failed ring or read ("ring", "read") of the
// bells through which instances wake each other's waiting Peeks.
func (m *Metrics) RecordBellError(ctx context.Context, operation string) {
	m.bellErrors.Add(ctx, 1, metric.WithAttributes(attrOperation.String(operation)))
}
