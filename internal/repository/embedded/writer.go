package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/repository"
)

// Every conditional write (a group of saves, a new bundle, a dequeue, a
// sweep) is an operation run by one writer goroutine. It takes all the
// operations queued while the previous group was being synced, runs each
// against the state the group has built so far, writes the group as one
// pebble batch with one fsync, and only then publishes the new records to
// readers and answers the callers. So concurrent dequeues and peeks share
// fsyncs the way saves do, and nothing is visible before it is durable.

// maxWriteGroup bounds how many operations share one batch.
const maxWriteGroup = 256

// writeOp checks its preconditions against tx and, if they hold, records its
// changes in tx. It must change nothing in tx when it returns an error.
type writeOp func(tx *txn) error

type writeReq struct {
	op   writeOp
	done chan error
}

// write queues op and waits for its group to be durable. Once queued, the
// outcome is always awaited: the caller never sees an error for a write
// that happened.
func (s *Store) write(ctx context.Context, op writeOp) error {
	if s.gate != nil {
		if err := s.gate(); err != nil {
			return err
		}
	}
	if s.readOnly {
		return errReadOnly
	}
	req := writeReq{op: op, done: make(chan error, 1)}
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return errStoreClosed
	}
	select {
	case s.writes <- req:
	case <-ctx.Done():
		s.closeMu.RUnlock()
		return ctx.Err()
	}
	s.closeMu.RUnlock()
	return <-req.done
}

var errStoreClosed = errors.New("embedded: store closed")

var errReadOnly = fmt.Errorf("%w: the store was opened read-only, as the data volume was almost full at start; "+
	"restart the hub now that space is freed", domain.ErrStorageFull)

func (s *Store) writeLoop() {
	defer close(s.writerDone)
	for req := range s.writes {
		group := []writeReq{req}
	collect:
		for len(group) < maxWriteGroup {
			select {
			case r, ok := <-s.writes:
				if !ok {
					break collect
				}
				group = append(group, r)
			default:
				break collect
			}
		}
		s.commitGroup(group)
	}
}

func (s *Store) commitGroup(group []writeReq) {
	tx := &txn{
		s:        s,
		batch:    s.db.NewBatch(),
		touched:  map[[16]byte]*records{},
		ids:      map[string]bool{},
		dequeued: map[string]bool{},
	}
	defer tx.batch.Close()
	errs := make([]error, len(group))
	ok := 0
	for i, req := range group {
		if errs[i] = req.op(tx); errs[i] == nil {
			ok++
		}
	}
	if ok > 0 {
		if err := tx.batch.Commit(pebble.Sync); err != nil {
			for i := range errs {
				if errs[i] == nil {
					errs[i] = err
				}
			}
		} else {
			s.cacheMu.Lock()
			for r, rec := range tx.touched {
				rec.used.Store(true)
				s.cache[r] = rec
			}
			s.cacheMu.Unlock()
			s.addIDs(tx.newIDs)
		}
	}
	for i, req := range group {
		req.done <- errs[i]
	}
}

// txn is the state of one write group: a batch and copy-on-write clones of
// the records it changes. Readers keep seeing the published records.
type txn struct {
	s        *Store
	batch    *pebble.Batch
	touched  map[[16]byte]*records
	ids      map[string]bool // id keys written in this group
	dequeued map[string]bool // dequeued-bundle keys written in this group
	newIDs   [][]byte
}

// records returns the recipient's records as this group sees them. The
// result may be read freely; changes go through change.
func (tx *txn) records(r [16]byte) (*records, error) {
	if rec, ok := tx.touched[r]; ok {
		return rec, nil
	}
	if rec := tx.s.cached(r); rec != nil {
		return rec, nil
	}
	return tx.s.readRecords(r)
}

// change clones the recipient's records (once per group) and applies fn.
func (tx *txn) change(r [16]byte, rec *records, fn func(*records)) {
	clone, ok := tx.touched[r]
	if !ok {
		clone = &records{
			head:    rec.head,
			entries: maps.Clone(rec.entries),
			cursors: maps.Clone(rec.cursors),
			pending: maps.Clone(rec.pending),
		}
		tx.touched[r] = clone
	}
	fn(clone)
}

// idExists looks an id key up in this group, then in the database.
func (tx *txn) idExists(key []byte) ([]byte, bool, error) {
	if tx.ids[string(key)] {
		return nil, true, nil
	}
	if !tx.s.ids.mayExist(key) {
		return nil, false, nil
	}
	return tx.s.get(key)
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

// apply writes staged changes into the group's batch. Writing to an open
// batch only fails on programming errors.
func (tx *txn) apply(puts []put) {
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
func (s *Store) CommitSaves(ctx context.Context, saves []repository.RecipientSave) error {
	return s.write(ctx, func(tx *txn) error {
		type recipientChange struct {
			r       [16]byte
			rec     *records
			head    repository.Head
			entries []catalog.Entry
		}
		var changes []recipientChange
		var puts []put
		var idKeys [][]byte
		existing := map[string]repository.IDRecord{}
		seen := map[string]bool{}
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
			p, err := setPut(headKey(r), c.head)
			if err != nil {
				return err
			}
			puts = append(puts, p)
			for _, e := range save.Entries {
				if rec.entryVersion(e.Key()) != e.Version {
					return conflict("catalog entry %v of %s changed", e.Key(), save.Recipient)
				}
				e.Version = s.nextVersion()
				p, err := setPut(cabinetKey(kindEntry, r, e.Key()), e)
				if err != nil {
					return err
				}
				puts = append(puts, p)
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
			// In key order, successive lookups walk nearby parts of the
			// memtable's skiplist, which the CPU caches keep warm.
			ids := slices.SortedFunc(slices.Values(save.IDs), func(a, b repository.IDRecord) int { return strings.Compare(a.ID, b.ID) })
			for _, idRec := range ids {
				id, err := uuidBytes(idRec.ID)
				if err != nil {
					return err
				}
				key := idKey(id)
				stored, exists, err := tx.idExists(key)
				if err != nil {
					return err
				}
				if exists || seen[idRec.ID] {
					if stored == nil { // written earlier in this group
						stored, _ = encodeIDRecord(idRec)
					}
					if existing[idRec.ID], err = decodeIDRecord(idRec.ID, stored); err != nil {
						return err
					}
					continue
				}
				seen[idRec.ID] = true
				v, err := encodeIDRecord(idRec)
				if err != nil {
					return err
				}
				puts = append(puts, put{key: key, value: v})
				idKeys = append(idKeys, key)
			}
		}
		if len(existing) > 0 {
			return &repository.IDsExistError{Records: existing}
		}
		tx.apply(puts)
		for _, k := range idKeys {
			tx.ids[string(k)] = true
		}
		tx.newIDs = append(tx.newIDs, idKeys...)
		for _, c := range changes {
			tx.change(c.r, c.rec, func(rec *records) {
				rec.head = c.head
				for _, e := range c.entries {
					rec.entries[e.Key()] = e
				}
			})
		}
		return nil
	})
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
		tx.change(r, rec, func(rec *records) { rec.pending[bun.ID] = bun })
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
		tx.change(r, rec, func(rec *records) {
			delete(rec.pending, bun.ID)
			rec.cursors[cursor.Key()] = cursor
		})
		return nil
	})
}

// ApplySweep deletes what retention found, provided the catalog records it
// read are unchanged.
func (s *Store) ApplySweep(ctx context.Context, sw repository.Sweep) error {
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
			p, err := setPut(cabinetKey(kindEntry, r, e.Key()), e)
			if err != nil {
				return err
			}
			puts = append(puts, p)
			replaced = append(replaced, e)
		}
		for _, e := range sw.DeleteEntries {
			puts = append(puts, put{key: cabinetKey(kindEntry, r, e.Key()), del: true})
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
		for _, id := range sw.Drawers {
			drawerPuts, err := s.drawerDeletions(id)
			if err != nil {
				return err
			}
			puts = append(puts, drawerPuts...)
		}
		tx.apply(puts)
		tx.change(r, rec, func(rec *records) {
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
// records that point at it. An id record pointing at another drawer is left
// alone.
func (s *Store) drawerDeletions(drawerID string) ([]put, error) {
	d, err := uuidBytes(drawerID)
	if err != nil {
		return nil, err
	}
	prefix := drawerPrefix(d)
	var puts []put
	err = s.scan(prefix, func(key, value []byte) error {
		puts = append(puts, put{key: append([]byte(nil), key...), del: true})
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
				puts = append(puts, put{key: idKey(id), del: true})
			}
		}
		return pr.err
	})
	return puts, err
}

func parseIDs(recipient, bundleID string) (r, id [16]byte, err error) {
	if r, err = uuidBytes(recipient); err != nil {
		return r, id, err
	}
	id, err = uuidBytes(bundleID)
	return r, id, err
}
