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
	"strconv"
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
	// take it; pebble iterators and gets see committed data only.
	writeMu sync.Mutex
	version atomic.Uint64
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
	s := &Store{db: db}
	// Versions only need to differ from every earlier one of the same record;
	// the clock at start keeps them increasing across restarts.
	s.version.Store(uint64(time.Now().UnixNano()))
	return s, nil
}

// Close flushes and closes the database.
func (s *Store) Close() error { return s.db.Close() }

func (s *Store) nextVersion() string { return strconv.FormatUint(s.version.Add(1), 36) }

// LoadRecipient reads everything under the recipient's prefix in one scan.
func (s *Store) LoadRecipient(ctx context.Context, recipient string) (repository.RecipientState, error) {
	var st repository.RecipientState
	r, err := uuidBytes(recipient)
	if err != nil {
		return st, err
	}
	prefix := recipientPrefix(r)
	err = s.scan(prefix, func(key, value []byte) error {
		switch key[len(prefix)] {
		case kindHead:
			return json.Unmarshal(value, &st.Head)
		case kindEntry:
			var e catalog.Entry
			st.Entries = append(st.Entries, e)
			return json.Unmarshal(value, &st.Entries[len(st.Entries)-1])
		case kindCursor:
			var c catalog.Cursor
			st.Cursors = append(st.Cursors, c)
			return json.Unmarshal(value, &st.Cursors[len(st.Cursors)-1])
		case kindPending:
			var b bundle.Record
			st.Pending = append(st.Pending, b)
			return json.Unmarshal(value, &st.Pending[len(st.Pending)-1])
		}
		return nil
	})
	return st, err
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
	for _, save := range saves {
		r, err := uuidBytes(save.Recipient)
		if err != nil {
			return err
		}
		if err := s.expectVersion(headKey(r), save.Head.Version); err != nil {
			return err
		}
		head := save.Head
		head.Version = s.nextVersion()
		if err := setJSON(b, headKey(r), head); err != nil {
			return err
		}
		for _, e := range save.Entries {
			key := cabinetKey(kindEntry, r, e.Key())
			if err := s.expectVersion(key, e.Version); err != nil {
				return err
			}
			e.Version = s.nextVersion()
			if err := setJSON(b, key, e); err != nil {
				return err
			}
		}
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
		for _, rec := range save.IDs {
			id, err := uuidBytes(rec.ID)
			if err != nil {
				return err
			}
			stored, exists, err := s.get(idKey(id))
			if err != nil {
				return err
			}
			if exists {
				if existing[rec.ID], err = decodeIDRecord(rec.ID, stored); err != nil {
					return err
				}
				continue
			}
			v, err := encodeIDRecord(rec)
			if err != nil {
				return err
			}
			if err := b.Set(idKey(id), v, nil); err != nil {
				return err
			}
		}
	}
	if len(existing) > 0 {
		return &repository.IDsExistError{Records: existing}
	}
	return b.Commit(pebble.Sync)
}

// BundleExists looks for the id among pending and dequeued bundles.
func (s *Store) BundleExists(ctx context.Context, recipient, bundleID string) (bool, error) {
	r, err := uuidBytes(recipient)
	if err != nil {
		return false, err
	}
	id, err := uuidBytes(bundleID)
	if err != nil {
		return false, err
	}
	for _, key := range [][]byte{pendingKey(r, id), dequeuedKey(r, id)} {
		if _, ok, err := s.get(key); err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// CreateBundle stores a pending bundle if its id is unused, its group has no
// pending bundle and the cursor is unchanged.
func (s *Store) CreateBundle(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	r, err := uuidBytes(recipient)
	if err != nil {
		return err
	}
	id, err := uuidBytes(rec.ID)
	if err != nil {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if exists, err := s.BundleExists(ctx, recipient, rec.ID); err != nil || exists {
		return cmpErr(err, fmt.Errorf("%w: bundle %s exists", repository.ErrConflict, rec.ID))
	}
	groupTaken := false
	err = s.scan(pendingPrefix(r), func(_, value []byte) error {
		var p bundle.Record
		if err := json.Unmarshal(value, &p); err != nil {
			return err
		}
		groupTaken = groupTaken || p.Group == rec.Group
		return nil
	})
	if err != nil || groupTaken {
		return cmpErr(err, fmt.Errorf("%w: a bundle is pending in group %d", repository.ErrConflict, rec.Group))
	}
	if err := s.expectVersion(cabinetKey(kindCursor, r, cursor.Key()), cursor.Version); err != nil {
		return err
	}
	rec.Version = s.nextVersion()
	b := s.db.NewBatch()
	defer b.Close()
	if err := setJSON(b, pendingKey(r, id), rec); err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
}

// Acknowledge moves a pending bundle to the dequeued ones and writes the cursor.
func (s *Store) Acknowledge(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	r, err := uuidBytes(recipient)
	if err != nil {
		return err
	}
	id, err := uuidBytes(rec.ID)
	if err != nil {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	curKey := cabinetKey(kindCursor, r, cursor.Key())
	if err := s.expectVersion(pendingKey(r, id), rec.Version); err != nil {
		return err
	}
	if err := s.expectVersion(curKey, cursor.Version); err != nil {
		return err
	}
	rec.Version = s.nextVersion()
	cursor.Version = s.nextVersion()
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Delete(pendingKey(r, id), nil); err != nil {
		return err
	}
	if err := setJSON(b, dequeuedKey(r, id), rec); err != nil {
		return err
	}
	if err := setJSON(b, curKey, cursor); err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
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
	b := s.db.NewBatch()
	defer b.Close()
	for _, e := range append(append([]catalog.Entry(nil), sw.Entries...), sw.DeleteEntries...) {
		if err := s.expectVersion(cabinetKey(kindEntry, r, e.Key()), e.Version); err != nil {
			return err
		}
	}
	for _, c := range sw.DeleteCursors {
		if err := s.expectVersion(cabinetKey(kindCursor, r, c.Key()), c.Version); err != nil {
			return err
		}
	}
	for _, e := range sw.Entries {
		e.Version = s.nextVersion()
		if err := setJSON(b, cabinetKey(kindEntry, r, e.Key()), e); err != nil {
			return err
		}
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
	return b.Commit(pebble.Sync)
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

// expectVersion checks a record's stored version; want "" means it must not exist.
func (s *Store) expectVersion(key []byte, want string) error {
	v, ok, err := s.get(key)
	if err != nil {
		return err
	}
	got := ""
	if ok {
		var rec struct{ Version string }
		if err := json.Unmarshal(v, &rec); err != nil {
			return err
		}
		got = rec.Version
	}
	if ok && got == "" {
		return fmt.Errorf("%w: record without version", errCorrupt)
	}
	if got != want {
		return fmt.Errorf("%w: version %q, expected %q", repository.ErrConflict, got, want)
	}
	return nil
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
