package embedded

import (
	"github.com/bits-and-blooms/bloom/v3"
)

// idFilter is a bloom filter of the stored notification ids. Almost every id
// a save brings is new, and pebble's own bloom filters only cover tables on
// disk: without this, each new id costs a search of the memtable's skiplist
// (most of a save's CPU). A "no" from the filter is certain; a "maybe" is
// checked in the database. Ids removed by retention stay in the filter until
// the next rebuild; that only costs a lookup. Only the writer goroutine uses it.
type idFilter struct {
	filter   *bloom.BloomFilter
	capacity uint // ids the filter is sized for at a 1% false-positive rate
	count    uint // ids added since it was built
}

// minIDFilterCapacity is the smallest filter built (a variable for tests).
var minIDFilterCapacity uint = 1 << 20

// buildIDFilter sizes a filter for twice the ids stored and adds them all.
func (s *Store) buildIDFilter() error {
	var n uint
	if err := s.scan([]byte{prefixID}, func(_, _ []byte) error { n++; return nil }); err != nil {
		return err
	}
	f := idFilter{capacity: max(2*n, minIDFilterCapacity)}
	f.filter = bloom.NewWithEstimates(f.capacity, 0.01)
	err := s.scan([]byte{prefixID}, func(key, _ []byte) error {
		f.filter.Add(key)
		f.count++
		return nil
	})
	if err != nil {
		return err
	}
	s.ids = f
	return nil
}

// mayExist reports whether the id key may be stored.
func (f *idFilter) mayExist(key []byte) bool { return f.filter.Test(key) }

// addIDs records stored id keys, growing the filter when it gets too full.
// A failed rebuild keeps the current filter, which is still right, only
// less selective; the next save tries again.
func (s *Store) addIDs(keys [][]byte) {
	for _, k := range keys {
		s.ids.filter.Add(k)
	}
	s.ids.count += uint(len(keys))
	if s.ids.count > s.ids.capacity {
		if err := s.buildIDFilter(); err != nil {
			s.logger.Error("rebuilding the id filter failed", "err", err)
		}
	}
}
