package diskguard

import (
	"context"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// Store returns next with the guard in front of its writes: saves
// (CommitSaves) are refused below the reserve, every other write
// (new bundles, dequeues, sweeps, notices, leases) below the floor, each
// with an estimate of the bytes it puts on the volume counted against it.
// Reads always pass.
func Store(next store.Store, g *Guard) store.Store {
	return &guardedStore{Store: next, g: g}
}

// Estimates of what a write puts on the volume. They err on the large
// side: a write's bytes are counted only until the next look, which then
// measures what they really took.
const (
	// recordBytes is a record's share beyond the strings it holds: its
	// key, the store's framing of it (pebble: an 8-byte trailer and length
	// prefixes in the log and in tables) and its numbers.
	recordBytes = 32
	// itemBytes are the numbers of one notification in its drawer's page.
	itemBytes = 24
	// drawerMetaBytes is one drawer listed in a catalog entry or a bundle.
	drawerMetaBytes = 48
	// fingerprintBytes is an id record's fingerprint of its notification.
	fingerprintBytes = 16
	// bundleBytes is a bundle record's numbers, state and times.
	bundleBytes = 256
	// writeFactor covers the copies of a record on the volume at once: in
	// the write-ahead log, in the table its memtable is flushed to, and in
	// a compaction's output before the table it rewrites is deleted.
	writeFactor = 3
)

// SaveBytes estimates what saves put on the volume: their records, as the
// store encodes them, times writeFactor. A notification with a 36-byte id
// and a 1-byte document type counts (61 + 120) × 3 = 543 bytes; pebble's
// log takes about 76 bytes of it.
func SaveBytes(saves []store.RecipientSave) uint64 {
	var n int
	for _, s := range saves {
		n += recordBytes // the head
		for _, e := range s.Entries {
			n += entryBytes(e)
		}
		for _, p := range s.Pages {
			n += recordBytes + len(p.DrawerID)
			for _, it := range p.Items {
				n += itemBytes + len(it.ID) + len(it.DocumentType)
			}
		}
		for _, id := range s.IDs {
			n += recordBytes + len(id.ID) + len(id.DrawerID) + fingerprintBytes
		}
	}
	return uint64(n) * writeFactor //nolint:gosec // a sum of lengths is not negative
}

func entryBytes(e catalog.Entry) int {
	return recordBytes + len(e.ContentType) + drawersBytes(e.Drawers)
}

func drawersBytes(ds []drawer.Meta) int {
	n := 0
	for _, d := range ds {
		n += drawerMetaBytes + len(d.ID)
	}
	return n
}

func bundleRecordBytes(rec bundle.Record, cursor catalog.Cursor) uint64 {
	n := bundleBytes + len(rec.ID) + len(rec.ContentType) + drawersBytes(rec.Drawers)
	for _, t := range rec.DocumentTypes {
		n += len(t)
	}
	n += recordBytes + len(cursor.ContentType)
	if rec.Notice {
		n += recordBytes + len(rec.ID) // the notice
	}
	return uint64(n) * writeFactor //nolint:gosec // a sum of lengths is not negative
}

func sweepBytes(sw store.Sweep) uint64 {
	// Deleted records leave tombstones until compactions drop them.
	n := (len(sw.Bundles)+len(sw.Drawers)+len(sw.DeleteEntries)+len(sw.DeleteCursors))*recordBytes + recordBytes
	for _, e := range sw.Entries {
		n += entryBytes(e)
	}
	return uint64(n) * writeFactor //nolint:gosec // a sum of lengths is not negative
}

// leaseBytes is a lease record, for stores that write one.
const leaseBytes = 4 * recordBytes * writeFactor

// guardedStore guards the writes named below; reads, and the writes that
// put nothing on the volume, pass to the embedded Store: MarkIdle (the
// embedded store keeps no mark, and a mark is only a hint) and RingBell (a
// bell tells other instances of a save already stored; the store one
// process opens writes nothing for it).
type guardedStore struct {
	store.Store
	g *Guard
}

// write runs fn with n bytes taken below limit: refused when they do not
// fit, counted as written since the last look when fn succeeds.
func (s *guardedStore) write(n, limit uint64, fn func() error) error {
	if err := s.g.take(n, limit); err != nil {
		return err
	}
	err := fn()
	s.g.give(n, err == nil)
	return err
}

// CommitSaves is refused below the reserve, every other write below the
// floor.
func (s *guardedStore) CommitSaves(ctx context.Context, saves []store.RecipientSave) error {
	return s.write(SaveBytes(saves), s.g.reserve, func() error { return s.Store.CommitSaves(ctx, saves) })
}

func (s *guardedStore) CreateBundle(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	return s.write(bundleRecordBytes(rec, cursor), s.g.Floor(), func() error { return s.Store.CreateBundle(ctx, recipient, rec, cursor) })
}

func (s *guardedStore) Acknowledge(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	return s.write(bundleRecordBytes(rec, cursor), s.g.Floor(), func() error { return s.Store.Acknowledge(ctx, recipient, rec, cursor) })
}

func (s *guardedStore) ReleaseBundle(ctx context.Context, recipient string, rec bundle.Record) error {
	return s.write(bundleRecordBytes(rec, catalog.Cursor{}), s.g.Floor(), func() error { return s.Store.ReleaseBundle(ctx, recipient, rec) })
}

func (s *guardedStore) ApplySweep(ctx context.Context, sweep store.Sweep) error {
	return s.write(sweepBytes(sweep), s.g.Floor(), func() error { return s.Store.ApplySweep(ctx, sweep) })
}

func (s *guardedStore) RemoveNotices(ctx context.Context, notices []store.Notice) error {
	n := uint64(len(notices)+1) * recordBytes * writeFactor //nolint:gosec // a length is not negative
	return s.write(n, s.g.Floor(), func() error { return s.Store.RemoveNotices(ctx, notices) })
}

func (s *guardedStore) HoldSweepLease(ctx context.Context, holder string, d time.Duration) (held bool, err error) {
	err = s.write(leaseBytes, s.g.Floor(), func() (err error) {
		held, err = s.Store.HoldSweepLease(ctx, holder, d)
		return err
	})
	return held, err
}

func (s *guardedStore) ReleaseSweepLease(ctx context.Context, holder string) error {
	return s.write(leaseBytes, s.g.Floor(), func() error { return s.Store.ReleaseSweepLease(ctx, holder) })
}

func (s *guardedStore) WriteFigures(ctx context.Context, holder string, f store.BacklogFigures, parts store.FigureParts) error {
	n := uint64(len(f.Oldest)+len(f.Largest)+len(f.History)+1) * recordBytes * writeFactor //nolint:gosec // lengths are not negative
	return s.write(n, s.g.Floor(), func() error { return s.Store.WriteFigures(ctx, holder, f, parts) })
}

func (s *guardedStore) AcquireBuild(ctx context.Context, recipient, bundleID, holder string, d time.Duration) (current string, until time.Time, err error) {
	err = s.write(leaseBytes, s.g.Floor(), func() (err error) {
		current, until, err = s.Store.AcquireBuild(ctx, recipient, bundleID, holder, d)
		return err
	})
	return current, until, err
}

func (s *guardedStore) ReleaseBuild(ctx context.Context, recipient, bundleID, holder string) error {
	return s.write(leaseBytes, s.g.Floor(), func() error { return s.Store.ReleaseBuild(ctx, recipient, bundleID, holder) })
}
