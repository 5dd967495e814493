package hub

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
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

func (s *sweptStore) LoadRecipient(ctx context.Context, _ string, _ ...store.LoadOption) (store.RecipientState, error) {
	s.mu.Lock()
	s.loads = append(s.loads, sweepLoad{at: time.Now(), low: ctx.Value(sweepLowKey{}) != nil})
	s.mu.Unlock()
	return store.RecipientState{}, nil
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

// On a shared store one instance sweeps at a time, at low priority.
func TestOneInstanceSweepsAtATimeAtLowPriority(t *testing.T) {
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
}

// A store that is not shared sweeps on every instance's turn without a lease.
func TestAStoreOfOneInstanceSweepsWithoutALease(t *testing.T) {
	s := &sweptStore{recipients: []string{"a"}}
	repo := New(s, Options{SweepInterval: 50 * time.Millisecond}, nil)
	t.Cleanup(repo.Close)
	time.Sleep(200 * time.Millisecond)
	if len(s.swept()) == 0 {
		t.Fatal("no sweep")
	}
}

// An instance that shuts down gives the lease up: another may take it at
// once instead of waiting for it to run out.
func TestAClosingInstanceHandsTheSweepLeaseOver(t *testing.T) {
	lease := &fakeLease{}
	const interval = 100 * time.Millisecond
	first := &sweptStore{recipients: []string{"a"}, lease: lease}
	repo := New(leasedStore{first}, Options{SweepInterval: interval}, nil)
	time.Sleep(2 * interval)
	if len(first.swept()) == 0 {
		t.Fatal("the first instance never swept")
	}
	repo.Close()
	held, err := leasedStore{first}.HoldSweepLease(context.Background(), "another", interval)
	if err != nil || !held {
		t.Fatalf("after the holder closed, another instance could not take the lease: %v %v", held, err)
	}
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
