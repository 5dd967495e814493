package embedded

import (
	"runtime"
	"time"

	"golang.org/x/sync/errgroup"
)

// idFilter is a bloom filter of the stored notification ids. Almost every id
// a save brings is new, and pebble's own bloom filters only cover tables on
// disk: without this, each new id costs a search of the memtable's skiplist
// (most of a save's CPU). A "no" from the filter is certain; a "maybe" is
// checked in the database. Ids removed by retention stay in the filter until
// the next rebuild; that only costs a lookup. Only the writer goroutine uses it.
type idFilter struct {
	filter   *blockedBloom // see bloom.go
	capacity uint          // ids the filter is sized for (under 1% false positives)
	count    uint          // ids added since it was built
}

// minIDFilterCapacity is the smallest filter built (a variable for tests).
var minIDFilterCapacity uint = 1 << 20

// buildIDFilter indexes the stored ids at start. A background build was
// tried: the hub listened at once, but until the filter was ready every new
// id was a disk lookup, which made ingest 30 times slower and the build
// itself slower than this scan.
func (s *Store) buildIDFilter() error {
	t0 := time.Now()
	f, err := s.newIDFilter()
	if err != nil {
		return err
	}
	s.ids = f
	s.logger.Info("stored ids indexed", "ids", f.count, "took", time.Since(t0).Round(time.Millisecond).String())
	return nil
}

// newIDFilter sizes a filter for twice the ids stored and adds them all. The
// count comes from the size of the ids on disk (over-estimated: a filter too
// large only costs memory), so one scan does; when the estimate falls short
// (ids still in the memtable) a second scan sizes it exactly.
func (s *Store) newIDFilter() (idFilter, error) {
	onDisk, err := s.db.EstimateDiskUsage([]byte{prefixID}, []byte{prefixID + 1})
	if err != nil {
		return idFilter{}, err
	}
	f, err := s.fillIDFilter(uint(onDisk / minIDRecordOnDisk))
	if err != nil || f.count <= f.capacity/2 {
		return f, err
	}
	return s.fillIDFilter(f.count)
}

// minIDRecordOnDisk under-estimates what one id record takes in a table (a
// 17-byte key and a 33-byte value of random bytes, which do not compress:
// about 53 measured), so that dividing by it over-estimates the count a little.
const minIDRecordOnDisk = 48

// fillIDFilter builds a filter for 2 × n ids and adds every stored id. The
// ids are read in as many key ranges at once as there are CPUs: with
// millions of them this is most of a start after a crash.
func (s *Store) fillIDFilter(n uint) (idFilter, error) {
	f := idFilter{capacity: max(2*n, minIDFilterCapacity)}
	f.filter = newBlockedBloom(f.capacity)
	parts := min(runtime.GOMAXPROCS(0), 16)
	counts := make([]uint, parts)
	var g errgroup.Group
	for i := range parts {
		// Ids are random, so ranges of their first byte hold about as many.
		lo, hi := []byte{prefixID, byte(256 * i / parts)}, []byte{prefixID, byte(256 * (i + 1) / parts)}
		if i == parts-1 {
			hi = []byte{prefixID + 1}
		}
		g.Go(func() error {
			return s.scanRange(lo, hi, func(key, _ []byte) error {
				f.filter.addAtomic(key)
				counts[i]++
				return nil
			})
		})
	}
	err := g.Wait()
	for _, c := range counts {
		f.count += c
	}
	return f, err
}

// mayExist reports whether the id key may be stored.
func (f *idFilter) mayExist(key []byte) bool { return f.filter.mayContain(key) }

// addIDs records stored id keys, growing the filter when it gets too full.
// A failed rebuild keeps the current filter, which is still right, only
// less selective; the next save tries again.
func (s *Store) addIDs(keys [][]byte) {
	for _, k := range keys {
		s.ids.filter.add(k)
	}
	s.ids.count += uint(len(keys))
	if s.ids.count > s.ids.capacity {
		f, err := s.newIDFilter()
		if err != nil {
			s.logger.Error("rebuilding the id filter failed", "err", err)
			return
		}
		s.ids = f
	}
}
