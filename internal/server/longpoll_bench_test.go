package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// countingStore counts the requests the hub makes of its store. With
// failBells its bells cannot be read, as when another instance's Saves
// reach a waiting Peek by its re-check only.
type countingStore struct {
	store.Store
	calls     atomic.Int64
	failBells bool
}

func (s *countingStore) ReadBells(ctx context.Context, cursor string) ([]string, string, error) {
	if s.failBells {
		return nil, cursor, errors.New("bells cannot be read")
	}
	return s.Store.ReadBells(ctx, cursor)
}

func (s *countingStore) LoadRecipient(ctx context.Context, recipient string, opts ...store.LoadOption) (store.RecipientState, error) {
	s.calls.Add(1)
	return s.Store.LoadRecipient(ctx, recipient, opts...)
}

func (s *countingStore) ReadDrawer(ctx context.Context, drawerID string, from, to int64, limit int) ([]drawer.Item, error) {
	s.calls.Add(1)
	return s.Store.ReadDrawer(ctx, drawerID, from, to, limit)
}

func (s *countingStore) BundleExists(ctx context.Context, recipient, bundleID string) (bool, error) {
	s.calls.Add(1)
	return s.Store.BundleExists(ctx, recipient, bundleID)
}

func (s *countingStore) CreateBundle(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	s.calls.Add(1)
	return s.Store.CreateBundle(ctx, recipient, rec, cursor)
}

// idleActors are 1,000 actors with nothing to deliver, over one
// simulated minute compressed by timeScale (5 s of the actors' time is
// 5 s / timeScale of the benchmark's).
const (
	idleActors = 1000
	timeScale  = 50
)

// BenchmarkIdleActorsStoreLoad measures what 1,000 idle actors cost the
// store and the hub per minute: polling every 5 s, and waiting 20 s per
// Peek, with the 5 s re-check for other instances' Saves (a shared store
// whose bells cannot be read) and without it (the bells are followed, or
// only this instance saves). It reports store requests and Peek calls per
// simulated minute. BenchmarkIdleActorsOnCosmos measures the same on
// Cosmos DB in real time.
//
//	go test -run '^$' -bench IdleActors -benchtime 1x ./internal/server/
func BenchmarkIdleActorsStoreLoad(b *testing.B) {
	for _, c := range []struct {
		name       string
		poll, wait time.Duration // in the actors' time
		recheck    time.Duration
	}{
		{"polling_every_5s", 5 * time.Second, 0, 0},
		{"waiting_20s_bells_failing_recheck_5s", 0, 20 * time.Second, 5 * time.Second},
		{"waiting_20s_bells_followed", 0, 20 * time.Second, time.Hour},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				storeCalls, peeks := idleMinute(b, c.poll, c.wait, c.recheck)
				b.ReportMetric(float64(storeCalls), "store_requests/min")
				b.ReportMetric(float64(peeks), "peek_calls/min")
				fmt.Printf("%-36s %d idle actors: %6d store requests/min, %6d Peek calls/min\n", c.name, idleActors, storeCalls, peeks)
			}
		})
	}
}

// idleMinute runs the idle actors for one simulated minute and returns the
// store requests and Peek calls made in it.
func idleMinute(b *testing.B, poll, wait, recheck time.Duration) (storeCalls, peeks int64) {
	b.Helper()
	inner, err := pebble.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	counted := &countingStore{Store: inner, failBells: recheck < time.Hour}
	h := hub.New(counted, hub.Options{MaxWaiters: 2 * idleActors}, nil)
	defer func() { h.Close(); _ = inner.Close() }()
	svc := NewService(h)
	svc.waitRecheck = recheck / timeScale
	return idleActorsFor(b, svc, poll, wait, timeScale, counted.calls.Load)
}

// idleActorsFor runs the idle actors against svc for one minute of the
// actors' time, compressed by scale, and returns the store requests (as
// storeCalls counts them) and the Peek calls made in it.
func idleActorsFor(b *testing.B, svc *Service, poll, wait time.Duration, scale int64, storeCalls func() int64) (stored, peeks int64) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var calls atomic.Int64
	for i := range idleActors {
		req := &messagehubv1.PeekRequest{Recipient: uuidN(1_000_000 + i), WaitMs: uint32((wait / time.Duration(scale)).Milliseconds())}
		wg.Go(func() {
			// Actors start spread over one interval, as real ones are.
			if !pause(ctx, rand.N(max(poll, wait)/time.Duration(scale))) {
				return
			}
			for ctx.Err() == nil {
				if _, err := svc.Peek(ctx, req); err != nil && ctx.Err() == nil {
					b.Error(err)
					return
				}
				calls.Add(1)
				if poll > 0 && !pause(ctx, poll/time.Duration(scale)) {
					return
				}
			}
		})
	}
	// The count starts after the actors' first interval: all are running.
	warm := max(poll, wait) / time.Duration(scale)
	if !pause(context.Background(), warm) {
		b.Fatal("unreachable")
	}
	store0, calls0 := storeCalls(), calls.Load()
	_ = pause(context.Background(), time.Minute/time.Duration(scale))
	stored, peeks = storeCalls()-store0, calls.Load()-calls0
	cancel()
	wg.Wait()
	return stored, peeks
}

// pause waits d; false when ctx ended first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
