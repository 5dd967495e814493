package pebble

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// Writes that race land in the same write group; the group must still let
// exactly one of two conflicting writes through.
func TestConflictingWritesInOneGroupHaveOneWinner(t *testing.T) {
	s, r := withOneSaved(t)
	ctx := context.Background()
	cursor := catalog.Cursor{Origin: domain.OriginCharges, ContentType: "x"}
	newBundle := func() bundle.Record {
		return bundle.Record{ID: uuid.NewString(), Origin: domain.OriginCharges, ContentType: "x",
			Group: domain.GroupMasterData, Start: 0, End: 1, Count: 1, Weight: 1, State: bundle.Pending, CreatedAt: time.Now()}
	}
	const racers = 32
	errs := race(racers, func(int) error { return s.CreateBundle(ctx, r, newBundle(), cursor) })
	if wins := winners(t, errs); wins != 1 {
		t.Fatalf("%d bundles created in one group", wins)
	}
	st, err := s.LoadRecipient(ctx, r)
	if err != nil || len(st.Pending) != 1 {
		t.Fatalf("pending after the race: %+v %v", st.Pending, err)
	}
	pending := st.Pending[0]
	done := pending
	done.State, done.DequeuedAt = bundle.Dequeued, time.Now()
	acked := cursor
	acked.Acked = 1
	errs = race(racers, func(int) error { return s.Acknowledge(ctx, r, done, acked) })
	if wins := winners(t, errs); wins != 1 {
		t.Fatalf("bundle dequeued %d times", wins)
	}
	// The dequeued id cannot be pending again, even from the same group.
	again := newBundle()
	again.ID = pending.ID
	st, _ = s.LoadRecipient(ctx, r)
	cur := st.Cursors[0]
	errs = race(2, func(i int) error {
		if i == 0 {
			return s.CreateBundle(ctx, r, again, cur)
		}
		return s.CreateBundle(ctx, r, newBundle(), cur)
	})
	if !errors.Is(errs[0], store.ErrConflict) {
		t.Fatalf("a dequeued bundle id was reused: %v", errs[0])
	}
}

func race(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

func winners(t *testing.T, errs []error) int {
	t.Helper()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("unexpected error: %v", err)
		}
	}
	return wins
}

// A group's changes reach pebble in key order (writeBatch), yet a key changed
// more than once in a group ends as its last change left it.
func TestAKeyChangedTwiceInOneGroupKeepsItsLastChange(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	kept, deleted := []byte("z-kept"), []byte("z-deleted")
	err := s.write(context.Background(), func(tx *txn) error {
		// Enough changes that the sort is not a plain insertion sort.
		for i := range 100 {
			tx.apply([]put{{key: kept, value: fmt.Appendf(nil, "change %d", i)}, {key: deleted, value: []byte("x")}})
			tx.apply([]put{{key: kept, del: true}, {key: fmt.Appendf(nil, "a-before-both %d", i), value: []byte("y")}})
		}
		tx.apply([]put{{key: kept, value: []byte("last")}, {key: deleted, del: true}})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok, err := s.get(kept); err != nil || !ok || string(v) != "last" {
		t.Fatalf("kept key: %q %v %v, want \"last\"", v, ok, err)
	}
	if v, ok, err := s.get(deleted); err != nil || ok {
		t.Fatalf("deleted key still there: %q %v", v, err)
	}
}

// inKeyOrder must order puts exactly as a stable sort by key does, also
// where keys are shorter than its eight-byte prefix, share it, or repeat.
func TestChangesGoInKeyOrderKeepingTheOrderOfAKeysChanges(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte{0, 1, 'a', 'r', 0xff}
	for round := range 200 {
		puts := make([]put, r.IntN(300))
		for i := range puts {
			key := make([]byte, r.IntN(12))
			for j := range key {
				key[j] = alphabet[r.IntN(len(alphabet))]
			}
			puts[i] = put{key: key, value: fmt.Appendf(nil, "%d", i), del: r.IntN(4) == 0}
		}
		want := slices.Clone(puts)
		slices.SortStableFunc(want, func(a, b put) int { return bytes.Compare(a.key, b.key) })
		got := inKeyOrder(puts)
		if !slices.EqualFunc(got, want, func(a, b put) bool {
			return bytes.Equal(a.key, b.key) && bytes.Equal(a.value, b.value) && a.del == b.del
		}) {
			t.Fatalf("round %d: %d puts out of order", round, len(puts))
		}
	}
}

// BenchmarkWriteBatchOfAGroup: the writer puts a group's changes into its
// batch in key order. The group is four Saves of 1,000 over 100 recipients:
// a head, a catalog entry and a page for each recipient of each Save.
func BenchmarkWriteBatchOfAGroup(b *testing.B) {
	s, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	entry := catalog.Key{Origin: domain.OriginTimeSeries, ContentType: "rsm-014"}
	var puts []put
	for range 4 {
		for range 100 {
			r, d := uuid.New(), uuid.New()
			puts = append(puts,
				put{key: headKey(r), value: []byte("head")},
				put{key: cabinetKey(kindEntry, r, entry), value: []byte("entry")},
				put{key: pageKey(d, 0), value: []byte("page")})
		}
	}
	for b.Loop() {
		tx := &txn{s: s, batch: s.db.NewBatch(), puts: slices.Clone(puts)}
		tx.writeBatch()
		_ = tx.batch.Close()
	}
}

// A group copies only the maps its operations change, each once, and never
// changes the records readers see.
func TestAGroupCopiesOnlyTheMapsItChanges(t *testing.T) {
	k := catalog.Key{Origin: domain.Origin(1), ContentType: "TimeSeries"}
	published := &records{
		entries: map[catalog.Key]catalog.Entry{k: {Version: "1"}},
		cursors: map[catalog.Key]catalog.Cursor{k: {Version: "1"}},
		pending: map[string]bundle.Record{"b": {ID: "b"}},
	}
	s := openTemp(t)
	defer s.Close()
	tx := &txn{s: s, touched: map[[16]byte]*records{}}
	r := [16]byte{1}
	tx.change(r, published, entriesMap, func(rec *records) {
		rec.entries[k] = catalog.Entry{Version: "2"}
	})
	tx.change(r, tx.touched[r], entriesMap|pendingMap, func(rec *records) {
		rec.entries[k] = catalog.Entry{Version: "3"}
		delete(rec.pending, "b")
	})
	mine := tx.touched[r]
	if published.entries[k].Version != "1" || len(published.pending) != 1 {
		t.Fatalf("the published records changed: %+v", published)
	}
	if mine.entries[k].Version != "3" || len(mine.pending) != 0 {
		t.Fatalf("the group's records lack its changes: %+v", mine)
	}
	// The cursors were not changed, so not copied: the group shares them.
	mine.cursors[k] = catalog.Cursor{Version: "shared"}
	if published.cursors[k].Version != "shared" {
		t.Fatal("the cursors were copied though no operation changed them")
	}
	if mine.copied != entriesMap|pendingMap {
		t.Fatalf("copied %b, want entries and pending", mine.copied)
	}
}

// If pebble refuses a group, its writes fail, nothing of them is visible,
// and no later write is applied until the store is opened again.
func TestAGroupPebbleRefusesFailsEveryWriteAfterIt(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := context.Background()
	refused := errors.New("refused for the test")
	applyToPebble := applyBatch
	applyBatch = func(*pebble.DB, *pebble.Batch) error { return refused }
	defer func() { applyBatch = applyToPebble }()

	r := uuid.NewString()
	entry := catalog.Entry{Origin: domain.OriginCharges, ContentType: "x", Total: 1}
	save := []store.RecipientSave{{Recipient: r, Head: store.Head{NextSeq: 2, Watermark: 1}, Entries: []catalog.Entry{entry}}}
	if err := s.CommitSaves(ctx, save); !errors.Is(err, refused) {
		t.Fatalf("the save: %v, want the refusal", err)
	}
	applyBatch = applyToPebble
	if err := saveIDsFor(t, s, uuid.NewString(), []string{uuid.NewString()}); !errors.Is(err, refused) {
		t.Fatalf("a later write: %v, want the refusal", err)
	}
	st, err := s.LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if st.Head.Version != "" || len(st.Entries) != 0 {
		t.Fatalf("the refused save is visible: %+v", st)
	}
}

// A write group checked against an earlier group whose fsync then failed is
// answered with that failure, whatever its own checks said: an id found
// "already stored" in a group that never became durable is not stored, and
// a resend told so would be lost.
func TestAGroupCheckedAgainstAGroupWhoseSyncFailedFailsToo(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ids := []string{uuid.NewString()}
	first, firstErrs := queueWrites(s, func() error { return saveIDsFor(t, s, uuid.NewString(), ids) })
	finishFirst := s.applyGroup(first)
	resend, resendErrs := queueWrites(s, func() error { return saveIDsFor(t, s, uuid.NewString(), ids) })
	finishResend := s.applyGroup(resend)

	failed := finishWithFailedSync(finishFirst)
	if err := <-firstErrs[0]; !errors.Is(err, failed) {
		t.Fatalf("the save whose fsync failed: %v, want the failure", err)
	}
	finishResend()
	if err := <-resendErrs[0]; !errors.Is(err, failed) {
		t.Fatalf("a resend of its ids, checked against it: %v, want the failure", err)
	}
}

// finishWithFailedSync finishes a group applied by the test (applyGroup)
// with its fsync failing, and returns the failure.
func finishWithFailedSync(finish func()) error {
	failed := errors.New("fsync failed for the test")
	syncToDisk := syncBatch
	// Pebble is done with the batch once its own sync returns: the group's
	// batch is closed after this, so the failure comes after it.
	syncBatch = func(b *pebble.Batch) error { _ = b.SyncWait(); return failed }
	finish()
	syncBatch = syncToDisk
	return failed
}
