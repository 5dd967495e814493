package pebble

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	"github.com/energydatahub/messagehub/internal/groupcommit"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/store"
)

// Every conditional write (a group of saves, a new bundle, a dequeue, a
// sweep) is an operation run by one writer goroutine, through a group-commit
// pipeline (internal/groupcommit). It takes all the operations queued, runs
// each against the state the groups before it left, applies the group to
// pebble as one batch and goes on to the next group while the WAL is
// synced. Only after the fsync are the new control records published to
// readers and the callers answered. Pebble shows a batch to its own reads
// before the fsync, which is why readers go through the published records
// (records.go): nothing is visible to them before it is durable.

// maxWriteGroup bounds how many operations share one batch.
const maxWriteGroup = 256

// writeOp checks its preconditions against tx and, if they hold, records its
// changes in tx. It must change nothing in tx when it returns an error.
type writeOp func(tx *txn) error

type writeReq struct {
	op   writeOp
	done chan error // told once the group is durable (or failed)
}

// write queues op and waits for its group to be durable. Once queued, the
// outcome is always awaited: the caller never sees an error for a write
// that happened.
func (s *Store) write(ctx context.Context, op writeOp) error {
	req, err := s.submit(ctx, op)
	if err != nil {
		return err
	}
	return <-req.done
}

func (s *Store) submit(ctx context.Context, op writeOp) (writeReq, error) {
	if s.readOnly {
		return writeReq{}, s.refusal
	}
	req := writeReq{op: op, done: make(chan error, 1)}
	err := s.writer.Submit(ctx, req)
	if errors.Is(err, groupcommit.ErrClosed) {
		err = errStoreClosed
	}
	return req, err
}

var errStoreClosed = errors.New("embedded: store closed")

func (s *Store) newWriter() *groupcommit.Pipeline[writeReq] {
	return groupcommit.New(maxWriteGroup, groupcommit.Options[writeReq]{
		MaxWeight: maxWriteGroup,
		Prepare:   s.applyGroup,
	})
}

// applyGroup runs the group's operations and applies the batch without
// waiting for its fsync; the function it returns waits for it, publishes
// and answers, while the writer goes on to the next group.
func (s *Store) applyGroup(group []writeReq) func() {
	if s.applyErr != nil {
		answer(group, make([]error, len(group)), s.applyErr)
		return nil
	}
	s.settle()
	tx := &txn{
		s:        s,
		batch:    s.db.NewBatch(),
		touched:  map[[16]byte]*records{},
		ids:      map[[16]byte]struct{}{},
		dequeued: map[string]bool{},
	}
	errs := make([]error, len(group))
	ok := 0
	for i, req := range group {
		if errs[i] = req.op(tx); errs[i] == nil {
			ok++
		}
	}
	if ok == 0 {
		// Every operation failed its checks, perhaps against groups not yet
		// durable: answered in order, after those.
		tx.batch.Close()
		return func() { answer(group, errs, nil) }
	}
	tx.writeBatch()
	if err := applyBatch(s.db, tx.batch); err != nil {
		_ = tx.batch.SyncWait() // pebble requires it before Close; returns at once when nothing was queued
		tx.batch.Close()
		// Pebble refuses a batch only when it is in a state this store
		// cannot reason about (closed, or its disk failing): no later
		// group is applied either, until the hub is restarted.
		s.applyErr = fmt.Errorf("embedded: applying a write group: %w; restart the hub", err)
		s.logger.Error("the embedded store cannot apply writes; restart the hub", "err", err)
		answer(group, errs, s.applyErr)
		return nil
	}
	s.ids.change(tx.newIDs, tx.goneIDs)
	seq := s.unsynced.add(tx.touched)
	return func() {
		err := tx.batch.SyncWait()
		tx.batch.Close()
		// A group applied after one whose fsync failed was built on it: it
		// fails too, and so does every later one (the store must be reopened).
		if s.syncErr == nil && err != nil {
			s.syncErr = fmt.Errorf("embedded: sync of the write-ahead log: %w", err)
			s.logger.Error("the embedded store cannot make writes durable; restart the hub", "err", err)
		}
		if s.syncErr == nil {
			s.publish(tx.touched)
			s.unsynced.durable.Store(seq)
		}
		answer(group, errs, s.syncErr)
	}
}

// applyBatch applies a group's batch to pebble without waiting for its
// fsync (a variable for tests, which make it fail).
var applyBatch = func(db *pebble.DB, b *pebble.Batch) error { return db.ApplyNoSyncWait(b, pebble.Sync) }

// answer tells every request its outcome: its own error, else groupErr.
func answer(group []writeReq, errs []error, groupErr error) {
	for i, req := range group {
		err := errs[i]
		if err == nil {
			err = groupErr
		}
		req.done <- err
	}
}

// publish makes a durable group's control records what readers see.
func (s *Store) publish(touched map[[16]byte]*records) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	for r, rec := range touched {
		rec.used.Store(true)
		s.cache[r] = rec
	}
}

// settle forgets the unsynced records of groups that are now durable: the
// published ones are the same.
func (s *Store) settle() { s.unsynced.settle() }

// unsyncedRecords are the control records of groups applied to pebble and
// not yet known durable, newest per recipient. Only the writer goroutine
// reads and changes them; durable is set by the finishing goroutine.
type unsyncedRecords struct {
	latest  map[[16]byte]unsyncedRecord
	groups  []unsyncedGroup
	last    uint64
	durable atomic.Uint64 // the last group published
}

type unsyncedRecord struct {
	rec   *records
	group uint64
}

type unsyncedGroup struct {
	seq        uint64
	recipients [][16]byte
}

// add records a group's changed records and returns the group's number.
func (u *unsyncedRecords) add(touched map[[16]byte]*records) uint64 {
	u.last++
	g := unsyncedGroup{seq: u.last, recipients: make([][16]byte, 0, len(touched))}
	for r, rec := range touched {
		u.latest[r] = unsyncedRecord{rec: rec, group: u.last}
		g.recipients = append(g.recipients, r)
	}
	u.groups = append(u.groups, g)
	return u.last
}

func (u *unsyncedRecords) get(r [16]byte) *records {
	if v, ok := u.latest[r]; ok {
		return v.rec
	}
	return nil
}

func (u *unsyncedRecords) settle() {
	durable := u.durable.Load()
	n := 0
	for _, g := range u.groups {
		if g.seq > durable {
			break
		}
		for _, r := range g.recipients {
			if u.latest[r].group == g.seq {
				delete(u.latest, r)
			}
		}
		n++
	}
	u.groups = slices.Delete(u.groups, 0, n)
}

// txn is the state of one write group: a batch and copy-on-write clones of
// the records it changes. Readers keep seeing the published records.
type txn struct {
	s        *Store
	batch    *pebble.Batch
	touched  map[[16]byte]*records
	ids      map[[16]byte]struct{} // notification ids written in this group
	dequeued map[string]bool       // dequeued-bundle keys written in this group
	group    uint32                // the group number of its ids (nextGroup), once it has any
	newIDs   []uint64              // id index entries to add once the batch is applied
	goneIDs  []uint64              // and to remove
	puts     []put                 // changes for the batch, written by writeBatch
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
	if _, ok := tx.ids[*id]; ok {
		return nil, true, nil
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

// CommitSaves writes every recipient's save. All checks come first, so a
// failing save group changes nothing.
func (s *Store) CommitSaves(ctx context.Context, saves []store.RecipientSave) error {
	return s.write(ctx, s.saveOp(saves))
}

// saveOp writes the saves.
func (s *Store) saveOp(saves []store.RecipientSave) writeOp {
	return func(tx *txn) error {
		type recipientChange struct {
			r       [16]byte
			rec     *records
			head    store.Head
			entries []catalog.Entry
		}
		ids := tx.idRecordsAsync(saves)
		var changes []recipientChange
		var puts []put
		err := func() error {
			for _, save := range saves {
				r, err := uuidBytes(save.Recipient)
				if err != nil {
					return err
				}
				rec, err := tx.records(r)
				if err != nil {
					return err
				}
				if rec.head.Version != save.Head.Version {
					return conflict("head of %s changed", save.Recipient)
				}
				c := recipientChange{r: r, rec: rec, head: save.Head}
				c.head.Version = s.nextVersion()
				puts = append(puts, put{key: headKey(r), value: encodeHead(c.head)})
				for _, e := range save.Entries {
					if rec.entryVersion(e.Key()) != e.Version {
						return conflict("catalog entry %v of %s changed", e.Key(), save.Recipient)
					}
					e.Version = s.nextVersion()
					if puts, err = appendEntry(puts, r, rec.entries[e.Key()], e); err != nil {
						return err
					}
					c.entries = append(c.entries, e)
				}
				changes = append(changes, c)
				for _, pg := range save.Pages {
					d, err := uuidBytes(pg.DrawerID)
					if err != nil {
						return err
					}
					v, err := encodePage(pg.Items)
					if err != nil {
						return err
					}
					puts = append(puts, put{key: pageKey(d, pg.Start()), value: v})
				}
			}
			return nil
		}()
		idPuts, entries, idErr := ids()
		if err != nil {
			return err
		}
		if idErr != nil {
			return idErr
		}
		tx.apply(puts)
		// A save's id records are in key order already, under a group number
		// no other record has: they go into the batch as they are.
		tx.write(idPuts)
		for _, p := range idPuts {
			_, id, _ := idKeyParts(p.key)
			tx.ids[id] = struct{}{}
		}
		tx.newIDs = append(tx.newIDs, entries...)
		for _, c := range changes {
			tx.change(c.r, c.rec, entriesMap, func(rec *records) {
				rec.head = c.head
				for _, e := range c.entries {
					rec.entries[e.Key()] = e
				}
			})
		}
		return nil
	}
}

// idRecordsAsync runs idRecords while the caller checks and encodes the
// recipients' records, when the saves bring enough ids to be worth it (the
// writer is the one step every Save waits for, one group at a time). Neither
// changes what the other reads of tx; the caller must wait for the result
// before it changes tx.
func (tx *txn) idRecordsAsync(saves []store.RecipientSave) func() ([]put, []uint64, error) {
	n := 0
	for _, s := range saves {
		n += len(s.IDs)
	}
	if n < asyncIDRecords {
		return func() ([]put, []uint64, error) { return tx.idRecords(saves) }
	}
	type result struct {
		puts    []put
		entries []uint64
		err     error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.puts, r.entries, r.err = tx.idRecords(saves)
		done <- r
	}()
	return func() ([]put, []uint64, error) {
		r := <-done
		return r.puts, r.entries, r.err
	}
}

// asyncIDRecords is the fewest ids whose records idRecordsAsync builds on
// a goroutine of their own.
const asyncIDRecords = 256

// warmIDs is the fewest ids whose index slots idRecords loads all at once
// before looking them up one by one.
const warmIDs = 32

// idRecords stages the id records of the saves under the group's number,
// sorted by key, and returns their id index entries; keys and values share
// one buffer. Ids that exist (or come twice) fail it with
// *store.IDsExistError naming all of them.
func (tx *txn) idRecords(saves []store.RecipientSave) ([]put, []uint64, error) {
	// An id is kept as two numbers that sort as its bytes do, faster than
	// comparing bytes (BenchmarkIDRecordsOfASave10M).
	// A save's ids come page by page, so a drawer id is parsed once for the
	// ids that follow it in one run.
	type idRec struct {
		hi, lo uint64
		rec    *store.IDRecord
		drawer int
	}
	n := 0
	for i := range saves {
		n += len(saves[i].IDs)
	}
	all := make([]idRec, 0, n)
	var drawers [][16]byte
	for i := range saves {
		for j := range saves[i].IDs {
			rec := &saves[i].IDs[j]
			id, err := uuidBytes(rec.ID)
			if err != nil {
				return nil, nil, err
			}
			if j == 0 || rec.DrawerID != saves[i].IDs[j-1].DrawerID {
				d, err := uuidBytes(rec.DrawerID)
				if err != nil {
					return nil, nil, err
				}
				drawers = append(drawers, d)
			}
			all = append(all, idRec{binary.BigEndian.Uint64(id[:8]), binary.BigEndian.Uint64(id[8:]), rec, len(drawers) - 1})
		}
	}
	// In key order, a group's records are one run that pebble's memtable
	// inserts each next to the last; and an id given twice sits side by side.
	slices.SortFunc(all, func(a, b idRec) int {
		if a.hi != b.hi {
			return cmp.Compare(a.hi, b.hi)
		}
		return cmp.Compare(a.lo, b.lo)
	})
	idOf := func(r idRec) (id [16]byte) {
		binary.BigEndian.PutUint64(id[:8], r.hi)
		binary.BigEndian.PutUint64(id[8:], r.lo)
		return id
	}
	hashes := make([]uint64, len(all)) // for the read-ahead and the index entries
	for i := range all {
		id := idOf(all[i])
		hashes[i] = idHash(&id)
	}
	if len(all) >= warmIDs {
		tx.s.ids.warm(hashes)
	}
	if tx.group == 0 && len(all) > 0 {
		tx.group = tx.s.nextGroup()
	}
	g := tx.group
	buf := make([]byte, 0, len(all)*(4+16+idRecordLen))
	puts := make([]put, 0, len(all))
	entries := make([]uint64, 0, len(all))
	var existing map[string]store.IDRecord
	for i, e := range all {
		id := idOf(e)
		start := len(buf)
		buf = append(buf, prefixIDByGroup, byte(g>>16), byte(g>>8), byte(g))
		buf = append(buf, id[:]...)
		key := buf[start:len(buf):len(buf)]
		stored, exists, err := tx.idExists(&id, hashes[i])
		if err != nil {
			return nil, nil, err
		}
		if exists || i > 0 && all[i-1].hi == e.hi && all[i-1].lo == e.lo {
			if stored == nil { // written earlier in this group or this save
				if stored, err = encodeIDRecord(*e.rec); err != nil {
					return nil, nil, err
				}
			}
			if existing == nil {
				existing = map[string]store.IDRecord{}
			}
			if existing[e.rec.ID], err = decodeIDRecord(e.rec.ID, stored); err != nil {
				return nil, nil, err
			}
			buf = buf[:start]
			continue
		}
		buf = appendIDRecordOf(buf, *e.rec, &drawers[e.drawer])
		puts = append(puts, put{key: key, value: buf[start+len(key):]})
		entries = append(entries, idEntry(hashes[i], g))
	}
	if existing != nil {
		return nil, nil, &store.IDsExistError{Records: existing}
	}
	return puts, entries, nil
}

// CreateBundle stores a pending bundle if its id is unused, its group has no
// pending bundle and the cursor is unchanged.
func (s *Store) CreateBundle(ctx context.Context, recipient string, bun bundle.Record, cursor catalog.Cursor) error {
	r, id, err := parseIDs(recipient, bun.ID)
	if err != nil {
		return err
	}
	return s.write(ctx, func(tx *txn) error {
		rec, err := tx.records(r)
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
		if dequeued, err := tx.dequeuedExists(dequeuedKey(r, id)); err != nil || dequeued {
			return cmpErr(err, conflict("bundle %s was dequeued", bun.ID))
		}
		bun.Version = s.nextVersion()
		p, err := setPut(pendingKey(r, id), bun)
		if err != nil {
			return err
		}
		tx.apply([]put{p})
		tx.change(r, rec, pendingMap, func(rec *records) { rec.pending[bun.ID] = bun })
		return nil
	})
}

// Acknowledge moves a pending bundle to the dequeued ones and writes the cursor.
func (s *Store) Acknowledge(ctx context.Context, recipient string, bun bundle.Record, cursor catalog.Cursor) error {
	r, id, err := parseIDs(recipient, bun.ID)
	if err != nil {
		return err
	}
	return s.write(ctx, func(tx *txn) error {
		rec, err := tx.records(r)
		if err != nil {
			return err
		}
		if bun.Version == "" || rec.pending[bun.ID].Version != bun.Version {
			return conflict("bundle %s is not pending at version %q", bun.ID, bun.Version)
		}
		if rec.cursorVersion(cursor.Key()) != cursor.Version {
			return conflict("cursor %v moved", cursor.Key())
		}
		bun.Version = s.nextVersion()
		cursor.Version = s.nextVersion()
		dq, err := setPut(dequeuedKey(r, id), bun)
		if err != nil {
			return err
		}
		cur, err := setPut(cabinetKey(kindCursor, r, cursor.Key()), cursor)
		if err != nil {
			return err
		}
		puts := []put{{key: pendingKey(r, id), del: true}, dq, cur}
		if bun.Announce {
			puts = append(puts, put{key: noticeKey(bun.Origin, bun.DequeuedAt.UnixNano(), r, id), value: []byte{}})
		}
		tx.apply(puts)
		tx.dequeued[string(dq.key)] = true
		tx.change(r, rec, pendingMap|cursorsMap, func(rec *records) {
			delete(rec.pending, bun.ID)
			rec.cursors[cursor.Key()] = cursor
		})
		return nil
	})
}

// ApplySweep deletes what retention found, provided the catalog records it
// read are unchanged.
func (s *Store) ApplySweep(ctx context.Context, sw store.Sweep) error {
	r, err := uuidBytes(sw.Recipient)
	if err != nil {
		return err
	}
	return s.write(ctx, func(tx *txn) error {
		rec, err := tx.records(r)
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
		var puts []put
		var replaced []catalog.Entry
		for _, e := range sw.Entries {
			e.Version = s.nextVersion()
			if puts, err = appendEntry(puts, r, rec.entries[e.Key()], e); err != nil {
				return err
			}
			replaced = append(replaced, e)
		}
		for _, e := range sw.DeleteEntries {
			if puts, err = appendEntryDeletion(puts, r, rec.entries[e.Key()]); err != nil {
				return err
			}
		}
		for _, c := range sw.DeleteCursors {
			puts = append(puts, put{key: cabinetKey(kindCursor, r, c.Key()), del: true})
		}
		for _, id := range sw.Bundles {
			bid, err := uuidBytes(id)
			if err != nil {
				return err
			}
			puts = append(puts, put{key: dequeuedKey(r, bid), del: true})
		}
		var gone []uint64
		for _, id := range sw.Drawers {
			drawerPuts, drawerGone, err := s.drawerDeletions(id)
			if err != nil {
				return err
			}
			puts = append(puts, drawerPuts...)
			gone = append(gone, drawerGone...)
		}
		tx.apply(puts)
		tx.goneIDs = append(tx.goneIDs, gone...)
		tx.change(r, rec, entriesMap|cursorsMap, func(rec *records) {
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
	})
}

// drawerDeletions stages the deletion of a drawer's pages and of the id
// records that point at it, and returns those records' id index entries. An
// id record pointing at another drawer is left alone.
func (s *Store) drawerDeletions(drawerID string) (puts []put, gone []uint64, err error) {
	d, err := uuidBytes(drawerID)
	if err != nil {
		return nil, nil, err
	}
	prefix := drawerPrefix(d)
	err = s.scan(prefix, func(key, value []byte) error {
		puts = append(puts, put{key: append([]byte(nil), key...), del: true})
		pr := newPageReader(value)
		for it, ok := pr.next(); ok; it, ok = pr.next() {
			id, err := uuidBytes(it.ID)
			if err != nil {
				return err
			}
			idKey, v, exists, err := s.storedID(&id)
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
				puts = append(puts, put{key: idKey, del: true})
				group, _, _ := idKeyParts(idKey)
				gone = append(gone, idEntry(idHash(&id), group))
			}
		}
		return pr.err
	})
	return puts, gone, err
}

func parseIDs(recipient, bundleID string) (r, id [16]byte, err error) {
	if r, err = uuidBytes(recipient); err != nil {
		return r, id, err
	}
	id, err = uuidBytes(bundleID)
	return r, id, err
}
