package figures_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/figures"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// costly is a real store whose reads of changes cost what the test says,
// or fail with the error it says, and which counts the recounts.
type costly struct {
	store.Store
	mu      sync.Mutex
	cost    float64
	fail    error
	recount int
}

func (s *costly) ChangedBacklog(ctx context.Context, cursor string) (store.BacklogChanges, error) {
	s.mu.Lock()
	cost, fail := s.cost, s.fail
	s.mu.Unlock()
	if cursor != "" && fail != nil {
		return store.BacklogChanges{}, fail
	}
	c, err := s.Store.ChangedBacklog(ctx, cursor)
	c.Cost = cost
	return c, err
}

func (s *costly) ScanBacklog(ctx context.Context, fn func(store.RecipientRecords) error) (float64, error) {
	s.mu.Lock()
	s.recount++
	s.mu.Unlock()
	return s.Store.ScanBacklog(ctx, fn)
}

func (s *costly) set(cost float64, fail error) {
	s.mu.Lock()
	s.cost, s.fail = cost, fail
	s.mu.Unlock()
}

func (s *costly) recounts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recount
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// clocked opens a real store and a clock for its keeper.
func clocked(t *testing.T) (*pebble.Store, *clock) {
	t.Helper()
	st, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, &clock{now: time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)}
}

func setup(t *testing.T) (*costly, *figures.Keeper, *clock) {
	t.Helper()
	st, c := clocked(t)
	s := &costly{Store: st}
	return s, figures.New(s, figures.Options{Now: c.Now}), c
}

func turn(t *testing.T, k *figures.Keeper) (bool, error) {
	t.Helper()
	return k.Turn(context.Background())
}

// An update that cost c waits c/Budget before the next, longer than Every
// when c is large.
func TestUpdatesArePacedByWhatTheyCost(t *testing.T) {
	s, k, c := setup(t)
	if done, err := turn(t, k); err != nil || !done {
		t.Fatalf("the first turn: %v (%v), want a count", done, err)
	}
	s.set(6*60*figures.DefaultBudget, nil) // six minutes' worth
	c.advance(figures.DefaultEvery)
	if done, err := turn(t, k); err != nil || !done {
		t.Fatalf("a turn a minute on: %v (%v), want an update", done, err)
	}
	s.set(0, nil)
	for _, wait := range []time.Duration{figures.DefaultEvery, 4 * figures.DefaultEvery} {
		c.advance(wait)
		if done, err := turn(t, k); err != nil || done {
			t.Fatalf("an update within six minutes of one that cost six minutes' budget: %v (%v)", done, err)
		}
	}
	c.advance(figures.DefaultEvery)
	if done, err := turn(t, k); err != nil || !done {
		t.Fatalf("six minutes on: %v (%v), want an update", done, err)
	}
	if n := s.recounts(); n != 1 {
		t.Fatalf("%d recounts, want the first only", n)
	}
}

// A store that refuses for a while is asked again from the same place; one
// that fails otherwise (a cursor it no longer takes) makes the keeper count
// again.
func TestAFailedReadOfTheChangesRecountsUnlessItPasses(t *testing.T) {
	s, k, c := setup(t)
	if _, err := turn(t, k); err != nil {
		t.Fatal(err)
	}
	s.set(0, fmt.Errorf("%w: throttled", domain.ErrUnavailable))
	c.advance(figures.DefaultEvery)
	if _, err := turn(t, k); !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("turn: %v, want the refusal", err)
	}
	s.set(0, nil)
	if done, err := turn(t, k); err != nil || !done || s.recounts() != 1 {
		t.Fatalf("after a refusal: %v (%v), %d recounts; want an update from the same place", done, err, s.recounts())
	}
	s.set(0, errors.New("continuation of another container"))
	c.advance(figures.DefaultEvery)
	if _, err := turn(t, k); err == nil {
		t.Fatal("turn: no error")
	}
	s.set(0, nil)
	if done, err := turn(t, k); err != nil || !done || s.recounts() != 2 {
		t.Fatalf("after a failure: %v (%v), %d recounts; want a second count", done, err, s.recounts())
	}
}

// slow is a real store whose reads of the backlog take time on the clock:
// an update ends some time into its turn.
type slow struct {
	store.Store
	clock *clock
	takes time.Duration
}

func (s *slow) ChangedBacklog(ctx context.Context, cursor string) (store.BacklogChanges, error) {
	s.clock.advance(s.takes)
	return s.Store.ChangedBacklog(ctx, cursor)
}

func (s *slow) ScanBacklog(ctx context.Context, fn func(store.RecipientRecords) error) (float64, error) {
	s.clock.advance(s.takes)
	return s.Store.ScanBacklog(ctx, fn)
}

// Run's turns come every Every, and each updates the figures: the last
// update ended some time into its turn, and pacing the next from that end
// made the next turn skip, so that the figures were updated every other
// turn (twice as old as Every says: 30 s on the embedded store).
func TestEveryTurnOfRunUpdatesTheFigures(t *testing.T) {
	st, c := clocked(t)
	const every = 15 * time.Second
	k := figures.New(&slow{Store: st, clock: c, takes: time.Second}, figures.Options{Every: every, Now: c.Now})
	start := c.Now()
	for i := range 4 {
		c.advance(start.Add(time.Duration(i) * every).Sub(c.Now())) // the i-th tick of Run's ticker
		if done, err := turn(t, k); err != nil || !done {
			t.Fatalf("the turn at tick %d: %v (%v), want an update", i, done, err)
		}
	}
}

// A keeper that takes the figures over (a restart, or another instance
// after the holder stopped) from a recount that finds no backlog replaces
// the lists the last holder wrote: recipients drained since then leave
// them, as they leave the totals.
func TestATakeOverWithNoBacklogEmptiesTheLastHoldersLists(t *testing.T) {
	st, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := hub.New(st, hub.Options{}, nil)
	t.Cleanup(func() { h.Close(); _ = st.Close() })
	ctx := context.Background()
	recipient := uuid.NewString()
	if _, err := h.Save(ctx, []domain.Notification{{
		ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginTimeSeries,
		ContentType: "rsm-014", DocumentType: "rsm-014", SupportsBundling: true, Weight: 1,
	}}); err != nil {
		t.Fatal(err)
	}
	if err := figures.New(st, figures.Options{}).Recount(ctx); err != nil {
		t.Fatal(err)
	}
	if f, err := st.ReadFigures(ctx, store.FigureLists); err != nil || len(f.Oldest) != 1 {
		t.Fatalf("lists after the first recount: %+v, %v; want the recipient", f.Oldest, err)
	}
	b, err := h.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("peek: %v, %v", b, err)
	}
	if err := h.Dequeue(ctx, recipient, b.ID); err != nil {
		t.Fatal(err)
	}
	// The holder stopped before its next turn; the next holder recounts.
	if err := figures.New(st, figures.Options{}).Recount(ctx); err != nil {
		t.Fatal(err)
	}
	f, err := st.ReadFigures(ctx, store.FigureLists)
	if err != nil {
		t.Fatal(err)
	}
	if f.Backlog.Recipients != 0 || len(f.Oldest) != 0 || len(f.Largest) != 0 {
		t.Fatalf("figures after the take-over: %d recipients, lists %+v and %+v; want none anywhere", f.Backlog.Recipients, f.Oldest, f.Largest)
	}
}

// The history keeps one sample per HistoryStep while updates come every
// Every: an update ends a little later or earlier into its turn as the
// store answers, and a sample taken HistoryStep after the last one was
// skipped whenever this turn's update ended a few milliseconds earlier than
// that sample's, leaving a sample every six turns instead of every five
// (a tenth of the history's points lost, its gaps uneven).
func TestTheHistoryKeepsASamplePerStepWhateverTheUpdatesTake(t *testing.T) {
	st, c := clocked(t)
	k := figures.New(st, figures.Options{Now: c.Now})
	start := c.Now()
	const span = 3 * time.Hour
	turns := int(span / figures.DefaultEvery)
	for i := range turns {
		ends := 20 * time.Millisecond // how far into its turn the update ends
		if i%2 == 1 {
			ends = 10 * time.Millisecond
		}
		c.advance(start.Add(time.Duration(i)*figures.DefaultEvery + ends).Sub(c.Now()))
		if done, err := turn(t, k); err != nil || !done {
			t.Fatalf("the turn at tick %d: %v (%v), want an update", i, done, err)
		}
	}
	f, err := st.ReadFigures(context.Background(), store.FigureHistory)
	if err != nil {
		t.Fatal(err)
	}
	if want := int(span / store.HistoryStep); len(f.History) != want {
		t.Errorf("%d samples over %v of updates every %v, want %d (one per %v)", len(f.History), span, figures.DefaultEvery, want, store.HistoryStep)
	}
	for i := 1; i < len(f.History); i++ {
		if gap := f.History[i].At.Sub(f.History[i-1].At); gap > store.HistoryStep+figures.DefaultEvery/2 {
			t.Fatalf("samples %v and %v are %v apart, want about %v", f.History[i-1].At, f.History[i].At, gap, store.HistoryStep)
		}
	}
}

// flakyLease is a costly store whose next take or extension of the figures
// lease fails, as a write answered 503 or timed out does.
type flakyLease struct {
	*costly
	fail error
}

func (s *flakyLease) HoldFiguresLease(ctx context.Context, holder string, d time.Duration) (bool, error) {
	if err := s.fail; err != nil {
		s.fail = nil
		return false, err
	}
	return s.costly.HoldFiguresLease(ctx, holder, d)
}

// A take of the lease that fails says nothing of who holds it: the keeper
// keeps its tally and its place in the changes, and the next turn that
// holds the lease updates from them instead of counting every recipient
// again (at 100,000 recipients on Cosmos DB, 200,000 RU for one 503).
func TestAFailedTakeOfTheLeaseDoesNotRecount(t *testing.T) {
	st, c := clocked(t)
	s := &flakyLease{costly: &costly{Store: st}}
	k := figures.New(s, figures.Options{Now: c.Now})
	if done, err := turn(t, k); err != nil || !done {
		t.Fatalf("the first turn: %v (%v), want a count", done, err)
	}
	s.fail = fmt.Errorf("%w: 503 on the lease's replace", domain.ErrUnavailable)
	c.advance(figures.DefaultEvery)
	if _, err := turn(t, k); !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("turn: %v, want the failure", err)
	}
	c.advance(figures.DefaultEvery)
	if done, err := turn(t, k); err != nil || !done {
		t.Fatalf("the turn after: %v (%v), want an update", done, err)
	}
	if n := s.recounts(); n != 1 {
		t.Fatalf("%d recounts, want the first only: a failed take of the lease made the keeper count everything again", n)
	}
}
