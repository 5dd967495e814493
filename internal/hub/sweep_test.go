package hub

import (
	"context"
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

func (s *sweptStore) Recipients(_ context.Context, fn func(string) error) error {
	for _, r := range s.recipients {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

func (s *sweptStore) LoadRecipient(ctx context.Context, _ string) (store.RecipientState, error) {
	s.mu.Lock()
	s.loads = append(s.loads, sweepLoad{at: time.Now(), low: ctx.Value(sweepLowKey{}) != nil})
	s.mu.Unlock()
	return store.RecipientState{}, nil
}

func (s *sweptStore) DequeuedBundles(context.Context, string) ([]bundle.Record, error) {
	return nil, nil
}

func (s *sweptStore) Close() error { return nil }

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

// On a shared store one instance sweeps at a time, at low priority, and a
// pass is spread over most of the interval rather than done in a burst.
func TestOneInstanceSweepsAtATimeSpreadOverTheInterval(t *testing.T) {
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
		// Five recipients over three quarters of the interval: 60 ms apart.
		if len(loads) >= 5 {
			if took := loads[4].at.Sub(loads[0].at); took < interval/2 {
				t.Fatalf("a pass of five recipients took %v: a burst, not spread over %v", took, interval)
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
