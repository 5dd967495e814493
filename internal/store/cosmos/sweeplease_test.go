package cosmos_test

import (
	"context"
	"net/http"
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

// The sweep lease has one holder at a time: others are refused until it
// runs out, the holder extends it, and of many instances asking at once
// exactly one gets it.
func TestSweepLeaseHasOneHolderAtATime(t *testing.T) {
	db := cosmostest.UniqueID("db")
	clock := &costClock{now: time.Now()}
	a := open(t, cosmos.Config{Database: db, Now: clock.Now})
	b := open(t, cosmos.Config{Database: db, Now: clock.Now})
	ctx := context.Background()
	hold := func(s *cosmos.Store, holder string, want bool) {
		t.Helper()
		got, err := s.HoldSweepLease(ctx, holder, time.Minute)
		if err != nil || got != want {
			t.Fatalf("%s holds the lease: %v, %v; want %v", holder, got, err, want)
		}
	}
	hold(a, "a", true)
	hold(b, "b", false)
	hold(a, "a", true) // extended
	clock.advance(59 * time.Second)
	hold(b, "b", false)
	clock.advance(2 * time.Minute)
	hold(b, "b", true) // a's ran out
	hold(a, "a", false)
	if err := a.ReleaseSweepLease(ctx, "a"); err != nil { // not a's: nothing
		t.Fatal(err)
	}
	hold(a, "a", false)
	if err := b.ReleaseSweepLease(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	hold(a, "a", true) // b gave it up

	fresh := cosmostest.UniqueID("db")
	stores := []*cosmos.Store{open(t, cosmos.Config{Database: fresh}), open(t, cosmos.Config{Database: fresh})}
	var won atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			ok, err := stores[i%2].HoldSweepLease(ctx, uuid.NewString(), time.Minute)
			if err != nil {
				t.Error(err)
			}
			if ok {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d of 8 instances took the lease at once", won.Load())
	}
}

// priorityLog records whether each request asked for low priority.
type priorityLog struct {
	next *http.Client
	mu   sync.Mutex
	low  map[string]int // operation → requests at low priority
	high map[string]int
}

func (p *priorityLog) Do(req *http.Request) (*http.Response, error) {
	op := cosmos.Classify(req)
	p.mu.Lock()
	if req.Header.Get("x-ms-cosmos-priority-level") == "Low" {
		p.low[op]++
	} else if op != cosmos.OpMetadata {
		p.high[op]++
	}
	p.mu.Unlock()
	return p.next.Do(req)
}

func (p *priorityLog) counts() (low, high int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.low {
		low += n
	}
	for _, n := range p.high {
		high += n
	}
	return low, high
}

// Save, Peek and Dequeue run at the normal priority; the sweeper's requests,
// the lease included, carry x-ms-cosmos-priority-level: Low.
func TestTheSweeperRunsAtLowPriority(t *testing.T) {
	log := &priorityLog{next: cosmostest.NewHTTPClient(), low: map[string]int{}, high: map[string]int{}}
	store := open(t, cosmos.Config{Transport: log})
	ctx := context.Background()
	// Without the bells, read at low priority and rung at normal priority
	// at moments of their own (bells_test.go checks them).
	work := hub.New(withoutBells{store}, hub.Options{SweepInterval: time.Hour}, nil)
	t.Cleanup(work.Close)
	r := uuid.NewString()
	if _, err := work.Save(ctx, notifications(3, r, 1)); err != nil {
		t.Fatal(err)
	}
	b, err := work.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("peek: %v %v", b, err)
	}
	if err := work.Dequeue(ctx, r, b.ID); err != nil {
		t.Fatal(err)
	}
	if low, high := log.counts(); low != 0 || high == 0 {
		t.Fatalf("save, peek and dequeue: %d requests at low priority, %d at normal", low, high)
	}
	_, before := log.counts()
	sweeper := hub.New(withoutBells{store}, hub.Options{SweepInterval: 100 * time.Millisecond}, nil)
	t.Cleanup(sweeper.Close)
	deadline := time.Now().Add(10 * time.Second)
	for {
		low, high := log.counts()
		log.mu.Lock()
		queries := log.low[cosmos.OpQuery]
		log.mu.Unlock()
		if queries > 0 && low >= 3 { // lease read and write, recipients, the recipient's state
			if high != before {
				t.Fatalf("the sweeper sent %d requests at normal priority", high-before)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sweep at low priority: low %v, high %v", log.low, log.high)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A take or a renewal of the sweep lease whose write applied but whose
// answer was lost (the transport sends it again, which meets the first
// attempt's own effect) still holds the lease, and the other instance is
// refused: never two holders, never none.
func TestASweepLeaseWhoseAnswerIsLostIsHeld(t *testing.T) {
	ctx := context.Background()
	db := cosmostest.UniqueID("db")
	a := open(t, cosmos.Config{Database: db})
	b := open(t, cosmos.Config{Database: db})
	hold := func(s *cosmos.Store, holder string, want bool) {
		t.Helper()
		if held, err := s.HoldSweepLease(ctx, holder, time.Hour); err != nil || held != want {
			t.Fatalf("%s holds the sweep lease: %v, %v; want %v", holder, held, err, want)
		}
	}
	for _, f := range []cosmostest.Fault{
		{Kind: cosmostest.LostTimeout, Ops: []string{"create"}, DB: db, Coll: "recipients", ID: "^sweep$", Count: 1},
		{Kind: cosmostest.LostUnavailable, Ops: []string{"replace"}, DB: db, Coll: "recipients", ID: "^sweep$", Count: 1},
		{Kind: cosmostest.LostReset, Ops: []string{"replace"}, DB: db, Coll: "recipients", ID: "^sweep$", Count: 1},
	} {
		if err := server.AddFaults(f); err != nil {
			t.Fatal(err)
		}
		hold(a, "a", true) // taken, then renewed twice
		hold(b, "b", false)
	}
	rules, err := server.Faults()
	if err != nil {
		t.Fatal(err)
	}
	fired := 0
	for _, r := range rules {
		if r.DB == db {
			fired += r.Fired
		}
	}
	if err := server.ClearFaults(db); err != nil {
		t.Fatal(err)
	}
	if fired != 3 {
		t.Fatalf("%d lost answers, want 3", fired)
	}
}
