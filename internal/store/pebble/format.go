package pebble

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/energydatahub/messagehub/internal/bundle"
)

// The store's data has one format version, written when the store is created
// and checked at every Open. A directory whose data is in a format this build
// does not read is refused before anything in it is read or written, rather
// than misread. A change to any record's layout raises formatVersion.
const formatVersion = 4

// unindexedVersion is the format before the retention indexes of each
// recipient (retainedByKey) and of the drawers dequeued bundles name
// (namedByKey): its data is read by this build once migrateFormat has
// built those from the records of dequeued and released bundles.
const unindexedVersion = 3

// formatVersionKey holds the format version as a uvarint (a prefix of its own).
var formatVersionKey = []byte{prefixFormat}

// checkFormat refuses data of another format version, or data without one;
// an empty store (new, or one whose creation stopped before its first write)
// gets this build's version, unless it is opened read-only. Data of
// unindexedVersion is migrated to this build's version, or, opened
// read-only, served as it is: unindexed says so.
func checkFormat(db *pebble.DB, readOnly bool) (unindexed bool, err error) {
	v, closer, err := db.Get(formatVersionKey)
	if err == nil {
		got, n := binary.Uvarint(v)
		_ = closer.Close()
		switch {
		case n <= 0 || n != len(v):
			return false, fmt.Errorf("its format version record (%x) is not one this build reads; this build reads format version %d", v, formatVersion)
		case got == unindexedVersion && readOnly:
			return true, nil
		case got == unindexedVersion:
			return false, migrateFormat(db)
		case got != formatVersion:
			return false, fmt.Errorf("its data is in format version %d; this build reads format version %d only", got, formatVersion)
		}
		return false, nil
	}
	if !errors.Is(err, pebble.ErrNotFound) {
		return false, err
	}
	empty, err := isEmpty(db)
	if err != nil {
		return false, err
	}
	if !empty {
		return false, fmt.Errorf("it holds data without a format version, which this build did not write; this build reads format version %d only", formatVersion)
	}
	if readOnly {
		return false, nil
	}
	return false, db.Set(formatVersionKey, binary.AppendUvarint(nil, formatVersion), pebble.Sync)
}

// migrateBatch is how many records of dequeued bundles one batch of
// migrateFormat indexes.
const migrateBatch = 10_000

// migrateFormat moves data of unindexedVersion to this build's format: it
// sets the retention keys of every dequeued or released bundle's record
// (retentionPuts), then the format version. Setting a key that is there
// already changes nothing, and the version is written last, synced with
// every batch before it, so a migration cut short (a crash) is done again
// whole at the next Open.
func migrateFormat(db *pebble.DB) error {
	iter, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixDequeued}, UpperBound: []byte{prefixDequeued + 1}})
	if err != nil {
		return err
	}
	batch := db.NewBatch()
	n := 0
	for iter.First(); iter.Valid() && err == nil; iter.Next() {
		key := iter.Key()
		if len(key) != 33 {
			continue
		}
		var rec bundle.Record
		if err = json.Unmarshal(iter.Value(), &rec); err != nil {
			err = fmt.Errorf("the record of bundle %x: %w", key[17:], err)
			break
		}
		var puts []put
		if puts, err = retentionPuts(rec, [16]byte(key[1:17]), [16]byte(key[17:]), false); err != nil {
			break
		}
		for _, p := range puts {
			if err = batch.Set(p.key, p.value, nil); err != nil {
				break
			}
		}
		if n++; n%migrateBatch == 0 && err == nil {
			err = batch.Commit(pebble.NoSync)
			batch = db.NewBatch()
		}
	}
	if closeErr := iter.Close(); err == nil {
		err = closeErr
	}
	if err == nil {
		err = batch.Set(formatVersionKey, binary.AppendUvarint(nil, formatVersion), nil)
	}
	if err == nil {
		err = batch.Commit(pebble.Sync)
	}
	if err != nil {
		return fmt.Errorf("migrate its data from format version %d to %d: %w", unindexedVersion, formatVersion, err)
	}
	return nil
}

// isEmpty says whether the database holds no key at all.
func isEmpty(db *pebble.DB) (bool, error) {
	iter, err := db.NewIter(nil)
	if err != nil {
		return false, err
	}
	empty := !iter.First()
	return empty, iter.Close() // and the iterator's error, if it met one
}
