package pebble

import (
	"context"
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// dequeuedRecord is a dequeued bundle of the recipient's time series
// cabinet, reading from drawer d.
func dequeuedRecord(i int, at time.Time, d string) bundle.Record {
	return bundle.Record{ID: uuid.NewString(), Origin: domain.OriginTimeSeries, ContentType: "rsm-014", Group: domain.GroupTimeSeries,
		Start: int64(i * 10), End: int64(i*10 + 10), Count: 10, Weight: 10, DocumentTypes: []string{"rsm-014"},
		Drawers: []drawer.Meta{{ID: d, Start: int64(i * 10), Count: 10}},
		State:   bundle.Dequeued, CreatedAt: at, DequeuedAt: at}
}

// putDequeued writes the records of the recipient's dequeued bundles in one
// batch, as Acknowledge writes each.
func putDequeued(t testing.TB, s *Store, recipient string, recs []bundle.Record) {
	t.Helper()
	putRecords(t, s, recipient, recs, func(rec bundle.Record, r, id [16]byte) ([]put, error) { return retentionPuts(rec, r, id, false) })
}

// putRecords writes the records of the recipient's dequeued bundles, each
// with the keys index returns, in one batch.
func putRecords(t testing.TB, s *Store, recipient string, recs []bundle.Record, index func(rec bundle.Record, r, id [16]byte) ([]put, error)) {
	t.Helper()
	r := uuid.MustParse(recipient)
	batch := s.db.NewBatch()
	for _, rec := range recs {
		id := uuid.MustParse(rec.ID)
		v, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		puts, err := index(rec, r, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range append(puts, put{key: dequeuedKey(r, id), value: v}) {
			if err := batch.Set(p.key, p.value, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := batch.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// A visit of a recipient reads the bundles dequeued before the cutoff and
// those dequeued since the last pass, never those retained in between: its
// allocations are the same whether the recipient retains 100 bundles in
// between or 2,000 (a recipient dequeuing a bundle a second retains
// 600,000 over a week).
func TestAVisitDecodesOnlyTheDueAndNewBundles(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	dueBefore, since := now.Add(-7*24*time.Hour), now.Add(-time.Minute)
	visit := func(between int) float64 {
		s, err := Open(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		r := uuid.NewString()
		d := uuid.NewString()
		recs := []bundle.Record{dequeuedRecord(0, dueBefore.Add(-time.Hour), d)}
		for i := range between {
			recs = append(recs, dequeuedRecord(i+1, dueBefore.Add(time.Duration(i+1)*time.Minute), d))
		}
		recs = append(recs, dequeuedRecord(between+1, since.Add(time.Second), uuid.NewString()))
		putDequeued(t, s, r, recs)
		ctx := context.Background()
		st, err := s.LoadRetention(ctx, r, dueBefore, since)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Bundles) != 2 || st.Bundles[0].ID == st.Bundles[1].ID ||
			(st.Bundles[0].ID != recs[0].ID && st.Bundles[1].ID != recs[0].ID) ||
			(st.Bundles[0].ID != recs[len(recs)-1].ID && st.Bundles[1].ID != recs[len(recs)-1].ID) {
			t.Fatalf("%d bundles read, want the due one and the new one", len(st.Bundles))
		}
		if len(st.Kept) != 0 {
			t.Fatalf("kept %v: the due bundle's drawer is named by the bundles retained in between", st.Kept)
		}
		return testing.AllocsPerRun(5, func() {
			if _, err := s.LoadRetention(ctx, r, dueBefore, since); err != nil {
				t.Fatal(err)
			}
		})
	}
	few, many := visit(100), visit(2000)
	if many > few+few/2 {
		t.Fatalf("a visit allocates %.0f times with 2,000 bundles retained in between, %.0f with 100: it decodes what is retained", many, few)
	}
}

// A sweep that deletes a due bundle naming a drawer it keeps (within the
// clocks' margin) tells whether another retained bundle names that drawer
// without reading every retained record: its allocations are the same
// whether the recipient retains 100 other bundles or 2,000.
func TestASweepKeepingADrawerOfADeletedBundleReadsOnlyThatDrawersBundles(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	sweep := func(others int) uint64 {
		s, err := Open(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		r, d, named := uuid.NewString(), uuid.NewString(), uuid.NewString()
		due := dequeuedRecord(0, now.Add(-time.Hour), d)
		due.Drawers = append(due.Drawers, drawer.Meta{ID: named, Start: 10, Count: 10})
		recs := []bundle.Record{due, dequeuedRecord(1, now, named)}
		for i := range others {
			recs = append(recs, dequeuedRecord(i+2, now, uuid.NewString()))
		}
		putDequeued(t, s, r, recs)
		sw := store.Sweep{Recipient: r, Bundles: []bundle.Record{due}, Keep: []store.Kept{{Drawers: []string{d, named}}}}
		if unnamed, err := s.keptUnnamed(uuid.MustParse(r), sw); err != nil || len(unnamed) != 1 || unnamed[0] != d {
			t.Fatalf("unnamed %v (%v), want the drawer only the deleted bundle names, %s", unnamed, err, d)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err = s.ApplySweep(context.Background(), sw)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := s.BundleExists(context.Background(), r, due.ID); err != nil || ok {
			t.Fatalf("the due bundle is there still after the sweep (%v)", err)
		}
		return after.Mallocs - before.Mallocs
	}
	few, many := sweep(100), sweep(2000)
	if many > few+few/2 {
		t.Fatalf("a sweep allocates %d times with 2,000 other bundles retained, %d with 100: it decodes what is retained", many, few)
	}
}
