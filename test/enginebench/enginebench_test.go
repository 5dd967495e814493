// Package enginebench compares the two candidate embedded stores for
// MessageHub (bbolt and pebble) on a workload that mirrors the service:
// notifications are packed into pages (~1,000 per page, ~120 KB), every
// notification id is also written to a global id index (16-byte random keys)
// so that saves are idempotent, and a few small control records are
// overwritten on every save. Every write is durable (fsync'ed) before it is
// acknowledged.
//
// Run (see README.md):
//
//	go test -run x -bench . -benchtime=2s -count 3
package enginebench

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	bolt "go.etcd.io/bbolt"
)

// Workload shape.
const (
	prepopIDs      = 500_000 // id-index keys present before every benchmark
	idKeyLen       = 16      // random notification id
	idValLen       = 24      // id index value: page ref (queue, seq, slot)
	itemLen        = 120     // packed notification size inside a page
	batchItems     = 1_000   // notifications per SaveBatch call / per page
	ctrlLen        = 200     // small control record (queue head, stats, ...)
	singlePageLen  = 150     // page holding a single notification
	scanItems      = 51_200  // items read by ScanPages51200
	scanPages      = 52      // ... stored as 52 pages
	lookupsPerOp   = 1_000   // point gets per LookupIDs1000 op
	concurrentGors = 64      // goroutines in SaveSingleConcurrent64
	prepopChunk    = 10_000  // keys per (unsynced) pre-population transaction
)

// Logical "buckets". bbolt uses real buckets; pebble prefixes the key with
// the bucket byte.
const (
	bIDs   byte = 'i'
	bPages byte = 'p'
	bCtrl  byte = 'c'
)

var (
	scanQueue  = []byte("scanq\x00\x00\x00") // 8-byte queue id holding the 52 scan pages
	writeQueue = []byte("writeq\x00\x00")    // 8-byte queue id receiving new pages
	ctrlNames  = [][]byte{[]byte("head"), []byte("tail"), []byte("stats")}
)

type op struct {
	bucket byte
	key    []byte
	val    []byte
}

// store is the minimal surface the service needs from an engine.
type store interface {
	// write applies ops atomically and durably (fsync before return).
	write(ops []op) error
	// writeConcurrent is write for use by many goroutines at once; bbolt
	// coalesces through db.Batch, pebble uses plain synced batch commits
	// (its commit pipeline groups concurrent WAL syncs itself).
	writeConcurrent(ops []op) error
	// lookup does point gets for keys in the id index, copying values
	// out; returns how many were found.
	lookup(keys [][]byte) (int, error)
	// scan iterates all pages of a queue in order, copying values out.
	scan(queue []byte, fn func(v []byte)) error
	close() error
}

// ---------------------------------------------------------------- bbolt

type boltStore struct{ db *bolt.DB }

func openBolt(dir string) (*boltStore, error) {
	db, err := bolt.Open(filepath.Join(dir, "bolt.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range []byte{bIDs, bPages, bCtrl} {
			if _, err := tx.CreateBucketIfNotExists([]byte{b}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &boltStore{db: db}, nil
}

func boltApply(tx *bolt.Tx, ops []op) error {
	for _, o := range ops {
		if err := tx.Bucket([]byte{o.bucket}).Put(o.key, o.val); err != nil {
			return err
		}
	}
	return nil
}

func (s *boltStore) write(ops []op) error {
	return s.db.Update(func(tx *bolt.Tx) error { return boltApply(tx, ops) })
}

func (s *boltStore) writeConcurrent(ops []op) error {
	return s.db.Batch(func(tx *bolt.Tx) error { return boltApply(tx, ops) })
}

func (s *boltStore) lookup(keys [][]byte) (int, error) {
	found := 0
	var buf [idValLen]byte
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte{bIDs})
		for _, k := range keys {
			if v := b.Get(k); v != nil {
				copy(buf[:], v)
				found++
			}
		}
		return nil
	})
	return found, err
}

func (s *boltStore) scan(queue []byte, fn func(v []byte)) error {
	return s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket([]byte{bPages}).Cursor()
		for k, v := c.Seek(queue); k != nil && bytes.HasPrefix(k, queue); k, v = c.Next() {
			fn(bytes.Clone(v))
		}
		return nil
	})
}

func (s *boltStore) close() error { return s.db.Close() }

// ---------------------------------------------------------------- pebble

type pebbleStore struct{ db *pebble.DB }

func openPebble(dir string) (*pebbleStore, error) {
	db, err := pebble.Open(filepath.Join(dir, "pebble"), &pebble.Options{
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             quietLogger{},
	})
	if err != nil {
		return nil, err
	}
	return &pebbleStore{db: db}, nil
}

func pkey(bucket byte, key []byte) []byte {
	k := make([]byte, 1+len(key))
	k[0] = bucket
	copy(k[1:], key)
	return k
}

func (s *pebbleStore) commit(ops []op) error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, o := range ops {
		if err := b.Set(pkey(o.bucket, o.key), o.val, nil); err != nil {
			return err
		}
	}
	return b.Commit(pebble.Sync)
}

func (s *pebbleStore) write(ops []op) error           { return s.commit(ops) }
func (s *pebbleStore) writeConcurrent(ops []op) error { return s.commit(ops) }

func (s *pebbleStore) lookup(keys [][]byte) (int, error) {
	found := 0
	var buf [idValLen]byte
	k := make([]byte, 1+idKeyLen)
	k[0] = bIDs
	for _, key := range keys {
		copy(k[1:], key)
		v, closer, err := s.db.Get(k)
		if err == pebble.ErrNotFound {
			continue
		}
		if err != nil {
			return found, err
		}
		copy(buf[:], v)
		closer.Close()
		found++
	}
	return found, nil
}

func (s *pebbleStore) scan(queue []byte, fn func(v []byte)) error {
	lo := pkey(bPages, queue)
	hi := bytes.Clone(lo)
	hi[len(hi)-1]++ // queue ids never end in 0xff
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return err
		}
		fn(bytes.Clone(v))
	}
	return it.Close()
}

func (s *pebbleStore) close() error { return s.db.Close() }

type quietLogger struct{}

func (quietLogger) Infof(string, ...interface{}) {}
func (quietLogger) Errorf(f string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "pebble: "+f+"\n", a...)
}
func (quietLogger) Fatalf(f string, a ...interface{}) { panic(fmt.Sprintf(f, a...)) }

// ---------------------------------------------------------------- engines

type engine struct {
	name string
	open func(dir string) (store, error)
	// finishPrepop runs after pre-population (before close).
	finishPrepop func(s store) error
}

var engines = []engine{
	{
		name: "bbolt",
		open: func(dir string) (store, error) { return openBolt(dir) },
		finishPrepop: func(s store) error {
			db := s.(*boltStore).db
			db.NoSync = false
			return db.Sync()
		},
	},
	{
		name: "pebble",
		open: func(dir string) (store, error) { return openPebble(dir) },
		finishPrepop: func(s store) error {
			// Leave the LSM in a settled state, as a long-running
			// service would be: everything flushed and compacted.
			db := s.(*pebbleStore).db
			if err := db.Flush(); err != nil {
				return err
			}
			return db.Compact(context.Background(), []byte{0}, []byte{0xff}, true)
		},
	},
}

// ---------------------------------------------------------------- data

// ids holds the 500,000 pre-populated id keys (same for both engines).
var ids = func() [][]byte {
	r := rand.New(rand.NewChaCha8([32]byte{1}))
	out := make([][]byte, prepopIDs)
	for i := range out {
		k := make([]byte, idKeyLen)
		for j := 0; j < idKeyLen; j += 8 {
			binary.LittleEndian.PutUint64(k[j:], r.Uint64())
		}
		out[i] = k
	}
	return out
}()

func randID(r *rand.Rand) []byte {
	k := make([]byte, idKeyLen)
	binary.LittleEndian.PutUint64(k, r.Uint64())
	binary.LittleEndian.PutUint64(k[8:], r.Uint64())
	return k
}

func idVal(seq uint64, slot int) []byte {
	v := make([]byte, idValLen)
	copy(v, writeQueue)
	binary.BigEndian.PutUint64(v[8:], seq)
	binary.BigEndian.PutUint64(v[16:], uint64(slot))
	return v
}

func pageKey(queue []byte, seq uint64) []byte {
	k := make([]byte, len(queue)+8)
	copy(k, queue)
	binary.BigEndian.PutUint64(k[len(queue):], seq)
	return k
}

// makePage packs n JSON-ish notifications of itemLen bytes each behind a
// 4-byte item count, i.e. roughly what the service stores (compressible
// text with random ids, not pure random bytes).
func makePage(r *rand.Rand, n int) []byte {
	p := make([]byte, 4, 4+n*itemLen)
	binary.BigEndian.PutUint32(p, uint32(n))
	var id [16]byte
	var pl [12]byte
	for i := 0; i < n; i++ {
		for j := range id {
			id[j] = byte(r.Uint32())
		}
		for j := range pl {
			pl[j] = byte(r.Uint32())
		}
		rec := fmt.Sprintf(`{"id":"%s","type":"meter.reading","ts":%d,"v":"%s"}`,
			hex.EncodeToString(id[:]), 1_760_000_000_000+r.Int64N(1e9), hex.EncodeToString(pl[:]))
		rec += strings.Repeat(" ", max(0, itemLen-len(rec)))
		p = append(p, rec[:itemLen]...)
	}
	return p
}

func ctrlVal(r *rand.Rand, n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = 'a' + byte(r.IntN(26))
	}
	return v
}

// ---------------------------------------------------------------- template stores

// Pre-populating 500,000 keys for every benchmark invocation (the testing
// package calls each benchmark function several times while ramping b.N)
// would dominate the run time, so each engine's store is built once per
// process in a template directory and copied into b.TempDir() before every
// invocation. The copy happens outside the timer.

var (
	tmplOnce sync.Once
	tmplRoot string
	tmplErr  error
)

func templates(b *testing.B) string {
	b.Helper()
	tmplOnce.Do(func() {
		tmplRoot, tmplErr = os.MkdirTemp("", "enginebench-tmpl-")
		if tmplErr != nil {
			return
		}
		for _, e := range engines {
			start := time.Now()
			if tmplErr = buildTemplate(e, filepath.Join(tmplRoot, e.name)); tmplErr != nil {
				return
			}
			fmt.Fprintf(os.Stderr, "enginebench: pre-populated %s template (%d ids, %d scan pages) in %v, %.1f MB on disk\n",
				e.name, prepopIDs, scanPages, time.Since(start).Round(time.Millisecond), float64(dirSize(filepath.Join(tmplRoot, e.name)))/1e6)
		}
	})
	if tmplErr != nil {
		b.Fatal(tmplErr)
	}
	return tmplRoot
}

func buildTemplate(e engine, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	s, err := e.open(dir)
	if err != nil {
		return err
	}
	if bs, ok := s.(*boltStore); ok {
		bs.db.NoSync = true // pre-population only; synced once at the end
	}
	r := rand.New(rand.NewChaCha8([32]byte{2}))
	write := func(ops []op) error {
		if ps, ok := s.(*pebbleStore); ok { // unsynced during pre-population
			b := ps.db.NewBatch()
			for _, o := range ops {
				b.Set(pkey(o.bucket, o.key), o.val, nil)
			}
			err := b.Commit(pebble.NoSync)
			b.Close()
			return err
		}
		return s.write(ops)
	}
	// Id index: random 16-byte keys in random order, in chunks.
	ops := make([]op, 0, prepopChunk)
	for i, k := range ids {
		ops = append(ops, op{bIDs, k, idVal(uint64(i/batchItems), i%batchItems)})
		if len(ops) == prepopChunk {
			if err := write(ops); err != nil {
				return err
			}
			ops = ops[:0]
		}
	}
	// Scan queue: 51,200 items as 51 pages of 1,000 + 1 page of 200.
	left := scanItems
	for seq := uint64(0); left > 0; seq++ {
		n := min(batchItems, left)
		left -= n
		if err := write([]op{{bPages, pageKey(scanQueue, seq), makePage(r, n)}}); err != nil {
			return err
		}
	}
	var ctrl []op
	for _, name := range ctrlNames {
		ctrl = append(ctrl, op{bCtrl, name, ctrlVal(r, ctrlLen)})
	}
	if err := write(ctrl); err != nil {
		return err
	}
	if err := e.finishPrepop(s); err != nil {
		return err
	}
	return s.close()
}

func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		t := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(t, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(t)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// writeBytes returns this process's write_bytes from /proc/self/io (bytes
// the process caused to be sent to the storage layer), or -1.
func writeBytes() int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// fixture opens a fresh copy of the engine's pre-populated store.
type fixture struct {
	b      *testing.B
	dir    string
	s      store
	wb0    int64
	alloc0 int64 // bbolt only: TxStats page-allocation bytes at start
}

// boltAlloc returns bbolt's cumulative bytes of pages allocated by
// committed write transactions (dirty pages written), or -1 for pebble.
func boltAlloc(s store) int64 {
	if bs, ok := s.(*boltStore); ok {
		st := bs.db.Stats()
		return st.TxStats.GetPageAlloc()
	}
	return -1
}

func newFixture(b *testing.B, e engine) *fixture {
	b.Helper()
	root := templates(b)
	dir := b.TempDir()
	if err := copyDir(filepath.Join(root, e.name), dir); err != nil {
		b.Fatal(err)
	}
	s, err := e.open(dir)
	if err != nil {
		b.Fatal(err)
	}
	f := &fixture{b: b, dir: dir, s: s}
	b.Cleanup(func() {
		if f.s != nil {
			f.s.close()
		}
	})
	return f
}

// start resets the timer and the disk-write counter.
func (f *fixture) start() {
	runtime.GC()
	f.wb0 = writeBytes()
	f.alloc0 = boltAlloc(f.s)
	f.b.ResetTimer()
}

// stop stops the timer and reports disk bytes written per op and the
// store's size on disk after closing it.
func (f *fixture) stop() {
	f.b.StopTimer()
	if wb := writeBytes(); wb >= 0 && f.wb0 >= 0 {
		f.b.ReportMetric(float64(wb-f.wb0)/float64(f.b.N)/1024, "diskKB/op")
	}
	if a := boltAlloc(f.s); a >= 0 {
		f.b.ReportMetric(float64(a-f.alloc0)/float64(f.b.N)/1024, "boltPageKB/op")
	}
	if err := f.s.close(); err != nil {
		f.b.Fatal(err)
	}
	f.s = nil
	f.b.ReportMetric(float64(dirSize(f.dir))/1e6, "dbMB")
}

func forEngines(b *testing.B, fn func(b *testing.B, e engine)) {
	for _, e := range engines {
		b.Run("engine="+e.name, func(b *testing.B) { fn(b, e) })
	}
}

// ---------------------------------------------------------------- benchmarks

// BenchmarkSaveBatch1000: one durable transaction = 1,000 new id-index
// keys + one ~120 KB page + 3 overwritten control records.
func BenchmarkSaveBatch1000(b *testing.B) {
	forEngines(b, func(b *testing.B, e engine) {
		f := newFixture(b, e)
		r := rand.New(rand.NewChaCha8([32]byte{3}))
		pages := make([][]byte, 8)
		for i := range pages {
			pages[i] = makePage(r, batchItems)
		}
		ctrl := make([][]byte, 16)
		for i := range ctrl {
			ctrl[i] = ctrlVal(r, ctrlLen)
		}
		ops := make([]op, 0, batchItems+4)
		f.start()
		for i := 0; i < b.N; i++ {
			seq := uint64(i)
			ops = ops[:0]
			for j := 0; j < batchItems; j++ {
				ops = append(ops, op{bIDs, randID(r), idVal(seq, j)})
			}
			ops = append(ops, op{bPages, pageKey(writeQueue, seq), pages[i%len(pages)]})
			for j, name := range ctrlNames {
				ops = append(ops, op{bCtrl, name, ctrl[(i+j)%len(ctrl)]})
			}
			if err := f.s.write(ops); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*batchItems)/b.Elapsed().Seconds(), "notif/s")
		f.stop()
	})
}

// BenchmarkSaveSingleConcurrent64: 64 goroutines each doing durable writes
// of 1 id key + one ~150 B page + 2 control records.
func BenchmarkSaveSingleConcurrent64(b *testing.B) {
	forEngines(b, func(b *testing.B, e engine) {
		f := newFixture(b, e)
		var seq atomic.Uint64
		var seed atomic.Uint64
		par := max(1, concurrentGors/runtime.GOMAXPROCS(0))
		b.SetParallelism(par) // par*GOMAXPROCS goroutines (64 with GOMAXPROCS=2)
		f.start()
		b.RunParallel(func(pb *testing.PB) {
			r := rand.New(rand.NewChaCha8([32]byte{4, byte(seed.Add(1))}))
			page := make([]byte, singlePageLen)
			copy(page, makePage(r, 1))
			c0, c1 := ctrlVal(r, ctrlLen), ctrlVal(r, ctrlLen)
			for pb.Next() {
				s := seq.Add(1)
				ops := []op{
					{bIDs, randID(r), idVal(s, 0)},
					{bPages, pageKey(writeQueue, s), page},
					{bCtrl, ctrlNames[0], c0},
					{bCtrl, ctrlNames[2], c1},
				}
				if err := f.s.writeConcurrent(ops); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
		f.stop()
	})
}

// BenchmarkLookupIDs1000: 1,000 point gets of existing random keys in the
// 500,000-key id index.
func BenchmarkLookupIDs1000(b *testing.B) {
	forEngines(b, func(b *testing.B, e engine) {
		f := newFixture(b, e)
		r := rand.New(rand.NewChaCha8([32]byte{5}))
		const sets = 64
		keys := make([][][]byte, sets)
		for i := range keys {
			keys[i] = make([][]byte, lookupsPerOp)
			for j := range keys[i] {
				keys[i][j] = ids[r.IntN(len(ids))]
			}
		}
		f.start()
		for i := 0; i < b.N; i++ {
			n, err := f.s.lookup(keys[i%sets])
			if err != nil {
				b.Fatal(err)
			}
			if n != lookupsPerOp {
				b.Fatalf("found %d of %d keys", n, lookupsPerOp)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lookupsPerOp), "ns/lookup")
		f.stop()
	})
}

// BenchmarkScanPages51200: read 51,200 items stored as 52 ~120 KB pages by
// range iteration, copying every value out.
func BenchmarkScanPages51200(b *testing.B) {
	forEngines(b, func(b *testing.B, e engine) {
		f := newFixture(b, e)
		f.start()
		for i := 0; i < b.N; i++ {
			items, pages := 0, 0
			out := make([][]byte, 0, scanPages)
			err := f.s.scan(scanQueue, func(v []byte) {
				items += int(binary.BigEndian.Uint32(v))
				pages++
				out = append(out, v)
			})
			if err != nil {
				b.Fatal(err)
			}
			if items != scanItems || pages != scanPages {
				b.Fatalf("scanned %d items in %d pages", items, pages)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/scan")
		f.stop()
	})
}

// BenchmarkSmallWrite: one durable write of 2 small records (dequeue /
// ack cursor update), sequential.
func BenchmarkSmallWrite(b *testing.B) {
	forEngines(b, func(b *testing.B, e engine) {
		f := newFixture(b, e)
		r := rand.New(rand.NewChaCha8([32]byte{6}))
		vals := make([][]byte, 16)
		for i := range vals {
			vals[i] = ctrlVal(r, 64)
		}
		f.start()
		for i := 0; i < b.N; i++ {
			ops := []op{
				{bCtrl, ctrlNames[0], vals[i%len(vals)]},
				{bCtrl, ctrlNames[2], vals[(i+1)%len(vals)]},
			}
			if err := f.s.write(ops); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/op")
		f.stop()
	})
}

// TestMain removes the template stores after the run.
func TestMain(m *testing.M) {
	code := m.Run()
	if tmplRoot != "" {
		os.RemoveAll(tmplRoot)
	}
	os.Exit(code)
}
