package cosmos_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// Instances that ask for a build's lease at once: exactly one gets it.
func TestOneInstanceHoldsABuildsLease(t *testing.T) {
	db := cosmostest.UniqueID("db")
	stores := []*cosmos.Store{open(t, cosmos.Config{Database: db}), open(t, cosmos.Config{Database: db})}
	ctx := context.Background()
	for range 5 {
		recipient, bundle := uuid.NewString(), uuid.NewString()
		var held atomic.Int32
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				holder := uuid.NewString()
				current, _, err := stores[i%2].AcquireBuild(ctx, recipient, bundle, holder, time.Minute)
				if err != nil {
					t.Error(err)
				}
				if current == holder {
					held.Add(1)
				}
			})
		}
		wg.Wait()
		if held.Load() != 1 {
			t.Fatalf("%d holders of one lease", held.Load())
		}
	}
}

func TestABuildsLeaseIsRenewedReleasedAndTakenOverWhenExpired(t *testing.T) {
	db := cosmostest.UniqueID("db")
	a := open(t, cosmos.Config{Database: db})
	b := open(t, cosmos.Config{Database: db})
	later := open(t, cosmos.Config{Database: db, Now: func() time.Time { return time.Now().Add(2 * time.Minute) }})
	ctx := context.Background()
	recipient, bundle := uuid.NewString(), uuid.NewString()
	// acquire checks who holds the lease after holder's attempt.
	acquire := func(s *cosmos.Store, holder, want string) {
		t.Helper()
		current, until, err := s.AcquireBuild(ctx, recipient, bundle, holder, time.Minute)
		if err != nil || current != want {
			t.Fatalf("%s acquiring: held by %q (%v), want %q", holder, current, err, want)
		}
		if left := time.Until(until); left < 30*time.Second || left > 3*time.Minute+time.Second {
			t.Fatalf("%s acquiring: held until %v, %v from now", holder, until, left)
		}
	}
	acquire(a, "a", "a")
	acquire(a, "a", "a") // a renewal
	acquire(b, "b", "a")
	if err := b.ReleaseBuild(ctx, recipient, bundle, "b"); err != nil { // not b's: left alone
		t.Fatal(err)
	}
	acquire(b, "b", "a")
	acquire(later, "c", "c") // a's lease has expired by c's clock
	acquire(a, "a", "c")
	if err := later.ReleaseBuild(ctx, recipient, bundle, "c"); err != nil {
		t.Fatal(err)
	}
	acquire(b, "b", "b")
}
