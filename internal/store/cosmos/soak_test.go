package cosmos_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// Two instances on one database whose replicas lag up to 200 ms, with
// savers and consumers running at once on both: every notification is
// delivered in exactly one dequeued bundle, each save's notifications in
// order and together, and no Peek that began after a bundle's Dequeue
// returned hands that bundle out again. Bounded: 4 savers × 12 saves, and
// a two-minute deadline.
func TestTwoInstancesSoakUnderReplicaLag(t *testing.T) {
	repos := twoLaggingInstances(t, 7)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	recipients := []string{uuid.NewString(), uuid.NewString()}

	var mu sync.Mutex
	var saves [][]string
	var savers sync.WaitGroup
	for w := range 4 {
		savers.Go(func() {
			for i := range 12 {
				ns := notifications(1+(w+i)%5, recipients[(w+i)%2], 1)
				if _, err := repos[(w+i)%2].Save(ctx, ns); err != nil {
					t.Errorf("save: %v", err)
					return
				}
				mu.Lock()
				saves = append(saves, ids(ns))
				mu.Unlock()
			}
		})
	}
	savingDone := make(chan struct{})
	go func() { savers.Wait(); close(savingDone) }()

	// clock orders events: a Dequeue's return and a Peek's start.
	var clock atomic.Int64
	dequeuedAt := map[string]int64{} // bundle → clock when its Dequeue returned
	order := map[string][]string{}   // recipient → ids of its dequeued bundles, in dequeue order
	delivered := map[string]int{}
	var consumers sync.WaitGroup
	for ci := range 4 {
		consumers.Go(func() {
			repo, r := repos[ci%2], recipients[(ci/2)%2]
			for ctx.Err() == nil {
				started := clock.Add(1)
				b, err := repo.Peek(ctx, r, domain.GroupAll, "")
				if err != nil {
					t.Errorf("peek: %v", err)
					return
				}
				if b == nil {
					select {
					case <-savingDone:
						// Nothing left once saving ended: one more look.
						if b, err = repo.Peek(ctx, r, domain.GroupAll, ""); err == nil && b == nil {
							return
						}
					case <-time.After(20 * time.Millisecond): // poll interval
					}
					continue
				}
				mu.Lock()
				if at, ok := dequeuedAt[b.ID]; ok && at < started {
					mu.Unlock()
					t.Errorf("bundle %s handed out by a Peek that began after its Dequeue returned", b.ID)
					return
				}
				mu.Unlock()
				err = repo.Dequeue(ctx, r, b.ID)
				if errors.Is(err, domain.ErrNotFound) {
					continue // the other consumer of this recipient dequeued it
				}
				if err != nil {
					t.Errorf("dequeue: %v", err)
					return
				}
				mu.Lock()
				if _, twice := dequeuedAt[b.ID]; twice {
					mu.Unlock()
					t.Errorf("bundle %s dequeued twice", b.ID)
					return
				}
				dequeuedAt[b.ID] = clock.Add(1)
				for _, id := range b.NotificationIDs {
					delivered[id]++
					order[r] = append(order[r], id)
				}
				mu.Unlock()
			}
		})
	}
	consumers.Wait()
	if t.Failed() {
		return
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("soak did not finish in time: %v", err)
	}
	pos := map[string]int{} // id → place in its recipient's order
	for _, ids := range order {
		for i, id := range ids {
			pos[id] = i
		}
	}
	total := 0
	for _, s := range saves {
		for i, id := range s {
			total++
			if delivered[id] != 1 {
				t.Fatalf("notification %s delivered %d times", id, delivered[id])
			}
			if i > 0 && pos[id] != pos[s[i-1]]+1 {
				t.Fatal("a save's notifications were not delivered together in order")
			}
		}
	}
	if len(delivered) != total {
		t.Fatalf("%d notifications delivered, %d saved", len(delivered), total)
	}
	t.Logf("%d notifications in %d saves, %d bundles dequeued", total, len(saves), len(dequeuedAt))
}

// The same new ids saved at once on two instances whose replicas lag: one
// save stores them, the other counts them as duplicates, and each is
// delivered once.
func TestOneIDSavedOnTwoInstancesAtOnceIsStoredOnceUnderLag(t *testing.T) {
	repos := twoLaggingInstances(t, 11)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := uuid.NewString()
	var want []string
	for round := range 8 {
		ns := notifications(1+round%3, r, 1)
		want = append(want, ids(ns)...)
		results := make([]domain.SaveResult, 2)
		var wg sync.WaitGroup
		for i := range repos {
			wg.Go(func() {
				var err error
				if results[i], err = repos[i].Save(ctx, ns); err != nil {
					t.Errorf("save on instance %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		if results[0].Saved+results[1].Saved != len(ns) || results[0].Duplicates+results[1].Duplicates != len(ns) {
			t.Fatalf("round %d: results %+v, want the %d ids saved once and counted once as duplicates", round, results, len(ns))
		}
	}
	var got []string
	for range 100 {
		b, err := repos[1].Peek(ctx, r, domain.GroupAll, "")
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			break
		}
		got = append(got, b.NotificationIDs...)
		if err := repos[0].Dequeue(ctx, r, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %d ids, want each of the %d saved once, in order", len(got), len(want))
	}
}

// twoLaggingInstances opens two stores on one database of a test server
// whose reads lag up to 200 ms (random moments from seed), as two hub
// instances would, each with its repository.
func twoLaggingInstances(t *testing.T, seed uint32) []*hub.Hub {
	t.Helper()
	opts := cosmostest.Default()
	opts.Lag, opts.Seed = 200*time.Millisecond, seed
	srv := cosmostest.StartWith(t, opts)
	db := cosmostest.UniqueID("db")
	repos := make([]*hub.Hub, 2)
	for i := range repos {
		s, err := cosmos.Open(context.Background(), cosmos.Config{
			Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: cosmostest.NewHTTPClient(),
		})
		if err != nil {
			t.Fatal(err)
		}
		repos[i] = hub.New(s, hub.Options{}, nil)
		t.Cleanup(repos[i].Close)
	}
	return repos
}
