package pebble

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/store"
)

// The table answers like a multiset of (hash, group) entries through random
// adds and removes, growth, and an encode/decode round trip; hashes are drawn
// from a small set so that probe runs are long and removals shift entries
// back across the end of the table.
func TestIDIndexAnswersLikeAMultiset(t *testing.T) {
	old := minIDIndexSlots
	minIDIndexSlots = 8
	t.Cleanup(func() { minIDIndexSlots = old })
	r := rand.New(rand.NewPCG(1, 2))
	x := newIDIndex(0)
	want := map[uint64]int{} // entry -> how many times it is in
	hashes := make([]uint64, 40)
	for i := range hashes {
		hashes[i] = r.Uint64()>>groupBits | 1<<(hashBits-1)
	}
	check := func(x *idIndex) {
		t.Helper()
		checkMultiset(t, x, want, hashes)
	}
	var in []uint64
	for step := range 20_000 {
		if len(in) > 0 && r.IntN(5) < 2 {
			i := r.IntN(len(in))
			e := in[i]
			in = slices.Delete(in, i, i+1)
			x.change(nil, []uint64{e})
			if want[e]--; want[e] == 0 {
				delete(want, e)
			}
		} else {
			e := idEntry(hashes[r.IntN(len(hashes))], uint32(r.IntN(3))) //nolint:gosec // small
			in = append(in, e)
			x.change([]uint64{e}, nil)
			want[e]++
		}
		if step%1000 == 0 {
			check(x)
		}
	}
	check(x)
	x.finishGrowth(true)
	check(x)
	if x.count > len(x.slots)*3/4 {
		t.Fatalf("%d entries in %d slots", x.count, len(x.slots))
	}
	var encoded bytes.Buffer
	if err := x.writeTo(&encoded); err != nil {
		t.Fatal(err)
	}
	decoded, err := readIDIndex(bytes.NewReader(encoded.Bytes()), uint64(len(x.slots)))
	if err != nil {
		t.Fatal(err)
	}
	check(decoded)
	if _, err := readIDIndex(bytes.NewReader(encoded.Bytes()[:20]), uint64(len(x.slots))); err == nil {
		t.Fatal("a truncated index was read")
	}
	if _, err := readIDIndex(bytes.NewReader(encoded.Bytes()), uint64(len(x.slots))/2); err == nil {
		t.Fatal("an index larger than the file allows was read")
	}
	// Removing what is not there changes nothing.
	x.change(nil, []uint64{idEntry(hashes[0], 7)})
	check(x)
}

// checkMultiset fails unless x holds exactly the entries of want: counted,
// and each hash's groups.
func checkMultiset(t *testing.T, x *idIndex, want map[uint64]int, hashes []uint64) {
	t.Helper()
	n := 0
	for _, c := range want {
		n += c
	}
	if x.count != n {
		t.Fatalf("count %d, want %d", x.count, n)
	}
	for _, h := range hashes {
		var wantGroups []uint32
		for e, c := range want {
			for range c {
				if e>>groupBits == h {
					wantGroups = append(wantGroups, entryGroup(e))
				}
			}
		}
		got := x.groups(h, nil)
		slices.Sort(got)
		slices.Sort(wantGroups)
		if !slices.Equal(got, wantGroups) {
			t.Fatalf("groups of %x: %v, want %v", h, got, wantGroups)
		}
	}
}

// While a larger table is built in the background, the table in use takes
// every change and answers for all of them; the larger one, once switched
// to, holds the same entries: those of the copy it was built from and the
// changes made since.
func TestIDIndexGrowsInTheBackgroundWithoutLosingChanges(t *testing.T) {
	oldMin, oldGate := minIDIndexSlots, growthBuilt
	minIDIndexSlots, growthBuilt = 64, make(chan struct{})
	t.Cleanup(func() { minIDIndexSlots, growthBuilt = oldMin, oldGate })
	r := rand.New(rand.NewPCG(5, 6))
	x := newIDIndex(0)
	want := map[uint64]int{}
	var hashes, in []uint64
	add := func() {
		h := r.Uint64()>>groupBits | 1<<(hashBits-1)
		if len(hashes) > 0 && r.IntN(4) == 0 {
			h = hashes[r.IntN(len(hashes))] // some hashes more than once
		}
		e := idEntry(h, uint32(r.IntN(3))) //nolint:gosec // small
		hashes, in = append(hashes, h), append(in, e)
		want[e]++
		x.change([]uint64{e}, nil)
	}
	remove := func() {
		i := r.IntN(len(in))
		e := in[i]
		in = slices.Delete(in, i, i+1)
		if want[e]--; want[e] == 0 {
			delete(want, e)
		}
		x.change(nil, []uint64{e})
	}
	for x.next == nil {
		add()
	}
	if len(in) != 64*growAtEighths/8+1 || len(x.slots) != 64 {
		t.Fatalf("growth started at %d entries in %d slots", len(in), len(x.slots))
	}
	// Changes before the copy is made are in the copy; those after it are
	// noted. The build is held back meanwhile.
	remove()
	add()
	x.copyForGrowth(true)
	for range 6 {
		remove()
		add()
		add()
	}
	checkMultiset(t, x, want, hashes)
	if len(x.slots) != 64 || x.next == nil || len(x.next.changes) < 18 {
		t.Fatalf("the build is held, yet the table has %d slots (growth under way: %v)", len(x.slots), x.next != nil)
	}
	close(growthBuilt)
	x.finishGrowth(true)
	if len(x.slots) != 128 || x.next != nil {
		t.Fatalf("after the build, %d slots (growth under way: %v)", len(x.slots), x.next != nil)
	}
	checkMultiset(t, x, want, hashes)
	remove()
	add()
	checkMultiset(t, x, want, hashes)

	// Closed while a growth is under way, before or after its copy.
	for _, copied := range []bool{false, true} {
		y := newIDIndex(0)
		for y.next == nil {
			y.change([]uint64{idEntry(r.Uint64()>>groupBits|1<<(hashBits-1), 1)}, nil)
		}
		if copied {
			y.copyForGrowth(true)
		}
		y.free()
		if y.slots != nil || y.next != nil {
			t.Fatalf("after free (copied: %v): %d slots, growth under way: %v", copied, len(y.slots), y.next != nil)
		}
	}
}

// index10M is an id index of 10 million random entries (a 128 MiB table).
func index10M(b *testing.B) *idIndex {
	const n = 10_000_000
	x := newIDIndex(n)
	b.Cleanup(func() { freeSlots(x.slots) })
	r := rand.New(rand.NewPCG(1, 2))
	add := make([]uint64, 0, n)
	for range n {
		add = append(add, idEntry(r.Uint64()>>groupBits|1<<(hashBits-1), 1))
	}
	x.change(add, nil)
	return x
}

// BenchmarkIDIndexLookup10M: the lookup every new id costs in an index of
// 10 million ids: about one miss of every CPU cache (huge pages,
// madvise(MADV_HUGEPAGE), do not make it cheaper). Lookups one after another
// overlap their misses; between other work,
// as in a save, they do not (BenchmarkIDRecordsOfASave10M).
func BenchmarkIDIndexLookup10M(b *testing.B) {
	x := index10M(b)
	r := rand.New(rand.NewPCG(3, 4))
	hashes := make([]uint64, 1<<16)
	for i := range hashes {
		hashes[i] = r.Uint64()>>groupBits | 1<<(hashBits-1)
	}
	var buf []uint32
	b.ResetTimer()
	for i := range b.N {
		buf = x.groups(hashes[i&(len(hashes)-1)], buf[:0])
	}
}

// BenchmarkIDRecordsOfASave10M: the id records of a Save of 1,000 new ids
// over 100 recipients, looked up in an index of 10 million ids. The saves
// come from a pool of a million ids, too many for the CPU's caches to keep
// their slots between rounds.
func BenchmarkIDRecordsOfASave10M(b *testing.B) {
	s, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	s.ids = index10M(b)
	pool := make([][]store.RecipientSave, 1000)
	for i := range pool {
		pool[i] = make([]store.RecipientSave, 100)
		for j := range pool[i] {
			save := &pool[i][j]
			save.Recipient = uuid.NewString()
			drawer := uuid.NewString()
			for range 10 {
				save.IDs = append(save.IDs, store.IDRecord{ID: uuid.NewString(), DrawerID: drawer})
			}
		}
	}
	b.ResetTimer()
	for i := range b.N {
		tx := &txn{s: s, ids: map[[16]byte][]byte{}}
		if _, _, err := tx.idRecords(pool[i%len(pool)]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/id")
}

// BenchmarkIDIndexChange10M: a group's change of an index of 10 million
// ids: 1,000 new ids in, the 1,000 of the change before out (as dequeues
// take them), so the index keeps its size and does not grow.
func BenchmarkIDIndexChange10M(b *testing.B) {
	x := index10M(b)
	r := rand.New(rand.NewPCG(5, 6))
	var prev []uint64
	b.ResetTimer()
	for range b.N {
		add := make([]uint64, 1000)
		for i := range add {
			add[i] = idEntry(r.Uint64()>>groupBits|1<<(hashBits-1), 2)
		}
		x.change(add, prev)
		prev = add
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/id")
}

// BenchmarkIDIndexChangesAcrossGrowth: the longest that one change of 1,000
// new ids (a Save's) holds the writer while the index grows from 16 M to
// 32 M slots, at about 10.5 M ids. Changes come every 3 ms (333,000 ids/s,
// more than the hub ingests).
func BenchmarkIDIndexChangesAcrossGrowth(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	entry := func() uint64 { return idEntry(r.Uint64()>>groupBits|1<<(hashBits-1), 1) }
	var longest time.Duration
	for range b.N {
		b.StopTimer()
		x := newIDIndex(12_000_000)
		add := make([]uint64, 0, 10_400_000)
		for range 10_400_000 {
			add = append(add, entry())
		}
		x.change(add, nil)
		slots := len(x.slots)
		b.StartTimer()
		tick := time.NewTicker(3 * time.Millisecond)
		for len(x.slots) == slots && x.count < 13_000_000 {
			<-tick.C
			batch := make([]uint64, 1000)
			for i := range batch {
				batch[i] = entry()
			}
			t0 := time.Now()
			x.change(batch, nil)
			longest = max(longest, time.Since(t0))
		}
		tick.Stop()
		b.StopTimer()
		if len(x.slots) == slots {
			b.Fatal("the index did not grow")
		}
		x.free()
	}
	b.ReportMetric(float64(longest.Microseconds())/1000, "longest-change-ms")
}
