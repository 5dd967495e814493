package pebble

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
)

// Retention sweeps run between Saves, Peeks and Dequeues of the same
// recipients, each sweep with every dequeued bundle past its retention, so
// that drawers (some saves fill more than one) leave the catalog and are
// deleted, and cabinets are dropped, while the cabinets are written and
// read: every notification is delivered exactly once.
func TestSweepsAmidSavesPeeksAndDequeuesLoseNothing(t *testing.T) {
	s := openTemp(t)
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Add(int64(time.Millisecond))) }
	repo := hub.New(s, hub.Options{Now: clock, SweepInterval: time.Hour, MaxBundleWeight: 50}, nil)
	defer func() { repo.Close(); _ = s.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	recipients := []string{uuid.NewString(), uuid.NewString(), uuid.NewString()}
	const saves = 300
	var mu sync.Mutex
	saved := map[string][]string{}
	delivered := map[string][]string{}
	// A save signals its recipient's reader and the sweeper (a buffer of
	// one: signals while they are busy make one more look).
	signals := map[string]chan struct{}{}
	for _, r := range recipients {
		signals[r] = make(chan struct{}, 1)
	}
	sweep := make(chan struct{}, 1)
	signal := func(c chan struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	savingDone, readersDone := make(chan struct{}), make(chan struct{})
	var wg, readers sync.WaitGroup
	wg.Go(func() {
		defer close(savingDone)
		for i := range saves {
			r := recipients[i%len(recipients)]
			n := 1 + i%5
			if i%50 == 0 {
				n = 6_000 // two of them fill a cabinet's first drawer
			}
			var ns []domain.Notification
			for j := range n {
				ct, w := []string{"a", "b"}[j%2], int64(1+j%3)
				if n == 6_000 {
					ct, w = "a", 1
				}
				ns = append(ns, domain.Notification{ID: uuid.NewString(), Recipient: r, Origin: domain.OriginCharges,
					ContentType: ct, DocumentType: ct, SupportsBundling: true, Weight: w})
			}
			if _, err := repo.Save(ctx, ns); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			for _, n := range ns {
				saved[r] = append(saved[r], n.ID)
			}
			mu.Unlock()
			signal(signals[r])
			signal(sweep)
		}
	})
	for _, r := range recipients {
		readers.Go(func() {
			for range 10 * saves * 5 { // more than the bundles of every save and the looks between
				b, err := repo.Peek(ctx, r, domain.GroupAll, "")
				if err != nil {
					t.Error(err)
					return
				}
				if b == nil {
					select {
					case <-signals[r]:
						continue
					case <-savingDone:
					}
					if b, err = repo.Peek(ctx, r, domain.GroupAll, ""); err != nil || b == nil {
						if err != nil {
							t.Error(err)
						}
						return
					}
				}
				if err := repo.Dequeue(ctx, r, b.ID); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				delivered[r] = append(delivered[r], b.NotificationIDs...)
				mu.Unlock()
				signal(sweep)
			}
			t.Error("reading does not end")
		})
	}
	wg.Go(func() { readers.Wait(); close(readersDone) })
	wg.Go(func() {
		for range 10 * saves * 5 {
			select {
			case <-sweep:
			case <-readersDone:
				return
			}
			now.Add(int64(8 * 24 * time.Hour)) // past the retention of every bundle dequeued so far
			if err := repo.SweepNow(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	for _, r := range recipients {
		seen := map[string]bool{}
		for _, id := range delivered[r] {
			if seen[id] {
				t.Fatalf("%s delivered twice", id)
			}
			seen[id] = true
		}
		if len(seen) != len(saved[r]) {
			t.Fatalf("delivered %d of the %d notifications saved", len(seen), len(saved[r]))
		}
	}
}
