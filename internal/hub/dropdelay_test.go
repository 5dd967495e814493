package hub

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// testClock is a clock the test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// onPebble is a hub with opts over a pebble store, wrapped by wrap when it
// is not nil, and that store.
func onPebble(t *testing.T, opts Options, wrap func(store.Store) store.Store) (*Hub, store.Store) {
	inner, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var st store.Store = inner
	if wrap != nil {
		st = wrap(inner)
	}
	h := New(st, opts, nil)
	t.Cleanup(func() {
		h.Close()
		_ = inner.Close()
	})
	return h, inner
}

func dropDelayNotes(n int, recipient string) []domain.Notification {
	out := make([]domain.Notification, n)
	for i := range out {
		out[i] = domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges,
			ContentType: "c", DocumentType: "c", SupportsBundling: true, Weight: 1}
	}
	return out
}

// drainOne peeks the recipient's one bundle and dequeues it.
func drainOne(ctx context.Context, t *testing.T, h *Hub, recipient string) {
	t.Helper()
	b, err := h.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("peek: %v, %v", b, err)
	}
	if err := h.Dequeue(ctx, recipient, b.ID); err != nil {
		t.Fatal(err)
	}
}

// cabinetOf counts the recipient's catalog entries and cursors.
func cabinetOf(ctx context.Context, t *testing.T, s store.Store, recipient string) (entries, cursors int) {
	t.Helper()
	st, err := s.LoadRecipient(ctx, recipient)
	if err != nil {
		t.Fatal(err)
	}
	return len(st.Entries), len(st.Cursors)
}

// A drained cabinet whose last drawer is older than the retention would go
// at the first pass after its dequeue; it stays, entry and cursor, while
// its cursor moved within cabinetDropDelay by the sweeper's clock, and goes
// at the first pass after.
func TestADrainedCabinetGoesOnlyOnceItsCursorHasStoodStill(t *testing.T) {
	clock := &testClock{now: time.UnixMilli(1_700_000_000_000)}
	h, inner := onPebble(t, Options{Retention: 24 * time.Hour, SweepInterval: time.Hour, Now: clock.Now}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := uuid.NewString()
	if _, err := h.Save(ctx, dropDelayNotes(3, r)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(25 * time.Hour) // the cabinet's drawer is older than the retention
	drainOne(ctx, t, h, r)
	dequeuedAt := clock.Now()
	cabinet := func() (entries, cursors int) { return cabinetOf(ctx, t, inner, r) }
	for _, step := range []time.Duration{0, cabinetDropDelay} {
		clock.Advance(step)
		if err := h.SweepNow(ctx); err != nil {
			t.Fatal(err)
		}
		if e, c := cabinet(); e != 1 || c != 1 {
			t.Fatalf("%v after the dequeue the sweep left %d entries and %d cursors, want the cabinet kept whole", clock.Now().Sub(dequeuedAt), e, c)
		}
	}
	clock.Advance(time.Millisecond)
	if err := h.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	if e, c := cabinet(); e != 0 || c != 0 {
		t.Fatalf("past the drop delay the sweep left %d entries and %d cursors, want the drained cabinet gone", e, c)
	}
}

// Both planners keep a drained cabinet whose cursor moved within the delay
// as one not drained (its last drawer in the entry, the others leaving),
// and take it out whole once the cursor has stood still.
func TestBothPlannersKeepADrainedCabinetWhoseCursorMovedLately(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	cutoff := now.Add(-24 * time.Hour)
	key := catalog.Key{Origin: domain.OriginCharges, ContentType: "c"}
	old := cutoff.Add(-time.Hour).UnixMilli()
	d1 := drawer.Meta{ID: "d1", Start: 0, Count: 10, FirstAt: old, LastAt: old}
	d2 := drawer.Meta{ID: "d2", Start: 10, Count: 10, FirstAt: old, LastAt: old}
	moved := now.Add(-time.Minute)
	st := store.RetentionState{
		Entries: []catalog.Entry{{Origin: key.Origin, ContentType: key.ContentType, Drawers: []drawer.Meta{d1, d2}, Total: 20, Version: "e"}},
		Cursors: []catalog.Cursor{{Origin: key.Origin, ContentType: key.ContentType, Acked: 20, MovedAt: moved.UnixMilli(), Version: "c"}},
		Bundles: []bundle.Record{{ID: "b", Origin: key.Origin, ContentType: key.ContentType, Start: 0, End: 20,
			State: bundle.Dequeued, DequeuedAt: cutoff.Add(-time.Minute), Drawers: []drawer.Meta{d1, d2}}},
	}
	due, _ := sweepOfDue("r", st, cutoff, true, now.Add(-cabinetDropDelay))
	for name, sw := range map[string]sweepPlan{"due": due, "all": sweepOfAll("r", st, cutoff, true, now.Add(-cabinetDropDelay))} {
		if len(sw.DeleteEntries) != 0 || len(sw.DeleteCursors) != 0 || len(sw.Entries) != 1 ||
			len(sw.Entries[0].Drawers) != 1 || sw.Entries[0].Drawers[0].ID != "d2" {
			t.Fatalf("%s: sweep %+v; want the cabinet kept with its last drawer", name, sw)
		}
	}
	later := moved.Add(cabinetDropDelay + time.Millisecond)
	due, _ = sweepOfDue("r", st, cutoff, true, later.Add(-cabinetDropDelay))
	for name, sw := range map[string]sweepPlan{"due": due, "all": sweepOfAll("r", st, cutoff, true, later.Add(-cabinetDropDelay))} {
		if len(sw.DeleteEntries) != 1 || len(sw.DeleteCursors) != 1 {
			t.Fatalf("%s: sweep %+v; want the cabinet gone, its cursor with it", name, sw)
		}
	}
}

// loadAgingStore moves the clock by age during the first load it answers.
type loadAgingStore struct {
	store.Store
	clock   *testClock
	age     time.Duration
	mu      sync.Mutex
	loads   int
	creates int
}

func (s *loadAgingStore) LoadRecipient(ctx context.Context, recipient string, opts ...store.LoadOption) (store.RecipientState, error) {
	st, err := s.Store.LoadRecipient(ctx, recipient, opts...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loads++; s.loads == 1 {
		s.clock.Advance(s.age)
	}
	return st, err
}

func (s *loadAgingStore) CreateBundle(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	s.mu.Lock()
	s.creates++
	s.mu.Unlock()
	return s.Store.CreateBundle(ctx, recipient, rec, cursor)
}

// A bundle cut from a load that began bundleWriteBound or more ago is not
// written: the Peek reads again and writes the bundle it cuts from that.
func TestABundleCutFromALoadPastTheWriteBoundIsCutAgain(t *testing.T) {
	clock := &testClock{now: time.UnixMilli(1_700_000_000_000)}
	st := &loadAgingStore{clock: clock, age: bundleWriteBound}
	h, _ := onPebble(t, Options{SweepInterval: time.Hour, Now: clock.Now}, func(inner store.Store) store.Store { st.Store = inner; return st })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := uuid.NewString()
	if _, err := h.Save(ctx, dropDelayNotes(2, r)); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	st.loads = 0
	st.mu.Unlock()
	b, err := h.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || b == nil || len(b.NotificationIDs) != 2 {
		t.Fatalf("peek: %+v, %v", b, err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.loads != 2 || st.creates != 1 {
		t.Fatalf("the peek loaded %d times and created %d bundles; want the late cut dropped and one from a second load", st.loads, st.creates)
	}
}

// visitCounting counts the visits of retention (LoadRetention).
type visitCounting struct {
	store.Store
	visits atomic.Int32
}

func (s *visitCounting) LoadRetention(ctx context.Context, recipient string, dueBefore, since time.Time) (store.RetentionState, error) {
	s.visits.Add(1)
	return s.Store.LoadRetention(ctx, recipient, dueBefore, since)
}

// A pass that keeps a drained cabinet because its cursor moved lately
// comes back for it: nothing else brings a pass to the recipient until a
// bundle of it is due, up to a whole retention later, and the cabinet's
// entry, cursor and last drawer would wait that long. The first pass
// after the cursor has stood still for cabinetDropDelay visits the
// recipient again and takes the cabinet out; the passes before it do not
// visit it.
func TestAPassComesBackForADrainedCabinetItKeptForItsCursor(t *testing.T) {
	clock := &testClock{now: time.UnixMilli(1_700_000_000_000)}
	var counting *visitCounting
	h, inner := onPebble(t, Options{Retention: 24 * time.Hour, SweepInterval: time.Hour, Now: clock.Now}, func(s store.Store) store.Store {
		counting = &visitCounting{Store: s}
		return counting
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := uuid.NewString()
	if _, err := h.Save(ctx, dropDelayNotes(3, r)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(25 * time.Hour)          // the cabinet's drawer is older than the retention
	since := clock.Now().Add(-time.Minute) // the previous pass's start
	drainOne(ctx, t, h, r)
	cabinet := func() (entries, cursors int) { return cabinetOf(ctx, t, inner, r) }
	// Each pass looks back to the previous one's start.
	pass := func() {
		t.Helper()
		start := clock.Now()
		if err := h.SweepSince(ctx, since); err != nil {
			t.Fatal(err)
		}
		since = start
	}
	clock.Advance(time.Second)
	pass() // visits the recipient, which dequeued since: the cursor moved a second ago
	if e, c := cabinet(); e != 1 || c != 1 || counting.visits.Load() != 1 {
		t.Fatalf("the pass after the dequeue left %d entries and %d cursors after %d visits, want the cabinet kept after one", e, c, counting.visits.Load())
	}
	clock.Advance(cabinetDropDelay - time.Second)
	pass() // the cursor moved exactly cabinetDropDelay ago: not yet
	if e, c := cabinet(); e != 1 || c != 1 || counting.visits.Load() != 1 {
		t.Fatalf("a pass within the drop delay left %d entries and %d cursors after %d visits, want the cabinet kept and no visit", e, c, counting.visits.Load())
	}
	clock.Advance(time.Millisecond)
	pass()
	if e, c := cabinet(); e != 0 || c != 0 || counting.visits.Load() != 2 {
		t.Fatalf("the first pass past the drop delay left %d entries and %d cursors after %d visits, want the cabinet gone after one more visit", e, c, counting.visits.Load())
	}
	clock.Advance(time.Hour)
	pass()
	if n := counting.visits.Load(); n != 2 {
		t.Fatalf("%d visits after the cabinet went, want none more", n)
	}
}
