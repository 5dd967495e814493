// Package embedded is the default Store: a crash-safe on-disk database in one
// folder, built on pebble (an LSM key-value store with a write-ahead log).
// Every write is one atomic pebble batch synced to disk before it returns.
package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/repository"
)

// Store is the embedded repository.Store.
type Store struct {
	db *pebble.DB
	// writeMu makes each conditional write atomic: versions are checked and
	// the batch committed without another write in between. Reads do not
	// take it; they see committed data only.
	writeMu sync.Mutex
	version atomic.Uint64

	cacheMu sync.RWMutex
	cache   map[[16]byte]*records // see records.go

	ids    idFilter // under writeMu; see idfilter.go
	logger *slog.Logger
}

var _ repository.Store = (*Store)(nil)

// Open opens (creating if needed) the store in dir.
func Open(dir string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// A large memtable absorbs bursts of saves without write stalls.
	opts := &pebble.Options{Logger: pebbleLogger{logger}, MemTableSize: 64 << 20}
	// Most id lookups are for ids that do not exist yet: bloom filters answer
	// those without reading table blocks.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("open embedded store in %s: %w", dir, err)
	}
	s := &Store{db: db, cache: make(map[[16]byte]*records), logger: logger}
	if err := s.buildIDFilter(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("index the ids in %s: %w", dir, err)
	}
	// Versions only need to differ from every earlier one of the same record;
	// the clock at start keeps them increasing across restarts.
	s.version.Store(uint64(time.Now().UnixNano()))
	return s, nil
}

// Close flushes and closes the database.
func (s *Store) Close() error { return s.db.Close() }

func (s *Store) nextVersion() string { return strconv.FormatUint(s.version.Add(1), 36) }

// LoadRecipient returns the recipient's control records from memory.
func (s *Store) LoadRecipient(ctx context.Context, recipient string) (repository.RecipientState, error) {
	r, err := uuidBytes(recipient)
	if err != nil {
		return repository.RecipientState{}, err
	}
	rec := s.cached(r)
	if rec == nil {
		// Only recipients that have data are kept in memory, so peeks for
		// unknown recipients cannot grow the cache. A read without the lock
		// sees a committed state; one with a head is then cached under it.
		if rec, err = s.readRecords(r); err != nil || rec.head.Version == "" {
			return rec.state(), err
		}
		s.writeMu.Lock()
		rec, err = s.recordsLocked(r)
		s.writeMu.Unlock()
		if err != nil {
			return repository.RecipientState{}, err
		}
	}
	s.cacheMu.RLock()
	defer s.cacheMu.RUnlock()
	return rec.state(), nil
}

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

// LookupIDs gets each id's record; absent ids are left out.
func (s *Store) LookupIDs(ctx context.Context, ids []string) (map[string]repository.IDRecord, error) {
	found := make(map[string]repository.IDRecord)
	for _, id := range ids {
		k, err := uuidBytes(id)
		if err != nil {
			return nil, err
		}
		v, ok, err := s.get(idKey(k))
		if err != nil {
			return nil, err
		}
		if ok {
			if found[id], err = decodeIDRecord(id, v); err != nil {
				return nil, err
			}
		}
	}
	return found, nil
}

// CommitSaves writes every recipient's save in one synced batch.
func (s *Store) CommitSaves(ctx context.Context, saves []repository.RecipientSave) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	existing := make(map[string]repository.IDRecord)
	var newIDs [][]byte
	type applied struct {
		rec     *records
		head    repository.Head
		entries []catalog.Entry
	}
	var done []applied
	for _, save := range saves {
		r, err := uuidBytes(save.Recipient)
		if err != nil {
			return err
		}
		rec, err := s.recordsLocked(r)
		if err != nil {
			return err
		}
		if rec.head.Version != save.Head.Version {
			return conflict("head of %s changed", save.Recipient)
		}
		a := applied{rec: rec, head: save.Head}
		a.head.Version = s.nextVersion()
		if err := setJSON(b, headKey(r), a.head); err != nil {
			return err
		}
		for _, e := range save.Entries {
			if rec.entryVersion(e.Key()) != e.Version {
				return conflict("catalog entry %v of %s changed", e.Key(), save.Recipient)
			}
			e.Version = s.nextVersion()
			if err := setJSON(b, cabinetKey(kindEntry, r, e.Key()), e); err != nil {
				return err
			}
			a.entries = append(a.entries, e)
		}
		done = append(done, a)
		for _, p := range save.Pages {
			d, err := uuidBytes(p.DrawerID)
			if err != nil {
				return err
			}
			v, err := encodePage(p.Items)
			if err != nil {
				return err
			}
			if err := b.Set(pageKey(d, p.Start()), v, nil); err != nil {
				return err
			}
		}
		// In key order, successive lookups walk nearby parts of the
		// memtable's skiplist, which the CPU caches keep warm.
		ids := slices.SortedFunc(slices.Values(save.IDs), func(a, b repository.IDRecord) int { return strings.Compare(a.ID, b.ID) })
		for _, idRec := range ids {
			id, err := uuidBytes(idRec.ID)
			if err != nil {
				return err
			}
			key := idKey(id)
			var stored []byte
			exists := false
			if s.ids.mayExist(key) {
				if stored, exists, err = s.get(key); err != nil {
					return err
				}
			}
			if exists {
				if existing[idRec.ID], err = decodeIDRecord(idRec.ID, stored); err != nil {
					return err
				}
				continue
			}
			v, err := encodeIDRecord(idRec)
			if err != nil {
				return err
			}
			if err := b.Set(key, v, nil); err != nil {
				return err
			}
			newIDs = append(newIDs, key)
		}
	}
	if len(existing) > 0 {
		return &repository.IDsExistError{Records: existing}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	s.addIDs(newIDs)
	for _, a := range done {
		s.update(a.rec, func(rec *records) {
			rec.head = a.head
			for _, e := range a.entries {
				rec.entries[e.Key()] = e
			}
		})
	}
	return nil
}

// BundleExists looks for the id among pending and dequeued bundles.
func (s *Store) BundleExists(ctx context.Context, recipient, bundleID string) (bool, error) {
	st, err := s.LoadRecipient(ctx, recipient)
	if err != nil {
		return false, err
	}
	if slices.ContainsFunc(st.Pending, func(b bundle.Record) bool { return b.ID == bundleID }) {
		return true, nil
	}
	return s.dequeuedExists(recipient, bundleID)
}

func (s *Store) dequeuedExists(recipient, bundleID string) (bool, error) {
	r, err := uuidBytes(recipient)
	if err != nil {
		return false, err
	}
	id, err := uuidBytes(bundleID)
	if err != nil {
		return false, err
	}
	_, ok, err := s.get(dequeuedKey(r, id))
	return ok, err
}

// bundleOfLocked parses a recipient's and a bundle's ids and returns them
// with the recipient's records. The caller holds writeMu.
func (s *Store) bundleOfLocked(recipient, bundleID string) (r, id [16]byte, rec *records, err error) {
	if r, err = uuidBytes(recipient); err != nil {
		return r, id, nil, err
	}
	if id, err = uuidBytes(bundleID); err != nil {
		return r, id, nil, err
	}
	rec, err = s.recordsLocked(r)
	return r, id, rec, err
}

// CreateBundle stores a pending bundle if its id is unused, its group has no
// pending bundle and the cursor is unchanged.
func (s *Store) CreateBundle(ctx context.Context, recipient string, bun bundle.Record, cursor catalog.Cursor) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	r, id, rec, err := s.bundleOfLocked(recipient, bun.ID)
	if err != nil {
		return err
	}
	if _, ok := rec.pending[bun.ID]; ok {
		return conflict("bundle %s is pending", bun.ID)
	}
	for _, p := range rec.pending {
		if p.Group == bun.Group {
			return conflict("a bundle is pending in group %d", bun.Group)
		}
	}
	if rec.cursorVersion(cursor.Key()) != cursor.Version {
		return conflict("cursor %v moved", cursor.Key())
	}
	if dequeued, err := s.dequeuedExists(recipient, bun.ID); err != nil || dequeued {
		return cmpErr(err, conflict("bundle %s was dequeued", bun.ID))
	}
	bun.Version = s.nextVersion()
	b := s.db.NewBatch()
	defer b.Close()
	if err := setJSON(b, pendingKey(r, id), bun); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	s.update(rec, func(rec *records) { rec.pending[bun.ID] = bun })
	return nil
}

// Acknowledge moves a pending bundle to the dequeued ones and writes the cursor.
func (s *Store) Acknowledge(ctx context.Context, recipient string, bun bundle.Record, cursor catalog.Cursor) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	r, id, rec, err := s.bundleOfLocked(recipient, bun.ID)
	if err != nil {
		return err
	}
	if rec.pending[bun.ID].Version != bun.Version || bun.Version == "" {
		return conflict("bundle %s is not pending at version %q", bun.ID, bun.Version)
	}
	if rec.cursorVersion(cursor.Key()) != cursor.Version {
		return conflict("cursor %v moved", cursor.Key())
	}
	bun.Version = s.nextVersion()
	cursor.Version = s.nextVersion()
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Delete(pendingKey(r, id), nil); err != nil {
		return err
	}
	if err := setJSON(b, dequeuedKey(r, id), bun); err != nil {
		return err
	}
	if err := setJSON(b, cabinetKey(kindCursor, r, cursor.Key()), cursor); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	s.update(rec, func(rec *records) {
		delete(rec.pending, bun.ID)
		rec.cursors[cursor.Key()] = cursor
	})
	return nil
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

// DequeuedBundles lists the recipient's dequeued bundles.
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

// ApplySweep deletes what retention found, provided the catalog records it
// read are unchanged.
func (s *Store) ApplySweep(ctx context.Context, sw repository.Sweep) error {
	r, err := uuidBytes(sw.Recipient)
	if err != nil {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	rec, err := s.recordsLocked(r)
	if err != nil {
		return err
	}
	for _, e := range slices.Concat(sw.Entries, sw.DeleteEntries) {
		if rec.entryVersion(e.Key()) != e.Version {
			return conflict("catalog entry %v changed", e.Key())
		}
	}
	for _, c := range sw.DeleteCursors {
		if rec.cursorVersion(c.Key()) != c.Version {
			return conflict("cursor %v moved", c.Key())
		}
	}
	b := s.db.NewBatch()
	defer b.Close()
	var replaced []catalog.Entry
	for _, e := range sw.Entries {
		e.Version = s.nextVersion()
		if err := setJSON(b, cabinetKey(kindEntry, r, e.Key()), e); err != nil {
			return err
		}
		replaced = append(replaced, e)
	}
	for _, e := range sw.DeleteEntries {
		if err := b.Delete(cabinetKey(kindEntry, r, e.Key()), nil); err != nil {
			return err
		}
	}
	for _, c := range sw.DeleteCursors {
		if err := b.Delete(cabinetKey(kindCursor, r, c.Key()), nil); err != nil {
			return err
		}
	}
	for _, id := range sw.Bundles {
		bid, err := uuidBytes(id)
		if err != nil {
			return err
		}
		if err := b.Delete(dequeuedKey(r, bid), nil); err != nil {
			return err
		}
	}
	for _, id := range sw.Drawers {
		if err := s.deleteDrawer(b, id); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	s.update(rec, func(rec *records) {
		for _, e := range replaced {
			rec.entries[e.Key()] = e
		}
		for _, e := range sw.DeleteEntries {
			delete(rec.entries, e.Key())
		}
		for _, c := range sw.DeleteCursors {
			delete(rec.cursors, c.Key())
		}
	})
	return nil
}

// deleteDrawer deletes a drawer's pages and the id records that point at it.
// An id record pointing at another drawer is left alone.
func (s *Store) deleteDrawer(b *pebble.Batch, drawerID string) error {
	d, err := uuidBytes(drawerID)
	if err != nil {
		return err
	}
	prefix := drawerPrefix(d)
	err = s.scan(prefix, func(_, value []byte) error {
		pr := newPageReader(value)
		for it, ok := pr.next(); ok; it, ok = pr.next() {
			id, err := uuidBytes(it.ID)
			if err != nil {
				return err
			}
			v, exists, err := s.get(idKey(id))
			if err != nil {
				return err
			}
			if !exists {
				continue
			}
			rec, err := decodeIDRecord(it.ID, v)
			if err != nil {
				return err
			}
			if rec.DrawerID == drawerID {
				if err := b.Delete(idKey(id), nil); err != nil {
					return err
				}
			}
		}
		return pr.err
	})
	if err != nil {
		return err
	}
	return b.DeleteRange(prefix, prefixEnd(prefix), nil)
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
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return err
	}
	for iter.First(); iter.Valid(); iter.Next() {
		if err := fn(iter.Key(), iter.Value()); err != nil {
			iter.Close()
			return err
		}
	}
	if err := iter.Error(); err != nil {
		iter.Close()
		return err
	}
	return iter.Close()
}

func setJSON(b *pebble.Batch, key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Set(key, data, nil)
}

// cmpErr returns err when set, else the fallback: a lookup failure beats the
// conflict it was checking for.
func cmpErr(err, fallback error) error {
	if err != nil {
		return err
	}
	return fallback
}

// pebbleLogger sends pebble's messages to slog.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
	panic(fmt.Sprintf(format, args...))
}
