package hub

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// sweptStore answers only what a sweep with nothing to remove asks, and
// shares one sweep lease between the repositories built on it.
type sweptStore struct {
	store.Store // nil: anything else the sweeper called would panic

	recipients []string
	lease      *fakeLease
	mu         sync.Mutex
	loads      []sweepLoad
}

type sweepLoad struct {
	at  time.Time
	low bool // asked at low priority
}

type fakeLease struct {
	mu      sync.Mutex
	holder  string
	expires time.Time
}

type sweepLowKey struct{}

func (s *sweptStore) DueRecipients(_ context.Context, _, _ time.Time, fn func(string) error) error {
	for _, r := range s.recipients {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

func (s *sweptStore) LoadRetention(ctx context.Context, _ string, _, _ time.Time) (store.RetentionState, error) {
	s.mu.Lock()
	s.loads = append(s.loads, sweepLoad{at: time.Now(), low: ctx.Value(sweepLowKey{}) != nil})
	s.mu.Unlock()
	return store.RetentionState{}, nil
}

func (s *sweptStore) DequeuedBundles(context.Context, string) ([]bundle.Record, error) {
	return nil, nil
}

func (s *sweptStore) Close() error { return nil }

// PruneAudit keeps no audit log: the sweep's recipients are what is watched.
func (s *sweptStore) PruneAudit(context.Context, time.Time) error { return nil }

// A sweptStore alone is a store of one instance.
func (s *sweptStore) HoldSweepLease(ctx context.Context, holder string, d time.Duration) (bool, error) {
	return store.Solo{}.HoldSweepLease(ctx, holder, d)
}

func (s *sweptStore) ReleaseSweepLease(ctx context.Context, holder string) error {
	return store.Solo{}.ReleaseSweepLease(ctx, holder)
}

func (s *sweptStore) LowPriority(ctx context.Context) context.Context {
	return store.Solo{}.LowPriority(ctx)
}

func (s *sweptStore) RingBell(ctx context.Context, recipients []string) error {
	return store.Solo{}.RingBell(ctx, recipients)
}

func (s *sweptStore) ReadBells(ctx context.Context, cursor string) ([]string, string, error) {
	return store.Solo{}.ReadBells(ctx, cursor)
}

func (s *sweptStore) swept() []sweepLoad {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sweepLoad(nil), s.loads...)
}

// leasedStore is a sweptStore that several instances share.
type leasedStore struct{ *sweptStore }

func (s leasedStore) HoldSweepLease(_ context.Context, holder string, d time.Duration) (bool, error) {
	l := s.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holder != holder && time.Now().Before(l.expires) {
		return false, nil
	}
	l.holder, l.expires = holder, time.Now().Add(d)
	return true, nil
}

func (s leasedStore) ReleaseSweepLease(_ context.Context, holder string) error {
	l := s.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holder == holder {
		l.holder, l.expires = "", time.Time{}
	}
	return nil
}

func (s leasedStore) LowPriority(ctx context.Context) context.Context {
	return context.WithValue(ctx, sweepLowKey{}, true)
}

// On a shared store one instance sweeps at a time, at low priority. The
// instances run in a synctest bubble: their turns come on its fake clock, so
// a machine too busy to run a sweeper on time cannot let the lease run out
// (two sweeping) or leave the turns unrun (none).
func TestOneInstanceSweepsAtATimeAtLowPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lease := &fakeLease{}
		const interval = 400 * time.Millisecond
		stores := []*sweptStore{
			{recipients: []string{"a", "b", "c", "d", "e"}, lease: lease},
			{recipients: []string{"a", "b", "c", "d", "e"}, lease: lease},
		}
		for _, s := range stores {
			repo := New(leasedStore{s}, Options{SweepInterval: interval}, nil)
			t.Cleanup(repo.Close)
		}
		time.Sleep(3 * interval)
		synctest.Wait()
		var sweeping int
		for i, s := range stores {
			loads := s.swept()
			if len(loads) == 0 {
				continue
			}
			sweeping++
			for _, l := range loads {
				if !l.low {
					t.Fatalf("instance %d swept at normal priority", i)
				}
			}
		}
		if sweeping != 1 {
			t.Fatalf("%d instances swept, want one", sweeping)
		}
	})
}

// A store that is not shared sweeps on every instance's turn without a
// lease (in a synctest bubble, so that the turn comes whatever the machine's
// speed).
func TestAStoreOfOneInstanceSweepsWithoutALease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sweptStore{recipients: []string{"a"}}
		repo := New(s, Options{SweepInterval: 50 * time.Millisecond}, nil)
		t.Cleanup(repo.Close)
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		if len(s.swept()) == 0 {
			t.Fatal("no sweep")
		}
	})
}

// An instance that shuts down gives the lease up: another may take it at
// once instead of waiting for it to run out. In a synctest bubble no time
// passes between the close and the other's ask, so only the hand-over lets
// it take the lease.
func TestAClosingInstanceHandsTheSweepLeaseOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lease := &fakeLease{}
		const interval = 100 * time.Millisecond
		first := &sweptStore{recipients: []string{"a"}, lease: lease}
		repo := New(leasedStore{first}, Options{SweepInterval: interval}, nil)
		time.Sleep(2 * interval)
		synctest.Wait()
		if len(first.swept()) == 0 {
			t.Fatal("the first instance never swept")
		}
		repo.Close()
		held, err := leasedStore{first}.HoldSweepLease(context.Background(), "another", interval)
		if err != nil || !held {
			t.Fatalf("after the holder closed, another instance could not take the lease: %v %v", held, err)
		}
	})
}

// dueCall is one DueRecipients call of a pass.
type dueCall struct{ dueBefore, since time.Time }

// dueStore answers DueRecipients with nothing, or fails the calls listed,
// and reports every call.
type dueStore struct {
	*sweptStore
	calls chan dueCall
	fail  map[int]bool
	n     int
	now   time.Time // an hour later after every call
}

func (s *dueStore) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func (s *dueStore) DueRecipients(_ context.Context, dueBefore, since time.Time, _ func(string) error) error {
	s.mu.Lock()
	n := s.n
	s.n++
	s.now = s.now.Add(time.Hour)
	s.mu.Unlock()
	select {
	case s.calls <- dueCall{dueBefore, since}: // the first calls always fit
	default: // the test has read what it needs: never block the sweeper
	}
	if s.fail[n] {
		return errors.New("store down")
	}
	return nil
}

// A pass asks for the recipients due and for those that dequeued since the
// start of the last pass that succeeded (less a margin for clocks); the
// first looks back two intervals.
func TestAPassVisitsWhatDequeuedSinceTheLastPass(t *testing.T) {
	at := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	const interval, retention = 20 * time.Millisecond, 24 * time.Hour
	s := &dueStore{sweptStore: &sweptStore{}, calls: make(chan dueCall, 10), fail: map[int]bool{1: true}, now: at}
	repo := New(s, Options{SweepInterval: interval, Retention: retention, Now: s.Now}, nil)
	t.Cleanup(repo.Close)
	first, second, third := <-s.calls, <-s.calls, <-s.calls
	if !first.dueBefore.Equal(at.Add(-retention)) || !first.since.Equal(at.Add(-2*interval-sweepSkew)) {
		t.Fatalf("first pass asked %+v; want due before %v, since %v", first, at.Add(-retention), at.Add(-2*interval-sweepSkew))
	}
	if !second.since.Equal(at.Add(-sweepSkew)) {
		t.Fatalf("second pass asked since %v, want the first's start less the margin, %v", second.since, at.Add(-sweepSkew))
	}
	if !third.since.Equal(second.since) || !third.dueBefore.Equal(at.Add(2*time.Hour-retention)) {
		t.Fatalf("after a failed pass the next asked %+v, want since %v again", third, second.since)
	}
}

// sweepOfDue decides from the due and new bundles alone whenever every
// drawer it frees is settled by them, and says so when it is not.
func TestASweepOfTheDueBundlesFreesOnlyWhatTheySettle(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	cutoff := now.Add(-24 * time.Hour)
	key := catalog.Key{Origin: domain.OriginTimeSeries, ContentType: "t"}
	savedAt := cutoff.Add(-48 * time.Hour).UnixMilli()
	d1 := drawer.Meta{ID: "d1", Start: 0, Count: 10, LastAt: savedAt}
	d2 := drawer.Meta{ID: "d2", Start: 10, Count: 10, LastAt: savedAt}
	entry := catalog.Entry{Origin: key.Origin, ContentType: key.ContentType, Drawers: []drawer.Meta{d1, d2}, Total: 20, Version: "e"}
	cursor := catalog.Cursor{Origin: key.Origin, ContentType: key.ContentType, Acked: 20, Version: "c"}
	dequeued := func(id string, start, end int64, at time.Time, drawers ...drawer.Meta) bundle.Record {
		return bundle.Record{ID: id, Origin: key.Origin, ContentType: key.ContentType, Start: start, End: end,
			State: bundle.Dequeued, DequeuedAt: at, Drawers: drawers}
	}
	state := func(bundles ...bundle.Record) store.RetentionState {
		return store.RetentionState{Entries: []catalog.Entry{entry}, Cursors: []catalog.Cursor{cursor}, Bundles: bundles}
	}
	due, fresh := cutoff.Add(-time.Hour), now.Add(-time.Minute)

	t.Run("the bundles covering both ends are due: both drawers and the entry go", func(t *testing.T) {
		sw, settled := sweepOfDue("r", state(dequeued("b1", 0, 10, due, d1), dequeued("b2", 10, 20, due, d2)), cutoff, true, now.Add(-cabinetDropDelay))
		if !settled || len(sw.Drawers) != 2 || len(sw.DeleteEntries) != 1 || len(sw.DeleteCursors) != 1 || len(sw.Bundles) != 2 || len(sw.Keep) != 0 {
			t.Fatalf("sweep %+v, settled %v", sw, settled)
		}
		if sw.DrawerEnds["d2"] != 20 {
			t.Fatalf("ends %v: the pages below the positions the entry handed out go, no others", sw.DrawerEnds)
		}
	})
	t.Run("the last bundle is new: the drained cabinet stays with its last drawer, to be appended to", func(t *testing.T) {
		young := drawer.Meta{ID: "d2", Start: 10, Count: 10, FirstAt: now.Add(-2 * time.Hour).UnixMilli(), LastAt: now.Add(-2 * time.Hour).UnixMilli()}
		st := state(dequeued("b1", 0, 10, due, d1), dequeued("b2", 10, 20, fresh, young))
		st.Entries = []catalog.Entry{{Origin: key.Origin, ContentType: key.ContentType, Drawers: []drawer.Meta{d1, young}, Total: 20, Version: "e"}}
		sw, settled := sweepOfDue("r", st, cutoff, true, now.Add(-cabinetDropDelay))
		if !settled || !slices.Equal(sw.Drawers, []string{"d1"}) || len(sw.DeleteEntries) != 0 || len(sw.DeleteCursors) != 0 ||
			len(sw.Keep) != 0 || len(sw.Entries) != 1 || !slices.Equal(sw.Entries[0].Drawers, []drawer.Meta{young}) {
			t.Fatalf("sweep %+v, settled %v", sw, settled)
		}
		// A cabinet bounded to one drawer starts afresh instead.
		if sw, _ := sweepOfDue("r", st, cutoff, false, now.Add(-cabinetDropDelay)); len(sw.DeleteEntries) != 1 || len(sw.Keep) != 1 {
			t.Fatalf("sweep %+v of a cabinet bounded to one drawer, want it gone and its drawer kept", sw)
		}
	})
	t.Run("the last bundle is new but its drawer was opened before the retention: the cabinet goes, the drawer kept until it is due", func(t *testing.T) {
		sw, settled := sweepOfDue("r", state(dequeued("b1", 0, 10, due, d1), dequeued("b2", 10, 20, fresh, d2)), cutoff, true, now.Add(-cabinetDropDelay))
		if !settled || !slices.Equal(sw.Drawers, []string{"d1"}) || len(sw.DeleteEntries) != 1 || len(sw.Keep) != 1 {
			t.Fatalf("sweep %+v, settled %v", sw, settled)
		}
		if k := sw.Keep[0]; !slices.Equal(k.Drawers, []string{"d2"}) || k.Cabinet != key || !k.Until.Equal(fresh.Add(sweepSkew)) {
			t.Fatalf("kept %+v; want d2 until the last bundle's dequeue and the clocks' margin", k)
		}
	})
	t.Run("a drawer before the last whose bundle is new leaves the entry, kept until it is due", func(t *testing.T) {
		st := state(dequeued("b1", 0, 10, fresh, d1))
		st.Cursors = []catalog.Cursor{{Origin: key.Origin, ContentType: key.ContentType, Acked: 10, Version: "c"}}
		sw, settled := sweepOfDue("r", st, cutoff, true, now.Add(-cabinetDropDelay))
		if !settled || len(sw.Drawers) != 0 || len(sw.DeleteEntries) != 0 || len(sw.Keep) != 1 ||
			len(sw.Entries) != 1 || !slices.Equal(sw.Entries[0].Drawers, []drawer.Meta{d2}) {
			t.Fatalf("sweep %+v, settled %v", sw, settled)
		}
		if k := sw.Keep[0]; !slices.Equal(k.Drawers, []string{"d1"}) || k.Cabinet != key || !k.Until.Equal(fresh.Add(sweepSkew)) {
			t.Fatalf("kept %+v; want d1 until the last bundle's dequeue and the clocks' margin", k)
		}
	})
	t.Run("the bundle covering a drawer's end was not read: every bundle is needed", func(t *testing.T) {
		if sw, settled := sweepOfDue("r", state(dequeued("b1", 0, 10, due, d1)), cutoff, true, now.Add(-cabinetDropDelay)); settled {
			t.Fatalf("settled %+v without the bundle covering d2's end", sw)
		}
	})
	t.Run("a new bundle read back through the entry keeps its drawers in it", func(t *testing.T) {
		sw, settled := sweepOfDue("r", state(dequeued("b1", 0, 10, due, d1), dequeued("b2", 10, 20, fresh)), cutoff, true, now.Add(-cabinetDropDelay))
		if !settled || !slices.Equal(sw.Drawers, []string{"d1"}) || len(sw.Entries) != 1 || len(sw.Keep) != 0 ||
			!slices.Equal(sw.Entries[0].Drawers, []drawer.Meta{d2}) {
			t.Fatalf("sweep %+v, settled %v", sw, settled)
		}
	})
	t.Run("a bundle of the same positions before the cabinet restarted settles nothing", func(t *testing.T) {
		before := time.UnixMilli(savedAt).Add(-time.Hour)
		if sw, settled := sweepOfDue("r", state(dequeued("b1", 0, 10, due, d1), dequeued("old", 10, 20, before)), cutoff, true, now.Add(-cabinetDropDelay)); settled {
			t.Fatalf("settled %+v on a bundle dequeued before the drawer's items were saved", sw)
		}
	})
	t.Run("kept drawers that are due go, with their record", func(t *testing.T) {
		st := state(dequeued("b1", 0, 10, due, d1), dequeued("b2", 10, 20, due, d2))
		st.Kept = []store.Kept{{ID: "k:1", Drawers: []string{"d0"}}}
		sw, settled := sweepOfDue("r", st, cutoff, true, now.Add(-cabinetDropDelay))
		if !settled || !slices.Contains(sw.Drawers, "d0") || !slices.Equal(sw.Done, []string{"k:1"}) {
			t.Fatalf("sweep %+v, settled %v", sw, settled)
		}
		if _, bounded := sw.DrawerEnds["d0"]; bounded {
			t.Fatal("a kept drawer is out of the catalog: all its pages go")
		}
	})
}

// sweepOfAll keeps a drained cabinet as sweepOfDue does: its last drawer,
// opened within the retention and read by a retained bundle, stays in the
// entry to be appended to.
func TestASweepOfEveryBundleKeepsADrainedCabinetForAppending(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	cutoff := now.Add(-24 * time.Hour)
	key := catalog.Key{Origin: domain.OriginTimeSeries, ContentType: "t"}
	opened := func(at time.Time) store.RetentionState {
		d := drawer.Meta{ID: "d", Start: 0, Count: 10, FirstAt: at.UnixMilli(), LastAt: at.UnixMilli()}
		return store.RetentionState{
			Entries: []catalog.Entry{{Origin: key.Origin, ContentType: key.ContentType, Drawers: []drawer.Meta{d}, Total: 10, Version: "e"}},
			Cursors: []catalog.Cursor{{Origin: key.Origin, ContentType: key.ContentType, Acked: 10, Version: "c"}},
			Bundles: []bundle.Record{{ID: "b", Origin: key.Origin, ContentType: key.ContentType, Start: 0, End: 10,
				State: bundle.Dequeued, DequeuedAt: now.Add(-time.Minute), Drawers: []drawer.Meta{d}}},
		}
	}
	if sw := sweepOfAll("r", opened(now.Add(-time.Hour)), cutoff, true, now.Add(-cabinetDropDelay)); len(sw.DeleteEntries)+len(sw.Entries)+len(sw.Keep)+len(sw.Drawers) != 0 {
		t.Fatalf("sweep %+v; want the drained cabinet kept as it is", sw)
	}
	for name, sw := range map[string]sweepPlan{
		"bounded to one drawer":              sweepOfAll("r", opened(now.Add(-time.Hour)), cutoff, false, now.Add(-cabinetDropDelay)),
		"drawer opened before the retention": sweepOfAll("r", opened(cutoff.Add(-time.Hour)), cutoff, true, now.Add(-cabinetDropDelay)),
	} {
		if len(sw.DeleteEntries) != 1 || len(sw.Keep) != 1 || !slices.Equal(sw.Keep[0].Drawers, []string{"d"}) {
			t.Fatalf("%s: sweep %+v; want the cabinet gone and its drawer kept", name, sw)
		}
	}
}

// failingSweepStore fails the retention load of one recipient.
type failingSweepStore struct {
	*sweptStore
	bad string
}

func (s *failingSweepStore) LoadRetention(ctx context.Context, recipient string, due, since time.Time) (store.RetentionState, error) {
	if recipient == s.bad {
		return store.RetentionState{}, errors.New("partition full")
	}
	return s.sweptStore.LoadRetention(ctx, recipient, due, since)
}

// A recipient whose sweep keeps failing does not hold up the others': the
// pass visits every one and then reports the failure, naming it.
func TestARecipientWhoseSweepFailsDoesNotStopThePass(t *testing.T) {
	recipients := []string{"a", "b", "bad", "c", "d", "e", "f", "g", "h", "i", "j"}
	s := &failingSweepStore{sweptStore: &sweptStore{recipients: recipients}, bad: "bad"}
	repo := New(s, Options{SweepInterval: time.Hour, Retention: time.Hour}, nil)
	t.Cleanup(repo.Close)
	err := repo.SweepSince(context.Background(), time.Now().Add(-time.Hour))
	if err == nil || !strings.Contains(err.Error(), "bad") || !strings.Contains(err.Error(), "partition full") {
		t.Fatalf("pass error %v; want the failing recipient named with its error", err)
	}
	if got := len(s.swept()); got != len(recipients)-1 {
		t.Fatalf("%d recipients swept, want every one but the failing one (%d)", got, len(recipients)-1)
	}
}

// stuckStore is a dueStore with a recipient that dequeued at dequeued,
// which it names from its second pass on to the passes that look back as
// far, and whose visits fail for ever (a partition full, a record it
// cannot read). It reports the since of every visit of that recipient.
type stuckStore struct {
	*dueStore
	bad      string
	dequeued time.Time
	visits   chan time.Time
}

func (s *stuckStore) DueRecipients(ctx context.Context, due, since time.Time, fn func(string) error) error {
	s.mu.Lock()
	n := s.n
	s.mu.Unlock()
	if err := s.dueStore.DueRecipients(ctx, due, since, fn); err != nil {
		return err
	}
	if n >= 1 && !since.After(s.dequeued) {
		return fn(s.bad)
	}
	return nil
}

func (s *stuckStore) LoadRetention(ctx context.Context, recipient string, due, since time.Time) (store.RetentionState, error) {
	if recipient == s.bad {
		select {
		case s.visits <- since:
		default: // the test has read what it needs: never block the sweeper
		}
		return store.RetentionState{}, errors.New("partition full")
	}
	return s.dueStore.LoadRetention(ctx, recipient, due, since)
}

// A recipient whose sweep keeps failing is visited again by every pass,
// looking back as far as its first failed visit, while the passes
// themselves go on from the last one's start: the others' visits and the
// query of who dequeued since do not look ever further back (each pass
// would read every bundle dequeued since the failure, at last every one
// retained).
func TestARecipientWhoseSweepKeepsFailingDoesNotHoldTheNextPassesBack(t *testing.T) {
	at := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	const interval, retention = 20 * time.Millisecond, 24 * time.Hour
	s := &stuckStore{
		dueStore: &dueStore{sweptStore: &sweptStore{}, calls: make(chan dueCall, 10), now: at},
		bad:      "bad", dequeued: at.Add(30 * time.Minute), visits: make(chan time.Time, 10),
	}
	repo := New(s, Options{SweepInterval: interval, Retention: retention, Now: s.Now}, nil)
	t.Cleanup(repo.Close)
	var passes []time.Time
	for range 4 {
		passes = append(passes, (<-s.calls).since)
	}
	// Pass i starts at at+i hours; pass 1 (the second) is the first to
	// meet the failing recipient.
	for i := 2; i < 4; i++ {
		if want := at.Add(time.Duration(i-1) * time.Hour).Add(-sweepSkew); !passes[i].Equal(want) {
			t.Fatalf("pass %d asked for the recipients dequeued since %v; want the previous pass's start less the margin, %v (all: %v)", i, passes[i], want, passes)
		}
	}
	for i := range 3 {
		if v := <-s.visits; !v.Equal(passes[1]) {
			t.Fatalf("visit %d of the failing recipient looked back to %v; want its first visit's since, %v", i, v, passes[1])
		}
	}
}

// stolenLeaseStore is a leasedStore whose first pass finds the lease taken
// over by another instance once it began, and each of whose visits in that
// pass lasts longer than half the interval, so that the pass asks for the
// lease again before it ends. It reports every DueRecipients call's since.
type stolenLeaseStore struct {
	leasedStore
	interval time.Duration
	since    chan time.Time
	passes   int
}

func (s *stolenLeaseStore) DueRecipients(ctx context.Context, due, since time.Time, fn func(string) error) error {
	s.mu.Lock()
	s.passes++
	first := s.passes == 1
	s.mu.Unlock()
	if first {
		l := s.lease
		l.mu.Lock()
		l.holder, l.expires = "another", time.Now().Add(time.Hour)
		l.mu.Unlock()
	}
	select {
	case s.since <- since:
	default: // the test has read what it needs: never block the sweeper
	}
	return s.sweptStore.DueRecipients(ctx, due, since, fn)
}

func (s *stolenLeaseStore) LoadRetention(ctx context.Context, recipient string, due, since time.Time) (store.RetentionState, error) {
	s.mu.Lock()
	first := s.passes == 1
	s.mu.Unlock()
	if first {
		time.Sleep(s.interval) // the pass's next visit asks for the lease again
	}
	return s.sweptStore.LoadRetention(ctx, recipient, due, since)
}

// warnings is a slog.Handler that sends each record of level Warn or above
// on records (without waiting) and drops everything.
type warnings struct{ records chan<- slog.Record }

func (warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h warnings) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.records <- r:
	default:
	}
	return nil
}
func (h warnings) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h warnings) WithGroup(string) slog.Handler      { return h }

// A pass whose lease another instance took over midway stops and says so:
// a warning naming store.ErrNotHolder, not a silent end. It did not visit
// every recipient, so the instance's next pass looks back from the same
// start, not from this pass's.
func TestAPassThatLosesItsLeaseSaysSoAndTheNextLooksBackAsFar(t *testing.T) {
	const interval = 20 * time.Millisecond
	recipients := make([]string, 2*sweepParallel)
	for i := range recipients {
		recipients[i] = string(rune('a' + i))
	}
	lease := &fakeLease{}
	s := &stolenLeaseStore{leasedStore: leasedStore{&sweptStore{recipients: recipients, lease: lease}},
		interval: interval, since: make(chan time.Time, 4)}
	records := make(chan slog.Record, 16)
	repo := New(s, Options{SweepInterval: interval, Retention: 24 * time.Hour}, slog.New(warnings{records}))
	t.Cleanup(repo.Close)
	first := <-s.since
	deadline := time.After(time.Minute) // only for a pass that never says so
	for warned := false; !warned; {
		select {
		case r := <-records:
			if r.Level >= slog.LevelError {
				t.Fatalf("a pass that lost its lease logged %q at %v", r.Message, r.Level)
			}
			if r.Message != SweepLeaseLost || r.Level != slog.LevelWarn {
				continue
			}
			r.Attrs(func(a slog.Attr) bool {
				if err, ok := a.Value.Any().(error); ok && errors.Is(err, store.ErrNotHolder) {
					warned = true
				}
				return true
			})
			if !warned {
				t.Fatalf("the warning of a lost lease names no store.ErrNotHolder")
			}
		case <-deadline:
			t.Fatal("a pass that lost its lease midway said nothing")
		}
	}
	if visited := len(s.swept()); visited >= len(recipients) {
		t.Fatalf("the pass visited %d of %d recipients after it lost the lease", visited, len(recipients))
	}
	// The other instance gives the lease up: this one sweeps again, from
	// where its first pass began.
	if err := (leasedStore{s.sweptStore}).ReleaseSweepLease(context.Background(), "another"); err != nil {
		t.Fatal(err)
	}
	if next := <-s.since; !next.Equal(first) {
		t.Fatalf("the pass after the lost one asked since %v; want the lost pass's %v", next, first)
	}
}
