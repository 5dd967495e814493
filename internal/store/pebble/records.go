package pebble

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/store"
)

// The control records of a recipient (head, catalog entries, cursors,
// pending bundles) are rewritten on every save, peek and dequeue. In an LSM
// every rewrite leaves a version behind until the next flush, and a prefix
// scan has to step over all of them; a busy recipient's scan would grow with
// every write. So the store keeps each recipient's committed control records
// in memory, loaded from disk on first use and replaced after every commit.
// The store's single writer is the only one to change its database, so the
// copy is exact. Version checks and LoadRecipient are memory reads.

// records is one recipient's committed control records. Once published it is
// never changed (a write group changes a clone), so readers need no lock.
type records struct {
	head    store.Head
	entries map[catalog.Key]catalog.Entry
	cursors map[catalog.Key]catalog.Cursor
	pending map[string]bundle.Record
	used    atomic.Bool // read or written since the last eviction round
	copied  recordMaps  // the maps a write group has copied into these (txn.change)
}

// state copies the records out in a stable order. Every save reads it, so
// each slice is made once at its size.
func (r *records) state() store.RecipientState {
	return store.RecipientState{
		Head:    r.head,
		Entries: valuesByKey(r.entries, compareKeys),
		Cursors: valuesByKey(r.cursors, compareKeys),
		Pending: valuesByKey(r.pending, strings.Compare),
	}
}

// valuesByKey returns m's values in the order cmp gives their keys (nil for
// an empty m).
func valuesByKey[K comparable, V any](m map[K]V, cmp func(a, b K) int) []V {
	if len(m) == 0 {
		return nil
	}
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp)
	values := make([]V, len(keys))
	for i, k := range keys {
		values[i] = m[k]
	}
	return values
}

func compareKeys(a, b catalog.Key) int {
	return cmp.Or(cmp.Compare(a.Origin, b.Origin), strings.Compare(a.ContentType, b.ContentType))
}

func (r *records) entryVersion(k catalog.Key) string  { return r.entries[k].Version }
func (r *records) cursorVersion(k catalog.Key) string { return r.cursors[k].Version }

// cached returns the recipient's records if they are in memory.
func (s *Store) cached(r [16]byte) *records {
	s.cacheMu.RLock()
	defer s.cacheMu.RUnlock()
	rec := s.cache[r]
	if rec != nil && !rec.used.Load() {
		rec.used.Store(true)
	}
	return rec
}

// peekCache returns the recipient's records if they are in memory without
// marking them used: for reads that are no use of the recipient (the
// figures' recounts), which must not keep it from being evicted.
func (s *Store) peekCache(r [16]byte) *records {
	s.cacheMu.RLock()
	defer s.cacheMu.RUnlock()
	return s.cache[r]
}

// publishRead publishes records the writer read from disk, unless records
// are published already, and returns what is published.
func (s *Store) publishRead(r [16]byte, rec *records) *records {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if cur := s.cache[r]; cur != nil {
		return cur
	}
	rec.used.Store(true)
	s.cache[r] = rec
	return rec
}

// pin keeps the recipient's records published, and in memory, until the
// write group that changes them (from rec, what the group read) is
// published: pebble shows the group to reads from disk before its fsync, so
// a load that found nothing published would read, and keep, changes that are
// not durable. rec is durable when nothing is published: had an earlier
// group not yet durable changed it, that group's pin would have kept the
// records published. A group whose fsync fails is never published, so its
// pins stay, and readers keep the durable records.
func (s *Store) pin(r [16]byte, rec *records) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	s.pinned[r]++
	if s.cache[r] == nil {
		rec.used.Store(true)
		s.cache[r] = rec
	}
}

// An idle recipient costs no memory: each eviction round drops the records
// of recipients nobody read or wrote since the round before (they are on
// disk; the next use reads them again). The retention sweep visits every
// recipient, so without this every recipient that ever had data would stay.
const evictEvery = time.Minute

func (s *Store) evictLoop() {
	t := time.NewTicker(evictEvery)
	defer t.Stop()
	for {
		select {
		case <-s.evictStop:
			return
		case <-t.C:
			s.evictIdle()
		}
	}
}

// evictIdle drops the records not used since the last round and marks the
// rest unused. A load that read from disk before the round does not cache
// what it read (see LoadRecipient): it may be older than what was evicted.
// Pinned records stay, however long their group's fsync takes (see pin).
func (s *Store) evictIdle() (evicted int) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	for r, rec := range s.cache {
		if !rec.used.Swap(false) && s.pinned[r] == 0 {
			delete(s.cache, r)
			evicted++
		}
	}
	if evicted > 0 {
		s.cacheEpoch++
	}
	return evicted
}

// readRecords reads a recipient's records from disk.
func (s *Store) readRecords(r [16]byte) (*records, error) {
	rec := &records{
		entries: map[catalog.Key]catalog.Entry{},
		cursors: map[catalog.Key]catalog.Cursor{},
		pending: map[string]bundle.Record{},
	}
	prefix := recipientPrefix(r)
	drawers := cabinetDrawers{}
	err := s.scan(prefix, func(key, value []byte) error {
		switch key[len(prefix)] {
		case kindHead:
			var err error
			rec.head, err = decodeHead(value)
			return err
		case kindEntry:
			e, err := decodeEntry(value)
			if err != nil {
				return err
			}
			rec.entries[e.Key()] = e
		case kindCursor:
			var c catalog.Cursor
			if err := json.Unmarshal(value, &c); err != nil {
				return err
			}
			rec.cursors[c.Key()] = c
		case kindPending:
			var b bundle.Record
			if err := json.Unmarshal(value, &b); err != nil {
				return err
			}
			rec.pending[b.ID] = b
		case kindDrawerMeta:
			return drawers.add(key, value)
		default:
			return fmt.Errorf("%w: unknown key kind %q", errCorrupt, key[len(prefix)])
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rec, drawers.complete(rec)
}

func conflict(format string, args ...any) error {
	return fmt.Errorf("%w: %s", store.ErrConflict, fmt.Sprintf(format, args...))
}
