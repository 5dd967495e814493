package pebble

import (
	"errors"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/sync/errgroup"
)

// buildIDIndex indexes the stored ids at start, before the store opens
// rather than in the background: until an index is ready every new id is a
// disk lookup, which slows ingest down many times over, and the build with it.
func (s *Store) buildIDIndex() error {
	t0 := time.Now()
	x, err := s.scanIDIndex()
	if err != nil {
		return err
	}
	s.ids = x
	s.logger.Info("stored ids indexed", "ids", x.count, "took", time.Since(t0).Round(time.Millisecond).String())
	return nil
}

// scanIDIndex reads every stored id into a new index. It is sized from the
// size of the records on disk (over-estimated: too large a table only costs
// memory); when that falls short (records still in the memtable) the scan
// starts over with a larger table.
func (s *Store) scanIDIndex() (*idIndex, error) {
	onDisk, err := s.db.EstimateDiskUsage([]byte{prefixIDByGroup}, []byte{prefixIDByGroup + 1})
	if err != nil {
		return nil, err
	}
	n := int(onDisk / minIDRecordOnDisk) //nolint:gosec // bytes on disk over a constant
	for {
		x, err := s.fillIDIndex(n)
		if !errors.Is(err, errIndexFull) {
			return x, err
		}
		n = 2*n + 1024
	}
}

// minIDRecordOnDisk under-estimates what one id record takes in a table (a
// 20-byte key and a 33-byte value of random bytes, which do not compress:
// about 53 measured), so that dividing by it over-estimates the count a little.
const minIDRecordOnDisk = 48

// fillIDIndex adds every stored id to a table sized for n, reading as many
// key ranges at once as there are CPUs: with millions of ids this is most
// of a start after a crash. It fails with errIndexFull when the table would
// be more than 7/8 full.
func (s *Store) fillIDIndex(n int) (*idIndex, error) {
	ranges, err := s.idRanges(runtime.GOMAXPROCS(0))
	if err != nil {
		return nil, err
	}
	x := newIDIndex(n)
	full := int64(len(x.slots)) * 7 / 8
	var used atomic.Int64
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for _, r := range ranges {
		g.Go(func() error {
			f := idFiller{x: x, used: &used, full: full}
			err := s.scanRange(r[0], r[1], func(key, _ []byte) error {
				group, id, ok := idKeyParts(key)
				if !ok {
					return errCorrupt
				}
				return f.add(idEntry(idHash(&id), group))
			})
			if err != nil {
				return err
			}
			return f.flush()
		})
	}
	if err := g.Wait(); err != nil {
		freeSlots(x.slots)
		return nil, err
	}
	x.count = int(used.Load())
	if x.count > len(x.slots)*3/4 {
		x.grow(x.count)
	}
	return x, nil
}

// idRanges splits the id records into parts key ranges of about the same
// size, by group between the first and the last one stored.
func (s *Store) idRanges(parts int) ([][2][]byte, error) {
	first, last, err := s.groupSpan()
	if err != nil {
		return nil, err
	}
	key := func(g uint32) []byte { return []byte{prefixIDByGroup, byte(g >> 16), byte(g >> 8), byte(g)} }
	ranges := make([][2][]byte, parts)
	for i := range parts {
		lo := key(first + uint32(uint64(last-first+1)*uint64(i)/uint64(parts)))   //nolint:gosec // parts ≤ GOMAXPROCS
		hi := key(first + uint32(uint64(last-first+1)*uint64(i+1)/uint64(parts))) //nolint:gosec // parts ≤ GOMAXPROCS
		if i == 0 {
			lo = []byte{prefixIDByGroup}
		}
		if i == parts-1 {
			hi = []byte{prefixIDByGroup + 1}
		}
		ranges[i] = [2][]byte{lo, hi}
	}
	return ranges, nil
}

// groupSpan returns the first and the last group that holds records (0, 0
// when none does).
func (s *Store) groupSpan() (first, last uint32, err error) {
	iter, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixIDByGroup}, UpperBound: []byte{prefixIDByGroup + 1}})
	if err != nil {
		return 0, 0, err
	}
	if iter.First() {
		first, _, _ = idKeyParts(iter.Key())
	}
	if iter.Last() {
		last, _, _ = idKeyParts(iter.Key())
	}
	return first, last, iter.Close() // and the iterator's error, if it met one
}

// nextGroup numbers the next write group that brings ids: one after the
// last, past maxGroup back to 1. Numbers are reused after 16 million groups;
// a group's key range then holds the records of both, which only costs
// pebble the locality the numbering is for.
func (s *Store) nextGroup() uint32 {
	s.lastGroup = s.lastGroup%maxGroup + 1
	return s.lastGroup
}

// storedID finds an id's record: its key and value.
func (s *Store) storedID(id *[16]byte) (key, value []byte, ok bool, err error) {
	var buf [2]uint32
	s.ids.mu.RLock()
	if s.ids.slots == nil {
		s.ids.mu.RUnlock()
		return nil, nil, false, pebble.ErrClosed // freed by Close
	}
	groups := s.ids.groups(idHash(id), buf[:0])
	s.ids.mu.RUnlock()
	return s.idRecordOf(id, groups)
}

// idRecordOf finds an id's record among the groups the index lists for it.
func (s *Store) idRecordOf(id *[16]byte, groups []uint32) (key, value []byte, ok bool, err error) {
	for _, g := range groups {
		key := idKey(g, id)
		v, ok, err := s.get(key)
		if err != nil || ok {
			return key, v, ok, err
		}
	}
	return nil, nil, false, nil
}
