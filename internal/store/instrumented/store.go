// Package instrumented is a store.Store decorator that records, for every
// store operation, its duration and failures, and the domain events only the
// store sees: a new bundle cut (with its size) and a bundle acknowledged.
// It works over any backend; the backend itself stays free of metrics.
package instrumented

import (
	"context"
	"errors"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/telemetry"
)

// Operation names, the values of the "operation" attribute.
const (
	OpLoadRecipient    = "load_recipient"
	OpMarkIdle         = "mark_idle"
	OpReadDrawer       = "read_drawer"
	OpReadDrawerLatest = "read_drawer_latest"
	OpLookupIDs        = "lookup_ids"
	OpCommitSaves      = "commit_saves"
	OpBundleExists     = "bundle_exists"
	OpCreateBundle     = "create_bundle"
	OpAcknowledge      = "acknowledge"
	OpReleaseBundle    = "release_bundle"
	OpRecipients       = "recipients"
	OpDequeuedBundles  = "dequeued_bundles"
	OpApplySweep       = "apply_sweep"
	OpScanBacklog      = "scan_backlog"
	OpChangedBacklog   = "changed_backlog"
	OpReadFigures      = "read_figures"
	OpWriteFigures     = "write_figures"
	OpDueRecipients    = "due_recipients"
	OpLoadRetention    = "load_retention"
	OpBundlesAsRead    = "bundles_as_read"
	OpNotices          = "notices"
	OpRemoveNotices    = "remove_notices"
	OpDequeuedBundle   = "dequeued_bundle"
	OpRingBell         = "ring_bell"
	OpReadBells        = "read_bells"
	OpBackup           = "backup"
)

// Store wraps a store.Store with metrics. What it does not measure (the
// leases, Close) the embedded store answers itself: a method added to the
// contract is forwarded, unmeasured, never dropped.
type Store struct {
	store.Store
	metrics *telemetry.Metrics
}

// New returns next instrumented with m.
func New(next store.Store, m *telemetry.Metrics) *Store {
	return &Store{Store: next, metrics: m}
}

// observe records one operation that started at start and ended with err.
func (s *Store) observe(ctx context.Context, op string, start time.Time, err error) {
	s.metrics.RecordStoreOperation(ctx, op, time.Since(start), ErrorKind(err))
}

// timed runs one operation of the backend and records it.
func (s *Store) timed(ctx context.Context, op string, run func() error) error {
	start := time.Now()
	err := run()
	s.observe(ctx, op, start, err)
	return err
}

// timedResult runs one operation of the backend that returns a value and
// records it.
func timedResult[T any](ctx context.Context, s *Store, op string, run func() (T, error)) (T, error) {
	start := time.Now()
	v, err := run()
	s.observe(ctx, op, start, err)
	return v, err
}

// ErrorKind names the kind of a store error for the "error" attribute, ""
// for nil. A conflict is an optimistic-concurrency miss that the repository
// retries, not a failure the caller sees.
func ErrorKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, store.ErrConflict):
		return "conflict"
	case errors.Is(err, store.ErrNotHolder):
		// Another instance took a lease over: expected now and then, not
		// a failure to look into.
		return "not_holder"
	case errors.Is(err, domain.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.Is(err, domain.ErrNotFound):
		return "not_found"
	default:
		return "other"
	}
}

// LoadRecipient implements store.Store.
func (s *Store) LoadRecipient(ctx context.Context, recipient string, opts ...store.LoadOption) (store.RecipientState, error) {
	return timedResult(ctx, s, OpLoadRecipient, func() (store.RecipientState, error) { return s.Store.LoadRecipient(ctx, recipient, opts...) })
}

// MarkIdle implements store.Store. A refused mark is recorded like any
// failure, though the hub ignores it (the mark is a hint).
func (s *Store) MarkIdle(ctx context.Context, recipient string, head store.Head) error {
	return s.timed(ctx, OpMarkIdle, func() error { return s.Store.MarkIdle(ctx, recipient, head) })
}

// ReadDrawer implements store.Store.
func (s *Store) ReadDrawer(ctx context.Context, drawerID string, from, to int64, limit int) ([]drawer.Item, error) {
	return timedResult(ctx, s, OpReadDrawer, func() ([]drawer.Item, error) { return s.Store.ReadDrawer(ctx, drawerID, from, to, limit) })
}

// ReadDrawerLatest implements store.Store.
func (s *Store) ReadDrawerLatest(ctx context.Context, drawerID string, from, to int64, limit int) ([]drawer.Item, error) {
	return timedResult(ctx, s, OpReadDrawerLatest, func() ([]drawer.Item, error) {
		return s.Store.ReadDrawerLatest(ctx, drawerID, from, to, limit)
	})
}

// LookupIDs implements store.Store.
func (s *Store) LookupIDs(ctx context.Context, ids []string) (map[string]store.IDRecord, error) {
	return timedResult(ctx, s, OpLookupIDs, func() (map[string]store.IDRecord, error) { return s.Store.LookupIDs(ctx, ids) })
}

// CommitSaves implements store.Store. Saved notifications are counted by
// the transport from the Save's result, which also knows the duplicates.
func (s *Store) CommitSaves(ctx context.Context, saves []store.RecipientSave) error {
	return s.timed(ctx, OpCommitSaves, func() error { return s.Store.CommitSaves(ctx, saves) })
}

// BundleExists implements store.Store.
func (s *Store) BundleExists(ctx context.Context, recipient, bundleID string) (bool, error) {
	return timedResult(ctx, s, OpBundleExists, func() (bool, error) { return s.Store.BundleExists(ctx, recipient, bundleID) })
}

// CreateBundle implements store.Store; a stored bundle is a new bundle
// cut by Peek. Concurrent peeks that lose the race get a conflict and are not
// counted, so each bundle counts once.
func (s *Store) CreateBundle(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	err := s.timed(ctx, OpCreateBundle, func() error { return s.Store.CreateBundle(ctx, recipient, rec, cursor) })
	if err == nil {
		s.metrics.RecordBundleCreated(ctx, rec.Count, rec.Weight)
	}
	return err
}

// Acknowledge implements store.Store; success is a dequeued bundle.
func (s *Store) Acknowledge(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	err := s.timed(ctx, OpAcknowledge, func() error { return s.Store.Acknowledge(ctx, recipient, rec, cursor) })
	if err == nil {
		s.metrics.RecordBundleDequeued(ctx, rec.Count)
	}
	return err
}

// ReleaseBundle implements store.Store.
func (s *Store) ReleaseBundle(ctx context.Context, recipient string, rec bundle.Record) error {
	return s.timed(ctx, OpReleaseBundle, func() error { return s.Store.ReleaseBundle(ctx, recipient, rec) })
}

// Recipients implements store.Store. The time spent in fn (retention's
// work per recipient, itself made of store operations) is not counted, nor is
// an error fn returned.
func (s *Store) Recipients(ctx context.Context, fn func(recipient string) error) error {
	return visit(ctx, s, OpRecipients, func(fn func(string) error) error { return s.Store.Recipients(ctx, fn) }, fn)
}

// visit records one operation of a backend that calls fn for many items
// (run): the time spent in fn, itself made of store operations, is not
// counted, nor is an error fn returned.
func visit[T any](ctx context.Context, s *Store, op string, run func(func(T) error) error, fn func(T) error) error {
	start := time.Now()
	var (
		inFn  time.Duration
		fnErr error
	)
	err := run(func(v T) error {
		t := time.Now()
		fnErr = fn(v)
		inFn += time.Since(t)
		return fnErr
	})
	storeErr := err
	if fnErr != nil && errors.Is(err, fnErr) {
		storeErr = nil // fn's own failure, already recorded by the operation that failed
	}
	s.observe(ctx, op, start.Add(inFn), storeErr)
	return err
}

// DequeuedBundles implements store.Store.
func (s *Store) DequeuedBundles(ctx context.Context, recipient string) ([]bundle.Record, error) {
	return timedResult(ctx, s, OpDequeuedBundles, func() ([]bundle.Record, error) { return s.Store.DequeuedBundles(ctx, recipient) })
}

// ApplySweep implements store.Store.
func (s *Store) ApplySweep(ctx context.Context, sweep store.Sweep) error {
	return s.timed(ctx, OpApplySweep, func() error { return s.Store.ApplySweep(ctx, sweep) })
}

// ScanBacklog implements store.Figures. The time spent in fn is not
// counted.
func (s *Store) ScanBacklog(ctx context.Context, fn func(store.RecipientRecords) error) (float64, error) {
	var cost float64
	err := visit(ctx, s, OpScanBacklog, func(fn func(store.RecipientRecords) error) (err error) {
		cost, err = s.Store.ScanBacklog(ctx, fn)
		return err
	}, fn)
	return cost, err
}

// ChangedBacklog implements store.Figures.
func (s *Store) ChangedBacklog(ctx context.Context, cursor string) (store.BacklogChanges, error) {
	return timedResult(ctx, s, OpChangedBacklog, func() (store.BacklogChanges, error) { return s.Store.ChangedBacklog(ctx, cursor) })
}

// ReadFigures implements store.Figures.
func (s *Store) ReadFigures(ctx context.Context, parts store.FigureParts) (store.BacklogFigures, error) {
	return timedResult(ctx, s, OpReadFigures, func() (store.BacklogFigures, error) { return s.Store.ReadFigures(ctx, parts) })
}

// WriteFigures implements store.Figures.
func (s *Store) WriteFigures(ctx context.Context, holder string, f store.BacklogFigures, parts store.FigureParts) error {
	return s.timed(ctx, OpWriteFigures, func() error { return s.Store.WriteFigures(ctx, holder, f, parts) })
}

// LoadRetention implements store.Retention.
func (s *Store) LoadRetention(ctx context.Context, recipient string, dueBefore, since time.Time) (store.RetentionState, error) {
	return timedResult(ctx, s, OpLoadRetention, func() (store.RetentionState, error) { return s.Store.LoadRetention(ctx, recipient, dueBefore, since) })
}

// BundlesAsRead implements store.Retention.
func (s *Store) BundlesAsRead(ctx context.Context, recipient string, bundles []bundle.Record) error {
	return s.timed(ctx, OpBundlesAsRead, func() error { return s.Store.BundlesAsRead(ctx, recipient, bundles) })
}

// DueRecipients implements store.Retention. The time spent in fn is not
// counted.
func (s *Store) DueRecipients(ctx context.Context, dueBefore, since time.Time, fn func(recipient string) error) error {
	return visit(ctx, s, OpDueRecipients, func(fn func(string) error) error {
		return s.Store.DueRecipients(ctx, dueBefore, since, fn)
	}, fn)
}

// Notices implements store.Outbox.
func (s *Store) Notices(ctx context.Context, origins []domain.Origin, limit int) ([]store.Notice, error) {
	return timedResult(ctx, s, OpNotices, func() ([]store.Notice, error) { return s.Store.Notices(ctx, origins, limit) })
}

// RemoveNotices implements store.Outbox.
func (s *Store) RemoveNotices(ctx context.Context, notices []store.Notice) error {
	return s.timed(ctx, OpRemoveNotices, func() error { return s.Store.RemoveNotices(ctx, notices) })
}

// DequeuedBundle implements store.Outbox.
func (s *Store) DequeuedBundle(ctx context.Context, recipient, bundleID string) (bundle.Record, error) {
	return timedResult(ctx, s, OpDequeuedBundle, func() (bundle.Record, error) { return s.Store.DequeuedBundle(ctx, recipient, bundleID) })
}

// Backup implements store.Store.
func (s *Store) Backup(ctx context.Context, dir string) error {
	return s.timed(ctx, OpBackup, func() error { return s.Store.Backup(ctx, dir) })
}

var _ store.Store = (*Store)(nil)

// RingBell implements store.Coordination.
func (s *Store) RingBell(ctx context.Context, recipients []string) error {
	return s.timed(ctx, OpRingBell, func() error { return s.Store.RingBell(ctx, recipients) })
}

// ReadBells implements store.Coordination.
func (s *Store) ReadBells(ctx context.Context, cursor string) ([]string, string, error) {
	start := time.Now()
	recipients, next, err := s.Store.ReadBells(ctx, cursor)
	s.observe(ctx, OpReadBells, start, err)
	return recipients, next, err
}
