package pebble

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// ApplySweep deletes what retention found, provided the catalog records it
// read are unchanged.
func (s *Store) ApplySweep(ctx context.Context, sw store.Sweep) error {
	r, err := uuidBytes(sw.Recipient)
	if err != nil {
		return err
	}
	unnamed, err := s.keptUnnamed(r, sw)
	if err != nil {
		return err
	}
	var untold []bundle.Record // deleted with their notice still waiting
	err = s.write(ctx, func(tx *txn) error {
		untold = untold[:0]
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
		for _, read := range sw.Bundles {
			bid, err := uuidBytes(read.ID)
			if err != nil {
				return err
			}
			// Its keys in the retention indexes go with it: the record
			// says where those are.
			b, found, err := s.dequeuedRecord(r, bid)
			if err != nil {
				return err
			}
			if !found {
				continue // gone already
			}
			// At the version read: a sweep planned before another sweep
			// freed the id and the id was dequeued again must not delete
			// the new dequeue's record before its retention.
			if read.Version != "" && b.Version != read.Version {
				return conflict("bundle %s changed since it was read", read.ID)
			}
			index, err := retentionPuts(b, r, bid, true)
			if err != nil {
				return err
			}
			puts = append(append(puts, put{key: dequeuedKey(r, bid), del: true}), index...)
			// Its notice goes with it, as a notice's ttl (the retention)
			// takes it on Cosmos DB: told or not, nothing reads the bundle
			// for it any more, and a notice of a domain that has no
			// provider now (no worker looks at its notices) would stay for
			// good, the outbox's figures growing for ever.
			if b.Notice && b.State == bundle.Dequeued {
				key := noticeKey(b.Origin, b.DequeuedAt.UnixNano(), r, bid)
				_, waiting, err := s.get(key)
				if err != nil {
					return err
				}
				if waiting {
					puts = append(puts, put{key: key, del: true})
					untold = append(untold, b)
				}
			}
		}
		var gone []uint64
		for _, id := range slices.Concat(sw.Drawers, unnamed) {
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
	if err != nil {
		return err
	}
	for _, b := range untold {
		s.logger.Warn("a dequeued bundle was removed by retention before its domain heard of it",
			"recipient", sw.Recipient, "bundle", b.ID, "origin", b.Origin)
	}
	return nil
}

// keptUnnamed returns the drawers the sweep keeps that no bundle's record
// names once its bundles are deleted. This store keeps no record of kept
// drawers: LoadRetention finds them through the records of the bundles
// that name them. A sweep within the clocks' margin after the dequeue of
// the bundle covering a drawer's end deletes that bundle, due, and keeps
// the drawer for the margin; named by no record, it is read by no one and
// would be found by no later sweep, its pages and ids kept for good, so it
// goes with the bundles. No record can name it later: only fully
// acknowledged drawers are kept, and no new bundle covers those. The
// bundles naming the kept drawers are looked up only when a bundle the
// sweep deletes names one of them.
func (s *Store) keptUnnamed(r [16]byte, sw store.Sweep) ([]string, error) {
	kept := map[string]bool{}
	for _, k := range sw.Keep {
		for _, d := range k.Drawers {
			kept[d] = true
		}
	}
	deleted := map[string]bool{}
	namesKept := false
	for _, read := range sw.Bundles {
		deleted[read.ID] = true
		if len(kept) == 0 || namesKept {
			continue
		}
		bid, err := uuidBytes(read.ID)
		if err != nil {
			return nil, err
		}
		b, found, err := s.dequeuedRecord(r, bid)
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		namesKept = slices.ContainsFunc(b.Drawers, func(d drawer.Meta) bool { return kept[d.ID] })
	}
	if !namesKept {
		return nil, nil
	}
	// The drawers' index (namedByKey) lists the dequeued bundles that
	// name each; a released bundle reads nothing back.
	named := map[string]bool{}
	for _, k := range sw.Keep {
		for _, drawerID := range k.Drawers {
			d, err := uuidBytes(drawerID)
			if err != nil {
				return nil, err
			}
			prefix := namedByPrefix(r, d)
			if named[drawerID], err = s.anyKey(prefix, prefixEnd(prefix), func(key []byte) bool {
				return !deleted[uuidString(key[len(key)-16:])]
			}); err != nil {
				return nil, err
			}
		}
	}
	var unnamed []string
	for _, k := range sw.Keep {
		for _, d := range k.Drawers {
			if !named[d] && !slices.Contains(unnamed, d) {
				unnamed = append(unnamed, d)
			}
		}
	}
	return unnamed, nil
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

// DueRecipients implements store.Retention: two range scans of the
// retention index (keys.go), of the times before dueBefore and of those at
// or after since, which hold only keys; what the recipients retain in
// between is not read (BenchmarkDueRecipientsOf1000RecipientsRetaining500Bundles).
func (s *Store) DueRecipients(ctx context.Context, dueBefore, since time.Time, fn func(recipient string) error) error {
	due := map[string]bool{}
	add := func(key, _ []byte) error {
		due[uuidString(key[9:25])] = true
		return nil
	}
	if err := s.scanRange(retainedAt(time.Unix(0, 0)), retainedAt(dueBefore), add); err != nil {
		return err
	}
	if !since.IsZero() {
		if err := s.scanRange(retainedAt(since), prefixEnd([]byte{prefixRetained}), add); err != nil {
			return err
		}
	}
	return each(ctx, slices.Sorted(maps.Keys(due)), fn)
}

// LoadRetention implements store.Retention: the recipient's state, its
// dequeued and released bundles in either of DueRecipients' ranges, read
// through the recipient's retention index (keys.go) without touching those
// retained in between, and as kept drawers whose retention is over those
// out of the catalog that only expired bundles name. The store keeps no
// record of kept drawers (ApplySweep ignores Keep but for those no record
// names, keptUnnamed): a drawer an expired bundle names is kept still when
// a bundle dequeued at or after dueBefore names it, which one seek in the
// drawers' index tells.
func (s *Store) LoadRetention(ctx context.Context, recipient string, dueBefore, since time.Time) (store.RetentionState, error) {
	r, err := uuidBytes(recipient)
	if err != nil {
		return store.RetentionState{}, err
	}
	state, err := s.LoadRecipient(ctx, recipient)
	if err != nil {
		return store.RetentionState{}, err
	}
	read, namedLater, err := s.retentionRanges(ctx, recipient, r, dueBefore, since)
	if err != nil {
		return store.RetentionState{}, err
	}
	out := store.RetentionState{Entries: state.Entries, Cursors: state.Cursors, Bundles: read}
	named := map[string]bool{} // by the catalog or a bundle not yet due
	for _, e := range state.Entries {
		for _, d := range e.Drawers {
			named[d.ID] = true
		}
	}
	var expired []string
	for _, rec := range read {
		for _, d := range rec.Drawers {
			if rec.DequeuedAt.Before(dueBefore) {
				expired = append(expired, d.ID)
			} else {
				named[d.ID] = true
			}
		}
	}
	var kept store.Kept
	for _, d := range expired {
		if named[d] || slices.Contains(kept.Drawers, d) {
			continue
		}
		later, err := namedLater(d)
		if err != nil {
			return store.RetentionState{}, err
		}
		if !later {
			kept.Drawers = append(kept.Drawers, d)
		}
	}
	if len(kept.Drawers) > 0 {
		out.Kept = []store.Kept{kept}
	}
	return out, nil
}

// retentionRanges reads the recipient's dequeued and released bundles in
// either of DueRecipients' ranges, through its retention index, and
// returns with them whether a bundle dequeued at or after dueBefore names
// a drawer. A store of the format before that index, opened read-only so
// that it could not be given it (migrateFormat), reads every record.
func (s *Store) retentionRanges(ctx context.Context, recipient string, r [16]byte, dueBefore, since time.Time) ([]bundle.Record, func(drawer string) (bool, error), error) {
	if s.unindexed {
		all, err := s.DequeuedBundles(ctx, recipient)
		if err != nil {
			return nil, nil, err
		}
		later := map[string]bool{}
		var read []bundle.Record
		for _, rec := range all {
			if inRetentionRanges(rec, dueBefore, since) {
				read = append(read, rec)
			}
			if rec.State == bundle.Dequeued && !rec.DequeuedAt.Before(dueBefore) {
				for _, d := range rec.Drawers {
					later[d.ID] = true
				}
			}
		}
		return read, func(d string) (bool, error) { return later[d], nil }, nil
	}
	// The index holds whole microseconds: each range takes in the
	// microsecond it starts or ends in, and the records say which are in.
	var ids [][16]byte
	seen := map[[16]byte]bool{} // the ranges may share a microsecond
	add := func(key, _ []byte) error {
		if id := [16]byte(key[len(key)-16:]); !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
		return nil
	}
	if err := s.scanRange(retainedByAt(r, time.Unix(0, 0)), retainedByAt(r, dueBefore.Add(time.Microsecond)), add); err != nil {
		return nil, nil, err
	}
	if !since.IsZero() {
		if err := s.scanRange(retainedByAt(r, maxTime(since, dueBefore)), prefixEnd(append([]byte{prefixRetainedBy}, r[:]...)), add); err != nil {
			return nil, nil, err
		}
	}
	var read []bundle.Record
	for _, id := range ids {
		rec, found, err := s.dequeuedRecord(r, id)
		if err != nil {
			return nil, nil, err
		}
		if found && inRetentionRanges(rec, dueBefore, since) { // not found: deleted by a sweep since the index was read
			read = append(read, rec)
		}
	}
	namedLater := func(drawerID string) (bool, error) {
		d, err := uuidBytes(drawerID)
		if err != nil {
			return false, err
		}
		return s.anyKey(namedByAt(r, d, dueBefore), prefixEnd(namedByPrefix(r, d)), func([]byte) bool { return true })
	}
	return read, namedLater, nil
}

// anyKey says whether a key in [lo, hi) is one that match accepts; it
// reads no further than the first.
func (s *Store) anyKey(lo, hi []byte, match func(key []byte) bool) (bool, error) {
	found := false
	err := s.scanRange(lo, hi, func(key, _ []byte) error {
		if match(key) {
			found = true
			return errStopScan
		}
		return nil
	})
	if errors.Is(err, errStopScan) {
		err = nil
	}
	return found, err
}

// errStopScan ends a scan that found what it looked for.
var errStopScan = errors.New("stop the scan")

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// inRetentionRanges says whether a dequeued or released bundle was so
// before dueBefore or, when since is not zero, at or after since.
func inRetentionRanges(rec bundle.Record, dueBefore, since time.Time) bool {
	at := leftPendingAt(rec)
	return at.Before(dueBefore) || (!since.IsZero() && !at.Before(since))
}

// BundlesAsRead implements store.Retention: each record read is stored
// still, at the version read.
func (s *Store) BundlesAsRead(_ context.Context, recipient string, bundles []bundle.Record) error {
	for _, read := range bundles {
		r, id, err := parseIDs(recipient, read.ID)
		if err != nil {
			return err
		}
		rec, found, err := s.dequeuedRecord(r, id)
		switch {
		case err != nil:
			return err
		case !found:
			return conflict("bundle %s is gone since it was read", read.ID)
		case rec.Version != read.Version:
			return conflict("bundle %s changed since it was read", read.ID)
		}
	}
	return nil
}
