package pebble

import (
	"cmp"
	"context"
	"encoding/binary"
	"slices"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/store"
)

// CommitSaves writes every recipient's save. All checks come first, so a
// failing save group changes nothing.
func (s *Store) CommitSaves(ctx context.Context, saves []store.RecipientSave) error {
	return s.write(ctx, func(tx *txn) error {
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
			tx.ids[id] = p.value
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
	})
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
			if stored == nil { // given twice in this save
				stored = appendIDRecord(nil, *e.rec, &drawers[e.drawer])
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
		buf = appendIDRecord(buf, *e.rec, &drawers[e.drawer])
		puts = append(puts, put{key: key, value: buf[start+len(key):]})
		entries = append(entries, idEntry(hashes[i], g))
	}
	if existing != nil {
		return nil, nil, &store.IDsExistError{Records: existing}
	}
	return puts, entries, nil
}
