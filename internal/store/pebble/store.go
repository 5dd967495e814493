// Package pebble is the default Store: a crash-safe on-disk database in one
// folder, built on pebble (an LSM key-value store with a write-ahead log).
// Writes are group-committed: each group is one atomic pebble batch synced to
// disk before any of it is visible or acknowledged.
package pebble

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/groupcommit"
	"github.com/energydatahub/messagehub/internal/lograte"
	"github.com/energydatahub/messagehub/internal/store"
)

// Store is the embedded store.Store. One process opens it, so its
// leases are always its own (store.Solo).
type Store struct {
	store.Solo

	db      *pebble.DB
	dir     string
	fs      *checkpointFS
	version atomic.Uint64
	logger  *slog.Logger

	// Writes go through one writer goroutine (writer.go). ids, unsynced and
	// applyErr are its own; syncErr belongs to the goroutine that finishes
	// groups.
	writer    *groupcommit.Pipeline[writeReq]
	ids       *idIndex // see idindex.go; its table is changed only by the writer
	lastGroup uint32   // the writer's: see nextGroup
	unsynced  unsyncedRecords
	applyErr  error // a group that could not be applied: every later one fails
	syncErr   error
	closeOnce sync.Once
	backupMu  sync.Mutex // held by a backup under way, and by Close to set closed
	closed    bool
	readOnly  bool
	unindexed bool                     // data of unindexedVersion, opened read-only (checkFormat)
	refusal   error                    // while readOnly, what every write fails with (Options.ReadOnly)
	room      func(bytes uint64) error // see Options

	// durability says which write groups applied to pebble are durable
	// (durable.go): reads of pebble whose answers go out wait for it.
	durability durability

	// cache holds the published control records of recipients with data
	// (records.go). Records are never changed once published.
	cacheMu    sync.RWMutex
	cache      map[[16]byte]*records
	pinned     map[[16]byte]int // per recipient, the write groups changing its records not yet published (pin)
	cacheEpoch uint64           // counts eviction rounds that dropped records
	evictStop  chan struct{}    // closed by Close

	// noticesAt is where the next Notices call goes on (notices.go).
	noticesAt noticeResume
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the store in dir.
func Open(dir string, logger *slog.Logger) (*Store, error) { return OpenWith(dir, logger, Options{}) }

// Options are how a store is opened beyond its folder. The zero value opens
// it for writing, creating it if needed.
type Options struct {
	// ReadOnly, when set, opens the store that is in the folder read-only:
	// it serves what is stored and every write fails with ReadOnly. It is
	// for a data volume almost full at start, where pebble's start-up
	// flush of its log would need space it cannot have and would wait for
	// it forever. With no store there yet, opening fails, wrapping it.
	ReadOnly error
	// Room, when set, is asked at Close whether the id index's bytes may
	// be written to the volume; when it refuses, the index is not saved
	// (the next start indexes the stored ids instead), for saving it ends
	// with a write to pebble, which panics on a full disk.
	Room func(bytes uint64) error
}

// tableBlockSize is the uncompressed size of the tables' blocks.
const tableBlockSize = 32 << 10

// OpenWith opens the store in dir as o says.
func OpenWith(dir string, logger *slog.Logger, o Options) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// A large memtable absorbs bursts of saves without write stalls.
	fs := &checkpointFS{FS: vfs.Default}
	opts := &pebble.Options{FS: fs, Logger: &pebbleLogger{l: logger, errors: lograte.Limiter{Max: pebbleErrorsPerSecond}}, MemTableSize: 64 << 20}
	// Nearly every key a save writes lands all over the key space (recipients,
	// drawers), so every flush overlaps the level below it, and compacting
	// L0 at pebble's default of 4 sublevels rewrites that level again and
	// again. Reads hardly mind a deeper L0: id records are found through the
	// id index (no reads for new ids), control records are in memory, and a
	// peek reads a few drawer pages. Saves of 1,000 over 100 recipients
	// (BenchmarkSaveBatch1000Over100Recipients) spend less CPU at 16; the
	// figures are in docs/performance.md.
	opts.L0CompactionThreshold = 16
	opts.L0StopWritesThreshold = 48
	// The level L0 is compacted into may hold 256 MB instead of pebble's 64:
	// with a backlog of 10 M (1.3 GB) that is one level fewer for every
	// flushed byte to be rewritten through (the load runs at 10 M in
	// docs/performance.md). Small stores are not affected.
	opts.LBaseMaxBytes = 256 << 20
	// Most point reads are for keys that do not exist (a bundle id never
	// dequeued): bloom filters answer those without reading table blocks.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		opts.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.SnappyCompression }
		// Pebble writes a table through a 4 KB buffer, so its default 4 KB
		// blocks cost a write(2) each, and flushes and compactions write most
		// of the bytes a save makes; peeks scan drawers' pages, which larger
		// blocks suit too (the load runs at 10 M in docs/performance.md).
		opts.Levels[i].BlockSize = tableBlockSize
	}
	// Tables flushed to L0 are soon compacted into the level below, so they
	// are not compressed only to be decompressed again (Saves of 1,000 over
	// 100 recipients; docs/performance.md).
	opts.Levels[0].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
	if !holdsStore(dir) {
		if o.ReadOnly != nil {
			return nil, fmt.Errorf("open embedded store in %s: no store there yet to open read-only: %w", dir, o.ReadOnly)
		}
		if err := checkNoStoreInside(dir); err != nil {
			return nil, err
		}
	}
	if o.ReadOnly != nil {
		opts.ReadOnly = true
		// Whoever asked says why (the disk guard logs the full volume).
		logger.Error("the embedded store is opened read-only: its writes fail until the hub is restarted", "dir", dir)
	}
	db, err := pebble.Open(dir, opts)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		// pebble's lock on the directory is held: another process has it open.
		return nil, fmt.Errorf("open embedded store: the data directory %s is in use by another process%s; "+
			"stop it or give this one another --data-dir", dir, holder(dir))
	}
	if err != nil {
		return nil, fmt.Errorf("open embedded store in %s: %w", dir, err)
	}
	unindexed, err := checkFormat(db, opts.ReadOnly)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open embedded store in %s: %w", dir, err)
	}
	// Tell a second process who holds the directory; only read while locked.
	_ = os.WriteFile(filepath.Join(dir, pidFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600)
	s := &Store{
		db: db, dir: dir, fs: fs, logger: logger, cache: make(map[[16]byte]*records), pinned: map[[16]byte]int{}, readOnly: opts.ReadOnly, refusal: o.ReadOnly, room: o.Room, unindexed: unindexed,
		unsynced:  unsyncedRecords{latest: map[[16]byte]unsyncedRecord{}},
		evictStop: make(chan struct{}),
	}
	if err := s.openIDIndex(dir); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("index the ids in %s: %w", dir, err)
	}
	// Versions only need to differ from every earlier one of the same record;
	// the clock at start keeps them increasing across restarts.
	s.version.Store(uint64(time.Now().UnixNano()))
	s.writer = groupcommit.New(maxWriteGroup, groupcommit.Options[writeReq]{MaxWeight: maxWriteGroup, Prepare: s.applyGroup})
	go s.evictLoop()
	return s, nil
}

// holdsStore says whether dir holds a store (pebble's manifest).
func holdsStore(dir string) bool {
	manifests, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	return len(manifests) > 0
}

// checkNoStoreInside refuses to create a store in dir when a folder of dir
// holds one: a backup copied into the data directory rather than as it
// (cp -a BACKUP data with data made already, a backup copied into a new
// volume then mounted as the data directory). A store made beside it
// would serve nothing while the backup sits unused.
func checkNoStoreInside(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil // a new directory, or one pebble says why it cannot use
	}
	for _, e := range entries {
		if sub := filepath.Join(dir, e.Name()); e.IsDir() && holdsStore(sub) {
			return fmt.Errorf("open embedded store: the data directory %s holds no store, but its folder %s does "+
				"(a backup copied into the data directory rather than as it?): give that folder as --data-dir, "+
				"or move its contents up into %s; no new store is created beside it", dir, sub, dir)
		}
	}
	return nil
}

// pidFile names the process that has the directory open.
const pidFile = "messagehub.pid"

// holder says which process has dir open, as far as its pid file tells.
func holder(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, pidFile)) //nolint:gosec // the operator's data directory
	if pid := strings.TrimSpace(string(data)); err == nil && pid != "" {
		return " (pid " + pid + ")"
	}
	return ""
}

// Close lets queued writes finish, saves the id index and closes the
// database.
func (s *Store) Close() error {
	first := false
	s.closeOnce.Do(func() { close(s.evictStop); first = true })
	s.writer.Close()
	s.backupMu.Lock()
	s.closed = true
	s.backupMu.Unlock()
	if first && !s.readOnly && s.syncErr == nil {
		// Without it the next start only takes longer.
		err := s.roomForIDIndex()
		if err == nil {
			err = s.saveIDIndex(s.dir)
		}
		if err != nil {
			s.logger.Warn("saving the id index failed; the next start indexes the stored ids", "err", err)
		}
	}
	if first {
		s.ids.free() // mapped outside the heap: nothing else would return it
	}
	return s.db.Close()
}

// roomForIDIndex asks Options.Room whether the id index's file fits on the
// volume: its slots, and a little for its header and checksum.
func (s *Store) roomForIDIndex() error {
	if s.room == nil {
		return nil
	}
	return s.room(uint64(len(s.ids.slots))*8 + 1<<10)
}

func (s *Store) nextVersion() string { return strconv.FormatUint(s.version.Add(1), 36) }

// LoadRecipient returns the recipient's control records from memory. The
// options are for remote stores: reading here costs no request, so every
// load is the whole, fresh state (never Idle).
func (s *Store) LoadRecipient(ctx context.Context, recipient string, _ ...store.LoadOption) (store.RecipientState, error) {
	r, err := uuidBytes(recipient)
	if err != nil {
		return store.RecipientState{}, err
	}
	if rec := s.cached(r); rec != nil {
		return rec.state(), nil
	}
	s.cacheMu.RLock()
	epoch := s.cacheEpoch
	s.cacheMu.RUnlock()
	rec, err := s.readRecords(r)
	if err != nil {
		return store.RecipientState{}, err
	}
	// Pebble shows a write group before its fsync, so what was read may not
	// be durable. But the writer publishes what it read of a recipient
	// before it applies a change to it, and keeps it published until the
	// change is durable (pin): if records were published meanwhile, they are
	// durable and win. Only recipients that have data are kept in
	// memory, so peeks for unknown recipients cannot grow the cache. If an
	// eviction round ran meanwhile, newer records may have gone: then what
	// was read is returned but not kept.
	s.cacheMu.Lock()
	if cur := s.cache[r]; cur != nil {
		rec = cur
	} else if rec.head.Version != "" && s.cacheEpoch == epoch {
		rec.used.Store(true)
		s.cache[r] = rec
	}
	s.cacheMu.Unlock()
	return rec.state(), nil
}

// MarkIdle implements store.Store: the embedded store keeps no mark, as its
// loads are read from memory and cost nothing to spare.
func (s *Store) MarkIdle(context.Context, string, store.Head) error { return nil }

// ReadDrawer decodes the drawer's pages that overlap [from, to).
func (s *Store) ReadDrawer(ctx context.Context, drawerID string, from, to int64, limit int) ([]drawer.Item, error) {
	d, err := uuidBytes(drawerID)
	if err != nil {
		return nil, err
	}
	prefix := drawerPrefix(d)
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: pageKey(d, to)})
	if err != nil {
		return nil, err
	}
	defer iter.Close()
	// Start at the page holding from: the last one starting at or before it.
	if !iter.SeekLT(pageKey(d, from+1)) {
		iter.First()
	}
	var items []drawer.Item
	for ; iter.Valid() && len(items) < limit; iter.Next() {
		pr := newPageReader(iter.Value())
		for it, ok := pr.next(); ok && len(items) < limit; it, ok = pr.next() {
			if it.Pos >= from && it.Pos < to {
				items = append(items, it)
			}
		}
		if pr.err != nil {
			return nil, fmt.Errorf("drawer %s: %w", drawerID, pr.err)
		}
	}
	return items, iter.Error()
}

// ReadDrawerLatest is ReadDrawer: one process writes and reads the store,
// so no read lags.
func (s *Store) ReadDrawerLatest(ctx context.Context, drawerID string, from, to int64, limit int) ([]drawer.Item, error) {
	return s.ReadDrawer(ctx, drawerID, from, to, limit)
}

// LookupIDs gets each id's record; absent ids are left out. It answers
// once what it read is durable: pebble shows a save's id records before its
// fsync, and a trace (its caller) would tell of a notification that the
// recipient's published records do not hold yet, and that a failed fsync
// or a power loss undoes.
func (s *Store) LookupIDs(ctx context.Context, ids []string) (map[string]store.IDRecord, error) {
	found := make(map[string]store.IDRecord)
	for _, id := range ids {
		k, err := uuidBytes(id)
		if err != nil {
			return nil, err
		}
		_, v, ok, err := s.storedID(&k)
		if err != nil {
			return nil, err
		}
		if ok {
			if found[id], err = decodeIDRecord(id, v); err != nil {
				return nil, err
			}
		}
	}
	if err := s.durability.settled(ctx); err != nil {
		return nil, err
	}
	return found, nil
}

// BundleExists looks for the id among pending and dequeued (or released)
// bundles.
func (s *Store) BundleExists(ctx context.Context, recipient, bundleID string) (bool, error) {
	st, err := s.LoadRecipient(ctx, recipient)
	if err != nil {
		return false, err
	}
	if slices.ContainsFunc(st.Pending, func(b bundle.Record) bool { return b.ID == bundleID }) {
		return true, nil
	}
	r, id, err := parseIDs(recipient, bundleID)
	if err != nil {
		return false, err
	}
	_, ok, err := s.get(dequeuedKey(r, id))
	return ok, err
}

// Recipients calls fn once per recipient that has a head.
func (s *Store) Recipients(ctx context.Context, fn func(recipient string) error) error {
	var recipients []string
	err := s.scan([]byte{prefixRecipient}, func(key, _ []byte) error {
		if len(key) == 18 && key[17] == kindHead {
			recipients = append(recipients, uuidString(key[1:17]))
		}
		return nil
	})
	if err != nil {
		return err
	}
	return each(ctx, recipients, fn)
}

// each calls fn for every recipient until one fails or ctx ends: the
// visits of recipients run after the scan that listed them, so that fn may
// write.
func each(ctx context.Context, recipients []string, fn func(recipient string) error) error {
	for _, r := range recipients {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// DequeuedBundles lists the recipient's dequeued and released bundles.
func (s *Store) DequeuedBundles(ctx context.Context, recipient string) ([]bundle.Record, error) {
	r, err := uuidBytes(recipient)
	if err != nil {
		return nil, err
	}
	var out []bundle.Record
	err = s.scan(dequeuedPrefix(r), func(_, value []byte) error {
		var rec bundle.Record
		if err := json.Unmarshal(value, &rec); err != nil {
			return err
		}
		out = append(out, rec)
		return nil
	})
	return out, err
}

func (s *Store) get(key []byte) ([]byte, bool, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), true, nil
}

// scan calls fn for every key with the prefix, in order. The slices are only
// valid during the call.
func (s *Store) scan(prefix []byte, fn func(key, value []byte) error) error {
	return s.scanRange(prefix, prefixEnd(prefix), fn)
}

// scanRange calls fn for every key in [lo, hi), in order.
func (s *Store) scanRange(lo, hi []byte, fn func(key, value []byte) error) error {
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	for iter.First(); iter.Valid(); iter.Next() {
		if err := fn(iter.Key(), iter.Value()); err != nil {
			iter.Close()
			return err
		}
	}
	return iter.Close() // and the iterator's error, if it met one
}

// pebbleErrorsPerSecond bounds pebble's error lines: a background job that
// fails and retries (a compaction on a full disk) must not flood the log.
const pebbleErrorsPerSecond = 5

// PebbleInfoLevel is the level of pebble's own informational lines (its
// log's recovery at open, and the like): below debug, so that the hub's
// debug lines (the access log) are not mixed with them; --log-level
// debug-4 shows them. Its errors are at error. Every line of pebble's has
// component=pebble.
const PebbleInfoLevel = slog.LevelDebug - 4

// pebbleLogger sends pebble's messages to slog.
type pebbleLogger struct {
	l      *slog.Logger
	errors lograte.Limiter
}

func (p *pebbleLogger) Infof(format string, args ...any) {
	if p.l.Enabled(context.Background(), PebbleInfoLevel) {
		p.l.Log(context.Background(), PebbleInfoLevel, fmt.Sprintf(format, args...), "component", "pebble")
	}
}

func (p *pebbleLogger) Errorf(format string, args ...any) {
	if ok, held := p.errors.Allow(time.Now()); ok {
		p.l.Error(fmt.Sprintf(format, args...), "component", "pebble", "held_back_since_last", held)
	}
}

func (p *pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
	panic(fmt.Sprintf(format, args...))
}
