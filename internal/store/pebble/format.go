package pebble

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// The store's data has one format version, written when the store is created
// and checked at every Open. A directory whose data is in a format this build
// does not read is refused before anything in it is read or written, rather
// than misread. A change to any record's layout raises formatVersion.
const formatVersion = 3

// formatVersionKey holds the format version as a uvarint (a prefix of its own).
var formatVersionKey = []byte{prefixFormat}

// checkFormat refuses data of another format version, or data without one;
// an empty store (new, or one whose creation stopped before its first write)
// gets this build's version, unless it is opened read-only.
func checkFormat(db *pebble.DB, readOnly bool) error {
	v, closer, err := db.Get(formatVersionKey)
	if err == nil {
		defer closer.Close()
		switch got, n := binary.Uvarint(v); {
		case n <= 0 || n != len(v):
			return fmt.Errorf("its format version record (%x) is not one this build reads; this build reads format version %d", v, formatVersion)
		case got != formatVersion:
			return fmt.Errorf("its data is in format version %d; this build reads format version %d only", got, formatVersion)
		}
		return nil
	}
	if !errors.Is(err, pebble.ErrNotFound) {
		return err
	}
	empty, err := isEmpty(db)
	if err != nil {
		return err
	}
	if !empty {
		return fmt.Errorf("it holds data without a format version, which this build did not write; this build reads format version %d only", formatVersion)
	}
	if readOnly {
		return nil
	}
	return db.Set(formatVersionKey, binary.AppendUvarint(nil, formatVersion), pebble.Sync)
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
