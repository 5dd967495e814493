package pebble

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/zeebo/xxh3"
)

// Every stored notification id has a record (its fingerprint and drawer)
// under "j <group> <id>", where group is a 24-bit number shared by all the
// ids one write group brought. Keyed by the id alone, each of a Save's 1,000
// records would go to a random place in pebble's memtable: a skiplist search
// that misses the CPU caches at every step. Keyed by group, a group's records
// are one sorted run in a part of the key space no one else writes to
// (BenchmarkSaveBatch1000Over100Recipients).
//
// The idIndex says which groups may hold an id. It is a hash table (open
// addressing, linear probing) of 64-bit entries: 40 bits of the id's hash
// and its group. The id of a new notification almost never matches an
// entry, so it costs no read; one that matches is read under each group its
// entries name. (The hash bits below the table's size only place an entry,
// so with 10 million ids about 15 bits tell two ids of one slot apart: a new
// id matches another's entry about once in 50,000 lookups, and that costs
// one read that finds nothing.)
type idIndex struct {
	mu    sync.RWMutex // held by the writer to change it and by other goroutines to read it
	slots []uint64     // 0: empty; else hash<<groupBits | group
	count int
	// next is a larger table being built in the background, for the writer
	// (the one goroutine that changes the index) to switch to once it is
	// done (growth.go).
	next *growth
}

const (
	groupBits = 24
	maxGroup  = 1<<groupBits - 1
	groupMask = maxGroup
	hashBits  = 64 - groupBits
)

// minIDIndexSlots is the smallest table (a variable for tests).
var minIDIndexSlots = 1 << 16

// newIDIndex sizes a table for n ids at most 3/4 full (a power of two).
func newIDIndex(n int) *idIndex {
	size := max(minIDIndexSlots, 2)
	if need := n + n/3 + 1; need > size {
		size = 1 << bits.Len(uint(need-1))
	}
	return &idIndex{slots: allocSlots(size)}
}

// idHash is the part of the id's hash the index keeps, its top bit set:
// never 0, so that no entry is 0, the empty slot.
func idHash(id *[16]byte) uint64 { return xxh3.Hash(id[:])>>groupBits | 1<<(hashBits-1) }

func idEntry(h uint64, group uint32) uint64 { return h<<groupBits | uint64(group) }

func entryGroup(e uint64) uint32 { return uint32(e & groupMask) }

func (x *idIndex) home(h uint64) int { return int(h & uint64(len(x.slots)-1)) }

// groups appends to buf the group of every entry with hash h.
func (x *idIndex) groups(h uint64, buf []uint32) []uint32 {
	mask := len(x.slots) - 1
	for i := x.home(h); x.slots[i] != 0; i = (i + 1) & mask {
		if x.slots[i]>>groupBits == h {
			buf = append(buf, entryGroup(x.slots[i]))
		}
	}
	return buf
}

// free returns the table to the system, and a larger one being built; the
// index is empty after it. The writer must have stopped.
func (x *idIndex) free() {
	x.stopGrowth()
	x.mu.Lock()
	defer x.mu.Unlock()
	freeSlots(x.slots)
	x.slots, x.count = nil, 0
}

// warm loads the slot where each hash's probe starts. With millions of ids
// each such load misses every cache; loaded here, one after another with no
// work between them, the CPU waits for many misses at once, and the lookups
// that follow find their slots cached.
func (x *idIndex) warm(hashes []uint64) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if len(x.slots) == 0 {
		return // freed
	}
	x.loadHomes(hashes, 0)
}

// loadHomes loads the slot where the probe of each value's hash starts (the
// hash is the value shifted right by shift: 0 for hashes, groupBits for
// entries), one load after another.
func (x *idIndex) loadHomes(values []uint64, shift uint) {
	var sum uint64
	for _, v := range values {
		sum += x.slots[x.home(v>>shift)]
	}
	warmSink.Add(sum)
}

// warmSink keeps the compiler from dropping warm's loads.
var warmSink atomic.Uint64

// change adds and removes entries as one step that readers see whole. Only
// the writer calls it.
func (x *idIndex) change(add, remove []uint64) {
	if len(add) == 0 && len(remove) == 0 {
		return
	}
	x.finishGrowth(false)
	if need := x.count + len(add); need > len(x.slots)*3/4 {
		x.finishGrowth(true)
	}
	// Loaded first, one after another, the slots the changes touch are
	// cached when the lock is held to make them (BenchmarkIDIndexChange10M:
	// about a third less time). Only the writer changes slots, so it reads
	// them without the lock.
	if len(add)+len(remove) >= warmIDs {
		x.loadHomes(add, groupBits)
		x.loadHomes(remove, groupBits)
	}
	x.mu.Lock()
	for _, e := range remove {
		x.remove(e)
	}
	if need := x.count + len(add); need > len(x.slots)*3/4 {
		x.grow(need) // more at once than a growth in the background made room for
	}
	for _, e := range add {
		x.insert(e)
	}
	x.mu.Unlock()
	if x.next != nil {
		x.next.record(add, remove)
	} else if x.count > len(x.slots)*growAtEighths/8 {
		x.startGrowth()
	}
}

func (x *idIndex) insert(e uint64) {
	mask := len(x.slots) - 1
	i := x.home(e >> groupBits)
	for x.slots[i] != 0 {
		i = (i + 1) & mask
	}
	x.slots[i] = e
	x.count++
}

// remove deletes one entry equal to e and shifts the entries after it back
// so that no probe sequence has a hole.
func (x *idIndex) remove(e uint64) {
	mask := len(x.slots) - 1
	i := x.home(e >> groupBits)
	for x.slots[i] != e {
		if x.slots[i] == 0 {
			return
		}
		i = (i + 1) & mask
	}
	x.slots[i] = 0
	x.count--
	for j := (i + 1) & mask; x.slots[j] != 0; j = (j + 1) & mask {
		// The entry at j moves into the hole at i unless its home lies
		// (cyclically) after i and at or before j.
		k := x.home(x.slots[j] >> groupBits)
		stays := i < j && i < k && k <= j || j < i && (k > i || k <= j)
		if !stays {
			x.slots[i], x.slots[j] = x.slots[j], 0
			i = j
		}
	}
}

// grow rebuilds the table for n entries (at least twice as large).
func (x *idIndex) grow(n int) {
	old := x.slots
	x.slots = newIDIndex(max(n, len(old))).slots
	x.count = 0
	for _, e := range old {
		if e != 0 {
			x.insert(e)
		}
	}
	freeSlots(old)
}

var errIndexFull = errors.New("id index full")

// idFiller adds entries to a table being filled from several goroutines
// (nothing removes or reads meanwhile), one filler each. It sorts what it
// is given into fillBuckets ranges of the table and adds a range's entries
// together, where random writes all over a table of hundreds of MiB would
// miss the caches (and the TLB) at every entry, and make most of a start
// after a crash. What it adds is counted in used, in steps; it stops at full.
type idFiller struct {
	x        *idIndex
	used     *atomic.Int64
	full     int64
	buckets  [fillBuckets][]uint64
	buffered int
}

const (
	fillBuckets = 256
	fillBuffer  = 1 << 16 // entries held before they are added
)

func (f *idFiller) add(e uint64) error {
	b := uint64(f.x.home(e>>groupBits)) * fillBuckets / uint64(len(f.x.slots))
	f.buckets[b] = append(f.buckets[b], e)
	if f.buffered++; f.buffered == fillBuffer {
		return f.flush()
	}
	return nil
}

// flush adds the entries held.
func (f *idFiller) flush() error {
	if f.used.Add(int64(f.buffered)) > f.full {
		return errIndexFull
	}
	f.buffered = 0
	mask := len(f.x.slots) - 1
	for b := range f.buckets {
		for _, e := range f.buckets[b] {
			i := f.x.home(e >> groupBits)
			for !atomic.CompareAndSwapUint64(&f.x.slots[i], 0, e) {
				i = (i + 1) & mask
			}
		}
		f.buckets[b] = f.buckets[b][:0]
	}
	return nil
}

// writeTo writes the table's encoding: the slot count, then the slots.
func (x *idIndex) writeTo(w io.Writer) error {
	buf := make([]byte, 0, 64<<10)
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(x.slots)))
	for _, e := range x.slots {
		if len(buf) == cap(buf) {
			if _, err := w.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
		buf = binary.LittleEndian.AppendUint64(buf, e)
	}
	_, err := w.Write(buf)
	return err
}

// readIDIndex reads what writeTo wrote, believing a slot count of at most
// maxSlots.
func readIDIndex(r io.Reader, maxSlots uint64) (*idIndex, error) {
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, fmt.Errorf("id index: %w", err)
	}
	n := binary.BigEndian.Uint64(head[:])
	if n == 0 || n&(n-1) != 0 || n > maxSlots {
		return nil, errors.New("id index: size mismatch")
	}
	x := &idIndex{slots: allocSlots(int(n))} //nolint:gosec // at most maxSlots
	buf := make([]byte, 64<<10)
	for i := 0; i < len(x.slots); {
		chunk := buf[:min(len(buf), (len(x.slots)-i)*8)]
		if _, err := io.ReadFull(r, chunk); err != nil {
			freeSlots(x.slots)
			return nil, fmt.Errorf("id index: %w", err)
		}
		for j := 0; j < len(chunk); j, i = j+8, i+1 {
			if x.slots[i] = binary.LittleEndian.Uint64(chunk[j:]); x.slots[i] != 0 {
				x.count++
			}
		}
	}
	return x, nil
}
