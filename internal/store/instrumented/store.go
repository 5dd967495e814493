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
	OpLoadRecipient   = "load_recipient"
	OpMarkIdle        = "mark_idle"
	OpReadDrawer      = "read_drawer"
	OpLookupIDs       = "lookup_ids"
	OpCommitSaves     = "commit_saves"
	OpBundleExists    = "bundle_exists"
	OpCreateBundle    = "create_bundle"
	OpAcknowledge     = "acknowledge"
	OpReleaseBundle   = "release_bundle"
	OpRecipients      = "recipients"
	OpDequeuedBundles = "dequeued_bundles"
	OpApplySweep      = "apply_sweep"
	OpScanBacklog     = "scan_backlog"
	OpChangedBacklog  = "changed_backlog"
	OpReadFigures     = "read_figures"
	OpWriteFigures    = "write_figures"
	OpDueRecipients   = "due_recipients"
	OpNotices         = "notices"
	OpRemoveNotices   = "remove_notices"
	OpDequeuedBundle  = "dequeued_bundle"
	OpRingBell        = "ring_bell"
	OpReadBells       = "read_bells"
	OpBackup          = "backup"
)

// Store wraps a store.Store with metrics.
type Store struct {
	next    store.Store
	metrics *telemetry.Metrics
	now     func() time.Time
}

// New returns next instrumented with m.
func New(next store.Store, m *telemetry.Metrics) *Store {
	return &Store{next: next, metrics: m, now: time.Now}
}

// observe records one operation that started at start and ended with err.
func (s *Store) observe(ctx context.Context, op string, start time.Time, err error) {
	s.metrics.RecordStoreOperation(ctx, op, s.now().Sub(start), ErrorKind(err))
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
	start := s.now()
	st, err := s.next.LoadRecipient(ctx, recipient, opts...)
	s.observe(ctx, OpLoadRecipient, start, err)
	return st, err
}

// MarkIdle implements store.Store. A refused mark is recorded like any
// failure, though the hub ignores it (the mark is a hint).
func (s *Store) MarkIdle(ctx context.Context, recipient string, head store.Head) error {
	start := s.now()
	err := s.next.MarkIdle(ctx, recipient, head)
	s.observe(ctx, OpMarkIdle, start, err)
	return err
}

// ReadDrawer implements store.Store.
func (s *Store) ReadDrawer(ctx context.Context, drawerID string, from, to int64, limit int) ([]drawer.Item, error) {
	start := s.now()
	items, err := s.next.ReadDrawer(ctx, drawerID, from, to, limit)
	s.observe(ctx, OpReadDrawer, start, err)
	return items, err
}

// LookupIDs implements store.Store.
func (s *Store) LookupIDs(ctx context.Context, ids []string) (map[string]store.IDRecord, error) {
	start := s.now()
	recs, err := s.next.LookupIDs(ctx, ids)
	s.observe(ctx, OpLookupIDs, start, err)
	return recs, err
}

// CommitSaves implements store.Store. Saved notifications are counted by
// the transport from the Save's result, which also knows the duplicates.
func (s *Store) CommitSaves(ctx context.Context, saves []store.RecipientSave) error {
	start := s.now()
	err := s.next.CommitSaves(ctx, saves)
	s.observe(ctx, OpCommitSaves, start, err)
	return err
}

// BundleExists implements store.Store.
func (s *Store) BundleExists(ctx context.Context, recipient, bundleID string) (bool, error) {
	start := s.now()
	ok, err := s.next.BundleExists(ctx, recipient, bundleID)
	s.observe(ctx, OpBundleExists, start, err)
	return ok, err
}

// CreateBundle implements store.Store; a stored bundle is a new bundle
// cut by Peek. Concurrent peeks that lose the race get a conflict and are not
// counted, so each bundle counts once.
func (s *Store) CreateBundle(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	start := s.now()
	err := s.next.CreateBundle(ctx, recipient, rec, cursor)
	s.observe(ctx, OpCreateBundle, start, err)
	if err == nil {
		s.metrics.RecordBundleCreated(ctx, rec.Count, rec.Weight)
	}
	return err
}

// Acknowledge implements store.Store; success is a dequeued bundle.
func (s *Store) Acknowledge(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	start := s.now()
	err := s.next.Acknowledge(ctx, recipient, rec, cursor)
	s.observe(ctx, OpAcknowledge, start, err)
	if err == nil {
		s.metrics.RecordBundleDequeued(ctx, rec.Count)
	}
	return err
}

// ReleaseBundle implements store.Store.
func (s *Store) ReleaseBundle(ctx context.Context, recipient string, rec bundle.Record) error {
	start := s.now()
	err := s.next.ReleaseBundle(ctx, recipient, rec)
	s.observe(ctx, OpReleaseBundle, start, err)
	return err
}

// Recipients implements store.Store. The time spent in fn (retention's
// work per recipient, itself made of store operations) is not counted, nor is
// an error fn returned.
func (s *Store) Recipients(ctx context.Context, fn func(recipient string) error) error {
	return visit(ctx, s, OpRecipients, func(fn func(string) error) error { return s.next.Recipients(ctx, fn) }, fn)
}

// visit records one operation of a backend that calls fn for many items
// (run): the time spent in fn, itself made of store operations, is not
// counted, nor is an error fn returned.
func visit[T any](ctx context.Context, s *Store, op string, run func(func(T) error) error, fn func(T) error) error {
	start := s.now()
	var (
		inFn  time.Duration
		fnErr error
	)
	err := run(func(v T) error {
		t := s.now()
		fnErr = fn(v)
		inFn += s.now().Sub(t)
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
	start := s.now()
	recs, err := s.next.DequeuedBundles(ctx, recipient)
	s.observe(ctx, OpDequeuedBundles, start, err)
	return recs, err
}

// ApplySweep implements store.Store.
func (s *Store) ApplySweep(ctx context.Context, sweep store.Sweep) error {
	start := s.now()
	err := s.next.ApplySweep(ctx, sweep)
	s.observe(ctx, OpApplySweep, start, err)
	return err
}

// ScanBacklog implements store.Figures. The time spent in fn is not
// counted.
func (s *Store) ScanBacklog(ctx context.Context, fn func(store.RecipientRecords) error) (float64, error) {
	var cost float64
	err := visit(ctx, s, OpScanBacklog, func(fn func(store.RecipientRecords) error) (err error) {
		cost, err = s.next.ScanBacklog(ctx, fn)
		return err
	}, fn)
	return cost, err
}

// ChangedBacklog implements store.Figures.
func (s *Store) ChangedBacklog(ctx context.Context, cursor string) (store.BacklogChanges, error) {
	start := s.now()
	c, err := s.next.ChangedBacklog(ctx, cursor)
	s.observe(ctx, OpChangedBacklog, start, err)
	return c, err
}

// ReadFigures implements store.Figures.
func (s *Store) ReadFigures(ctx context.Context, parts store.FigureParts) (store.BacklogFigures, error) {
	start := s.now()
	f, err := s.next.ReadFigures(ctx, parts)
	s.observe(ctx, OpReadFigures, start, err)
	return f, err
}

// WriteFigures implements store.Figures.
func (s *Store) WriteFigures(ctx context.Context, f store.BacklogFigures, parts store.FigureParts) error {
	start := s.now()
	err := s.next.WriteFigures(ctx, f, parts)
	s.observe(ctx, OpWriteFigures, start, err)
	return err
}

// HoldFiguresLease implements store.Figures.
func (s *Store) HoldFiguresLease(ctx context.Context, holder string, d time.Duration) (bool, error) {
	return s.next.HoldFiguresLease(ctx, holder, d)
}

// ReleaseFiguresLease implements store.Figures.
func (s *Store) ReleaseFiguresLease(ctx context.Context, holder string) error {
	return s.next.ReleaseFiguresLease(ctx, holder)
}

// DueRecipients implements store.Retention. The time spent in fn is not
// counted.
func (s *Store) DueRecipients(ctx context.Context, dueBefore, since time.Time, fn func(recipient string) error) error {
	return visit(ctx, s, OpDueRecipients, func(fn func(string) error) error {
		return s.next.DueRecipients(ctx, dueBefore, since, fn)
	}, fn)
}

// Notices implements store.Outbox.
func (s *Store) Notices(ctx context.Context, origins []domain.Origin, limit int) ([]store.Notice, error) {
	start := s.now()
	n, err := s.next.Notices(ctx, origins, limit)
	s.observe(ctx, OpNotices, start, err)
	return n, err
}

// RemoveNotices implements store.Outbox.
func (s *Store) RemoveNotices(ctx context.Context, notices []store.Notice) error {
	start := s.now()
	err := s.next.RemoveNotices(ctx, notices)
	s.observe(ctx, OpRemoveNotices, start, err)
	return err
}

// NoticeBacklog implements store.Outbox.
func (s *Store) NoticeBacklog(ctx context.Context) (int, time.Time, error) {
	return s.next.NoticeBacklog(ctx)
}

// DequeuedBundle implements store.Outbox.
func (s *Store) DequeuedBundle(ctx context.Context, recipient, bundleID string) (bundle.Record, error) {
	start := s.now()
	rec, err := s.next.DequeuedBundle(ctx, recipient, bundleID)
	s.observe(ctx, OpDequeuedBundle, start, err)
	return rec, err
}

// Close implements store.Store.
func (s *Store) Close() error { return s.next.Close() }

// Backup implements store.Store.
func (s *Store) Backup(ctx context.Context, dir string) error {
	start := s.now()
	err := s.next.Backup(ctx, dir)
	s.observe(ctx, OpBackup, start, err)
	return err
}

var _ store.Store = (*Store)(nil)

// HoldSweepLease implements store.Coordination.
func (s *Store) HoldSweepLease(ctx context.Context, holder string, d time.Duration) (bool, error) {
	return s.next.HoldSweepLease(ctx, holder, d)
}

// ReleaseSweepLease implements store.Coordination.
func (s *Store) ReleaseSweepLease(ctx context.Context, holder string) error {
	return s.next.ReleaseSweepLease(ctx, holder)
}

// LowPriority implements store.Coordination.
func (s *Store) LowPriority(ctx context.Context) context.Context { return s.next.LowPriority(ctx) }

// AcquireBuild implements store.Coordination.
func (s *Store) AcquireBuild(ctx context.Context, recipient, bundleID, holder string, d time.Duration) (string, time.Time, error) {
	return s.next.AcquireBuild(ctx, recipient, bundleID, holder, d)
}

// ReleaseBuild implements store.Coordination.
func (s *Store) ReleaseBuild(ctx context.Context, recipient, bundleID, holder string) error {
	return s.next.ReleaseBuild(ctx, recipient, bundleID, holder)
}

// RingBell implements store.Coordination.
func (s *Store) RingBell(ctx context.Context, recipients []string) error {
	start := s.now()
	err := s.next.RingBell(ctx, recipients)
	s.observe(ctx, OpRingBell, start, err)
	return err
}

// ReadBells implements store.Coordination.
func (s *Store) ReadBells(ctx context.Context, cursor string) ([]string, string, error) {
	start := s.now()
	recipients, next, err := s.next.ReadBells(ctx, cursor)
	s.observe(ctx, OpReadBells, start, err)
	return recipients, next, err
}
