package cosmos_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/figures"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// Two instances share a database: the one that holds the figures lease
// keeps the figures; the other reads them and waits, until the holder
// gives the lease up.
func TestOneInstanceKeepsTheFigures(t *testing.T) {
	db := cosmostest.UniqueID("db")
	a, b := open(t, cosmos.Config{Database: db}), open(t, cosmos.Config{Database: db})
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	clock := &costClock{now: time.Now()}
	ka, kb := figures.New(a, figures.Options{Now: clock.Now}), figures.New(b, figures.Options{Now: clock.Now})
	ctx := context.Background()
	turn := func(k *figures.Keeper) bool {
		t.Helper()
		clock.advance(figures.DefaultEvery)
		done, err := k.Turn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return done
	}
	if !turn(ka) {
		t.Fatal("the first instance did not count the figures")
	}
	if turn(kb) {
		t.Fatal("the second instance updated the figures while the first holds the lease")
	}
	if !turn(ka) {
		t.Fatal("the holder did not update the figures a minute on")
	}
	f, err := b.ReadFigures(ctx, store.FigureTotals)
	if err != nil || f.ComputedAt.IsZero() || f.FullAt.IsZero() {
		t.Fatalf("the second instance reads %+v (%v); want the holder's figures", f, err)
	}
	if err := a.ReleaseFiguresLease(ctx, ""); err != nil { // another holder's release leaves it alone
		t.Fatal(err)
	}
	if turn(kb) {
		t.Fatal("the second instance took a lease still held")
	}
}

// figuresStall stalls a holder's figures update once, until the test
// resumes it: just before its write (the read of the outbox's backlog that
// precedes it) or, with inWrite, at its write's batch (the second batch in
// the figures' partition once the update reaches the write: the first reads
// the lease).
type figuresStall struct {
	store.Store
	inWrite         bool
	once            sync.Once
	entered, resume chan struct{}
	writing         atomic.Bool
	batches         atomic.Int64
}

func (s *figuresStall) stall() {
	s.once.Do(func() {
		close(s.entered)
		<-s.resume
	})
}

func (s *figuresStall) NoticeBacklog(ctx context.Context) (int, time.Time, error) {
	if s.inWrite {
		s.writing.Store(true)
	} else {
		s.stall()
	}
	return s.Store.NoticeBacklog(ctx)
}

// request is the transport's hook (faulty): it passes every request on.
func (s *figuresStall) request(req *http.Request) int {
	if s.writing.Load() && req.Header.Get("x-ms-cosmos-is-batch-request") != "" &&
		strings.Contains(req.Header.Get("x-ms-documentdb-partitionkey"), "_figures") && s.batches.Add(1) == 2 {
		s.stall()
	}
	return 0
}

// A holder of the figures that stalls past its lease (a pause, a slow
// request) while another instance takes the lease over and writes its
// figures does not overwrite them when it resumes, whether it stalled
// before its write or with its write in flight: its write is refused, and
// it keeps the figures no longer.
func TestAStalledFiguresHolderDoesNotOverwriteTheNewHolders(t *testing.T) {
	for _, inWrite := range []bool{false, true} {
		t.Run(map[bool]string{false: "BeforeTheWrite", true: "InTheWrite"}[inWrite], func(t *testing.T) {
			stalledFiguresHolder(t, inWrite)
		})
	}
}

func stalledFiguresHolder(t *testing.T, inWrite bool) {
	// Without replica lag, so that the figures read at the end are the
	// last written, whoever wrote them.
	openOn := withoutLag(t)
	clock := &costClock{now: time.Now()}
	transport := newFaulty()
	a, b := openOn(clock.Now, transport), openOn(clock.Now, newFaulty())
	repo := hub.New(withoutBells{openOn(nil, newFaulty())}, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	before, after := uuid.NewString(), uuid.NewString()
	if _, err := repo.Save(ctx, notifications(1, before, 1)); err != nil {
		t.Fatal(err)
	}

	stalled := &figuresStall{Store: a, inWrite: inWrite, entered: make(chan struct{}), resume: make(chan struct{})}
	transport.set(stalled.request)
	ka, kb := figures.New(stalled, figures.Options{Now: clock.Now}), figures.New(b, figures.Options{Now: clock.Now})
	type turn struct {
		done bool
		err  error
	}
	first := make(chan turn, 1)
	clock.advance(figures.DefaultEvery)
	go func() {
		done, err := ka.Turn(ctx)
		first <- turn{done, err}
	}()
	select {
	case <-stalled.entered: // a holds the lease and has counted; it stalls
	case r := <-first:
		t.Fatalf("the first holder's turn ended without stalling: %v (%v)", r.done, r.err)
	}
	if _, err := repo.Save(ctx, notifications(1, after, 1)); err != nil {
		t.Fatal(err)
	}
	clock.advance(5*figures.DefaultEvery + time.Minute) // past a's lease
	if done, err := kb.Turn(ctx); err != nil || !done {
		t.Fatalf("the second instance did not take the lapsed lease over: %v (%v)", done, err)
	}
	close(stalled.resume)
	if r := <-first; r.done {
		t.Errorf("the stalled holder's turn says it updated the figures (%v)", r.err)
	}
	f, err := b.ReadFigures(ctx, store.FigureLists)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(f.Largest, func(r store.RecipientBacklog) bool { return r.Recipient == after }) {
		t.Fatalf("the figures list %+v; want the new holder's, with the recipient saved while the first holder stalled", f.Largest)
	}
	clock.advance(figures.DefaultEvery)
	if done, err := ka.Turn(ctx); err != nil || done {
		t.Fatalf("the stalled holder updated the figures again: %v (%v)", done, err)
	}
}

// A write of the figures whose answer is lost, and which the transport
// sends again, applied all the same: the resend meets the lease its first
// attempt replaced, which still names the writer, and the write succeeds
// rather than say that the lease was taken over.
func TestAFiguresWriteWhoseAnswerIsLostSucceeds(t *testing.T) {
	for _, kind := range []cosmostest.FaultKind{cosmostest.LostUnavailable, cosmostest.LostTimeout, cosmostest.LostReset} {
		t.Run(string(kind), func(t *testing.T) {
			db := cosmostest.UniqueID("db")
			s := open(t, cosmos.Config{Database: db})
			t.Cleanup(func() { _ = s.Close() })
			ctx := context.Background()
			if held, err := s.HoldFiguresLease(ctx, "holder", time.Minute); err != nil || !held {
				t.Fatalf("the figures lease: %v (%v)", held, err)
			}
			at := time.UnixMilli(time.Now().UnixMilli()).UTC()
			inject(t, db, cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", Type: "figures", Kind: kind, Count: 1})
			err := s.WriteFigures(ctx, "holder", store.BacklogFigures{ComputedAt: at, Notices: 4}, store.FigureTotals)
			if fired(t, db) == 0 {
				t.Fatal("the fault never fired; the test tested nothing")
			}
			if err != nil {
				t.Fatalf("a write that applied answered %v", err)
			}
			if f, err := s.ReadFigures(ctx, store.FigureTotals); err != nil || !f.ComputedAt.Equal(at) || f.Notices != 4 {
				t.Fatalf("read back %+v (%v)", f, err)
			}
		})
	}
}

// longRecount is a store whose recount takes longer than the figures
// lease on the clock (a large container at low priority): it lets the
// clock run past the lease, in two halves, and between them waits for the
// holder to extend its lease; at the end, another instance takes a turn.
type longRecount struct {
	*cosmos.Store
	clock     *costClock
	lease     time.Duration
	holds     chan struct{}
	scanning  chan struct{}
	other     func() (bool, error)
	otherDone bool
	otherErr  error
}

func (s *longRecount) HoldFiguresLease(ctx context.Context, holder string, d time.Duration) (bool, error) {
	held, err := s.Store.HoldFiguresLease(ctx, holder, d)
	select {
	case <-s.scanning:
		select {
		case s.holds <- struct{}{}:
		default:
		}
	default:
	}
	return held, err
}

func (s *longRecount) ScanBacklog(ctx context.Context, fn func(store.RecipientRecords) error) (float64, error) {
	s.clock.advance(s.lease * 3 / 5)
	close(s.scanning)
	select {
	case <-s.holds:
	case <-time.After(10 * time.Second): // only a keeper that never extends waits this long
	}
	s.clock.advance(s.lease * 3 / 5) // past the lease as taken before the recount
	s.otherDone, s.otherErr = s.other()
	return s.Store.ScanBacklog(ctx, fn)
}

// A recount that takes longer than the figures lease (at 100,000
// recipients about 200,000 RU at low priority) keeps the lease: its holder
// extends it while the recount runs. Taken over half-way by another
// instance, whose own recount is as long, the figures were never written:
// each holder's write was refused after the next took over, and the
// instances took turns recounting for ever.
func TestARecountLongerThanTheLeaseKeepsIt(t *testing.T) {
	// Without replica lag: the recount of an instance that did not save may
	// miss, by the replica lag, a save another instance made just before
	// (its figures are approximate by that much), and this test checks what
	// the lease keeps, not that.
	openOn := withoutLag(t)
	clock := &costClock{now: time.Now()}
	a := openOn(clock.Now, newFaulty())
	b := openOn(clock.Now, newFaulty())
	h := hub.New(withoutBells{openOn(time.Now, newFaulty())}, hub.Options{}, nil)
	t.Cleanup(h.Close)
	ctx := context.Background()
	r := uuid.NewString()
	if _, err := h.Save(ctx, notifications(2, r, 1)); err != nil {
		t.Fatal(err)
	}
	const every = 50 * time.Millisecond // the keepers' turns, and so their lease (5 turns)
	kb := figures.New(b, figures.Options{Every: every, Now: clock.Now})
	slow := &longRecount{Store: a, clock: clock, lease: 5 * every, holds: make(chan struct{}), scanning: make(chan struct{}),
		other: func() (bool, error) { return kb.Turn(ctx) }}
	ka := figures.New(slow, figures.Options{Every: every, Now: clock.Now})
	done, err := ka.Turn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slow.otherErr != nil || slow.otherDone {
		t.Errorf("another instance took the lease over during the recount: %v (%v)", slow.otherDone, slow.otherErr)
	}
	if !done {
		t.Fatal("the recount's figures were not written: its lease was taken over while it counted")
	}
	f, err := a.ReadFigures(ctx, store.FigureLists)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Largest) != 1 || f.Largest[0].Recipient != r || f.Largest[0].Waiting != 2 {
		t.Fatalf("figures %+v; want the recipient with 2 waiting", f.Largest)
	}
}

// An instance that held the figures lease, lost it while it stalled and
// takes it again after the instance that took over stopped goes on from
// the figures that instance wrote, not from its own of before: the
// history keeps the other holder's samples.
func TestAHolderBackAfterAnotherHolderKeepsItsHistory(t *testing.T) {
	// Without replica lag: the holder comes back minutes after the other's
	// write (on the clock), which replicas have long caught up with.
	openOn := withoutLag(t)
	clock := &costClock{now: time.Now()}
	a, b := openOn(clock.Now, newFaulty()), openOn(clock.Now, newFaulty())
	ctx := context.Background()
	ka := figures.New(a, figures.Options{Now: clock.Now})
	kb := figures.New(b, figures.Options{Now: clock.Now})
	pastTheLease := 5*figures.DefaultEvery + time.Minute
	for i, k := range []*figures.Keeper{ka, kb, ka} {
		if i > 0 {
			clock.advance(pastTheLease) // the holder stalls, or stops
		}
		if done, err := k.Turn(ctx); err != nil || !done {
			t.Fatalf("turn %d: %v (%v), want an update", i, done, err)
		}
	}
	f, err := a.ReadFigures(ctx, store.FigureHistory)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.History) != 3 {
		t.Fatalf("%d samples after three holders' updates %v apart, want 3: %+v", len(f.History), pastTheLease, f.History)
	}
}

// withoutLag starts a test server without replica lag and returns how to
// open stores of one database on it.
func withoutLag(t *testing.T) func(now func() time.Time, transport *faulty) *cosmos.Store {
	t.Helper()
	openOn := withoutLagAs(t)
	return func(now func() time.Time, transport *faulty) *cosmos.Store {
		return openOn(cosmos.Config{Transport: transport, Now: now})
	}
}

// withoutLagAs starts a test server without replica lag and returns how to
// open stores of one database on it, as cfg says otherwise.
func withoutLagAs(t *testing.T) func(cfg cosmos.Config) *cosmos.Store {
	t.Helper()
	opts := cosmostest.Default()
	opts.Lag = 0
	srv := cosmostest.StartWith(t, opts)
	db := cosmostest.UniqueID("db")
	return func(cfg cosmos.Config) *cosmos.Store {
		cfg.Endpoint, cfg.Key, cfg.Provision, cfg.Database = srv.Endpoint, srv.Key, true, db
		s, err := cosmos.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

// pricey is a store whose reads of what changed cost what the test says.
type pricey struct {
	store.Store
	cost float64
}

func (s *pricey) ChangedBacklog(ctx context.Context, cursor string) (store.BacklogChanges, error) {
	c, err := s.Store.ChangedBacklog(ctx, cursor)
	if cursor != "" {
		c.Cost = s.cost
	}
	return c, err
}

// A holder whose last update cost more than its lease's worth of budget
// (a busy cluster's changed recipients) waits longer than the lease for its
// next: it keeps the lease meanwhile, so that another instance whose turn
// comes first when the update is due does not take the lapsed lease over
// and count every recipient again.
func TestAHolderPacedPastItsLeaseKeepsIt(t *testing.T) {
	openOn := withoutLag(t)
	clock := &costClock{now: time.Now()}
	a := &pricey{Store: openOn(clock.Now, newFaulty())}
	b := openOn(clock.Now, newFaulty())
	ctx := context.Background()
	ka := figures.New(a, figures.Options{Now: clock.Now})
	kb := figures.New(b, figures.Options{Now: clock.Now})
	if done, err := ka.Turn(ctx); err != nil || !done {
		t.Fatalf("the first count: %v (%v)", done, err)
	}
	const paced = 10 * figures.DefaultEvery // twice the lease
	a.cost = paced.Seconds() * figures.DefaultBudget
	clock.advance(figures.DefaultEvery)
	if done, err := ka.Turn(ctx); err != nil || !done {
		t.Fatalf("the costly update: %v (%v)", done, err)
	}
	a.cost = 0
	// Run's turns every minute, the other instance's first.
	for minute := 1; minute <= 11; minute++ {
		clock.advance(figures.DefaultEvery)
		if done, err := kb.Turn(ctx); err != nil || done {
			t.Fatalf("minute %d: the other instance updated the figures (%v, %v): it took the holder's lease over", minute, done, err)
		}
		if _, err := ka.Turn(ctx); err != nil {
			t.Fatalf("minute %d: the holder's turn: %v", minute, err)
		}
	}
}
