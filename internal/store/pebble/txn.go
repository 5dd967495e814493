package pebble

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"maps"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// txn is the state of one write group: a batch and copy-on-write clones of
// the records it changes. Readers keep seeing the published records.
type txn struct {
	s        *Store
	batch    *pebble.Batch
	touched  map[[16]byte]*records
	ids      map[[16]byte][]byte // notification ids written in this group, with their records
	dequeued map[string]bool     // dequeued-bundle keys written in this group
	group    uint32              // the group number of its ids (nextGroup), once it has any
	newIDs   []uint64            // id index entries to add once the batch is applied
	goneIDs  []uint64            // and to remove
	puts     []put               // changes for the batch, written by writeBatch
}

// records returns the recipient's records as this group sees them: as
// earlier groups left them, durable or not. The result may be read freely;
// changes go through change.
func (tx *txn) records(r [16]byte) (*records, error) {
	if rec, ok := tx.touched[r]; ok {
		return rec, nil
	}
	if rec := tx.s.unsynced.get(r); rec != nil {
		return rec, nil
	}
	if rec := tx.s.cached(r); rec != nil {
		return rec, nil
	}
	rec, err := tx.s.readRecords(r)
	if err != nil {
		return nil, err
	}
	// What the writer reads from disk is durable (no unsynced group changed
	// it). Published now, it is what a reader finds until this group is
	// durable, instead of pebble's view, which shows the group at once.
	return tx.s.publishRead(r, rec), nil
}

// recordMaps names maps of a recipient's records.
type recordMaps uint8

const (
	entriesMap recordMaps = 1 << iota
	cursorsMap
	pendingMap
)

// change applies fn to the recipient's records as this group leaves them,
// copied the first time. fn may change the maps named in changes: only those
// are copied, each once per group; the others stay shared with the records
// readers see, which nothing changes.
func (tx *txn) change(r [16]byte, rec *records, changes recordMaps, fn func(*records)) {
	clone, ok := tx.touched[r]
	if !ok {
		clone = &records{head: rec.head, entries: rec.entries, cursors: rec.cursors, pending: rec.pending}
		tx.touched[r] = clone
		tx.s.pin(r, rec)
	}
	copyNow := changes &^ clone.copied
	if copyNow&entriesMap != 0 {
		clone.entries = maps.Clone(clone.entries)
	}
	if copyNow&cursorsMap != 0 {
		clone.cursors = maps.Clone(clone.cursors)
	}
	if copyNow&pendingMap != 0 {
		clone.pending = maps.Clone(clone.pending)
	}
	clone.copied |= changes
	fn(clone)
}

// idExists looks an id (with h, its idHash) up in this group, then in the
// database.
func (tx *txn) idExists(id *[16]byte, h uint64) ([]byte, bool, error) {
	if v, ok := tx.ids[*id]; ok {
		return v, true, nil
	}
	// The index changes only on the writer, between groups: never while a
	// group's operations run, so they read it without the lock.
	var buf [2]uint32
	_, v, ok, err := tx.s.idRecordOf(id, tx.s.ids.groups(h, buf[:0]))
	return v, ok, err
}

// dequeuedExists looks a dequeued-bundle key up in this group, then in the database.
func (tx *txn) dequeuedExists(key []byte) (bool, error) {
	if tx.dequeued[string(key)] {
		return true, nil
	}
	_, ok, err := tx.s.get(key)
	return ok, err
}

// put is a staged write: a key and its encoded value, or a deletion.
type put struct {
	key, value []byte
	del        bool
}

// apply stages changes for the group's batch. They are written to it once
// every operation of the group has run (writeBatch), in key order.
func (tx *txn) apply(puts []put) { tx.puts = append(tx.puts, puts...) }

// writeBatch writes the group's staged changes into its batch in key order,
// a key's changes in the order they were staged. Pebble inserts each key of
// a batch into its memtable, a skiplist, by searching from the key before:
// keys in order share most of that search, while keys in the order the
// operations wrote them (recipient after recipient) each miss the CPU caches
// from the top of the list down.
func (tx *txn) writeBatch() {
	tx.write(inKeyOrder(tx.puts))
}

// inKeyOrder returns puts sorted by key, stably. It sorts small handles (a
// key's first eight bytes, which nearly always decide, and its place)
// rather than the puts themselves, which a stable sort would move around
// many times, comparing whole keys, on the writer every Save waits for
// (BenchmarkWriteBatchOfAGroup).
func inKeyOrder(puts []put) []put {
	type handle struct {
		prefix uint64
		i      int
	}
	hs := make([]handle, len(puts))
	for i, p := range puts {
		hs[i] = handle{keyPrefix(p.key), i}
	}
	slices.SortFunc(hs, func(a, b handle) int {
		if a.prefix != b.prefix {
			return cmp.Compare(a.prefix, b.prefix)
		}
		if c := bytes.Compare(puts[a.i].key, puts[b.i].key); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	sorted := make([]put, len(puts))
	for j, h := range hs {
		sorted[j] = puts[h.i]
	}
	return sorted
}

// keyPrefix is a key's first eight bytes as a number that sorts as they do
// (a shorter key is padded with zeros, and ties are broken by the whole key).
func keyPrefix(key []byte) uint64 {
	var b [8]byte
	copy(b[:], key)
	return binary.BigEndian.Uint64(b[:])
}

// write writes changes into the group's batch as they are. Writing to an
// open batch only fails on programming errors.
func (tx *txn) write(puts []put) {
	for _, p := range puts {
		var err error
		if p.del {
			err = tx.batch.Delete(p.key, nil)
		} else {
			err = tx.batch.Set(p.key, p.value, nil)
		}
		if err != nil {
			panic("embedded: write to batch: " + err.Error())
		}
	}
}

func setPut(key []byte, v any) (put, error) {
	data, err := json.Marshal(v)
	return put{key: key, value: data}, err
}
