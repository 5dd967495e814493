package embedded

import (
	"errors"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
)

// idFilter is a bloom filter of the stored notification ids. Almost every id
// a save brings is new, and pebble's own bloom filters only cover tables on
// disk: without this, each new id costs a search of the memtable's skiplist
// (most of a save's CPU). A "no" from the filter is certain; a "maybe" is
// checked in the database. Ids removed by retention stay in the filter until
// the next rebuild; that only costs a lookup. Only the writer goroutine uses it.
//
// At start the filter is built in the background (a scan of every stored id
// takes seconds with millions of them): until it is ready, every id is a
// "maybe", looked up in the database, and the ids written meanwhile are kept
// to be added to the new filter.
type idFilter struct {
	filter   *bloom.BloomFilter // nil while the first build runs
	capacity uint               // ids the filter is sized for at a 1% false-positive rate
	count    uint               // ids added since it was built
	written  [][]byte           // while building: ids written since the build began
	built    chan idFilter      // while building: the filter, once built
}

// minIDFilterCapacity is the smallest filter built (a variable for tests).
var minIDFilterCapacity uint = 1 << 20

// startIDFilter starts building the filter in the background; Close waits
// for it. The writer picks it up (useBuiltIDFilter).
func (s *Store) startIDFilter() {
	built := make(chan idFilter, 1)
	s.ids = idFilter{built: built}
	s.background.Go(func() {
		if beforeIDScan != nil {
			beforeIDScan()
		}
		t0 := time.Now()
		f, err := s.newIDFilter(s.stopBuild)
		if err != nil {
			if !errors.Is(err, errStoreClosed) {
				s.logger.Error("indexing the stored ids failed; every new id is looked up on disk", "err", err)
			}
			return
		}
		s.logger.Info("stored ids indexed", "ids", f.count, "took", time.Since(t0).Round(time.Millisecond).String())
		built <- f
	})
}

// useBuiltIDFilter installs the filter built in the background, if it is
// ready (or, with wait, once it is), with the ids written since its build
// began. Writer goroutine only.
func (s *Store) useBuiltIDFilter(wait bool) {
	if s.ids.built == nil {
		return
	}
	var f idFilter
	if wait {
		f = <-s.ids.built
	} else {
		select {
		case f = <-s.ids.built:
		default:
			return
		}
	}
	written := s.ids.written
	s.ids = f
	s.addIDs(written)
}

// beforeIDScan, when set (by tests), runs before the first id filter is built.
var beforeIDScan func()

// newIDFilter sizes a filter for twice the ids stored and adds them all. The
// count comes from the size of the ids on disk (over-estimated: a filter too
// large only costs memory), so one scan does; when the estimate falls short
// (ids still in the memtable) a second scan sizes it exactly. It stops with
// errStoreClosed when stop is closed.
func (s *Store) newIDFilter(stop <-chan struct{}) (idFilter, error) {
	onDisk, err := s.db.EstimateDiskUsage([]byte{prefixID}, []byte{prefixID + 1})
	if err != nil {
		return idFilter{}, err
	}
	f, err := s.fillIDFilter(uint(onDisk/minIDRecordOnDisk), stop)
	if err != nil || f.count <= f.capacity/2 {
		return f, err
	}
	return s.fillIDFilter(f.count, stop)
}

// minIDRecordOnDisk under-estimates what one id record takes in a table (a
// 17-byte key and a 33-byte value of random bytes, which do not compress:
// about 53 measured), so that dividing by it over-estimates the count.
const minIDRecordOnDisk = 32

// fillIDFilter builds a filter for 2 × n ids and adds every stored id.
func (s *Store) fillIDFilter(n uint, stop <-chan struct{}) (idFilter, error) {
	f := idFilter{capacity: max(2*n, minIDFilterCapacity)}
	f.filter = bloom.NewWithEstimates(f.capacity, 0.01)
	err := s.scan([]byte{prefixID}, func(key, _ []byte) error {
		f.filter.Add(key)
		f.count++
		return stopped(stop, f.count)
	})
	return f, err
}

// stopped checks stop every 65,536 ids.
func stopped(stop <-chan struct{}, n uint) error {
	if n%(1<<16) != 0 {
		return nil
	}
	select {
	case <-stop:
		return errStoreClosed
	default:
		return nil
	}
}

// mayExist reports whether the id key may be stored.
func (f *idFilter) mayExist(key []byte) bool { return f.filter == nil || f.filter.Test(key) }

// addIDs records stored id keys, growing the filter when it gets too full.
// A failed rebuild keeps the current filter, which is still right, only
// less selective; the next save tries again.
func (s *Store) addIDs(keys [][]byte) {
	if s.ids.filter == nil {
		s.ids.written = append(s.ids.written, keys...)
		return
	}
	for _, k := range keys {
		s.ids.filter.Add(k)
	}
	s.ids.count += uint(len(keys))
	if s.ids.count > s.ids.capacity {
		f, err := s.newIDFilter(nil)
		if err != nil {
			s.logger.Error("rebuilding the id filter failed", "err", err)
			return
		}
		s.ids = f
	}
}
