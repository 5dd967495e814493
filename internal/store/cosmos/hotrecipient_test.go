package cosmos_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store/storetest"
)

// The binary writes save groups side by side on Cosmos DB: the algorithm
// keeps its promises with CommitSaves calls that overlap.
func TestContractWithConcurrentGroups(t *testing.T) {
	storetest.RunConcurrentGroups(t, openChain)
}

// One recipient's partition answers 429 for seconds (a hot or throttled
// recipient) while another recipient's Save arrives on the same instance:
// with save groups in flight side by side, as the binary runs the hub on
// Cosmos DB, that Save commits meanwhile instead of queueing behind the
// throttled group.
func TestAThrottledRecipientHoldsUpOnlyItsOwnSaves(t *testing.T) {
	f, repo := hubWithFaults(t)
	ctx := context.Background()
	hot, other := uuid.NewString(), uuid.NewString()

	// The hot partition answers 429 for at least throttle and until the
	// other Save has returned; giveUp ends it regardless, so that a hub
	// whose other Save waits for the hot one fails the test instead of
	// hanging (it is below the hub's 30 s bound on a group).
	const throttle, giveUp = 5 * time.Second, 20 * time.Second
	var (
		refused   atomic.Int64
		gaveUp    atomic.Bool
		first     sync.Once
		hit       = make(chan struct{})
		otherDone = make(chan struct{})
		start     = time.Now()
	)
	f.set(func(req *http.Request) int {
		if !strings.Contains(req.Header.Get("x-ms-documentdb-partitionkey"), hot) {
			return 0
		}
		since := time.Since(start)
		select {
		case <-otherDone:
			if since >= throttle {
				return 0
			}
		default:
			if since >= giveUp {
				gaveUp.Store(true)
				return 0
			}
		}
		refused.Add(1)
		first.Do(func() { close(hit) })
		return http.StatusTooManyRequests
	})

	hotSaved := make(chan error, 1)
	go func() {
		_, err := repo.Save(ctx, notifications(10, hot, 1))
		hotSaved <- err
	}()
	<-hit // the hot Save's group is in flight, held by 429s
	began := time.Now()
	if _, err := repo.Save(ctx, notifications(10, other, 1)); err != nil {
		t.Fatal(err)
	}
	otherTook := time.Since(began)
	select {
	case err := <-hotSaved:
		t.Fatalf("the throttled Save ended (%v) before the other recipient's Save did", err)
	default:
	}
	if gaveUp.Load() {
		t.Fatal("the other recipient's Save waited for the throttled one")
	}
	close(otherDone)
	if err := <-hotSaved; err != nil {
		t.Fatal(err)
	}
	hotTook := time.Since(start)
	t.Logf("another recipient's Save: %v while the hot one was throttled; the hot one: %v (%d requests answered 429)",
		otherTook.Round(time.Millisecond), hotTook.Round(time.Millisecond), refused.Load())
	for _, r := range []string{hot, other} {
		if b, err := repo.Peek(ctx, r, domain.GroupAll, ""); err != nil || b == nil || len(b.NotificationIDs) != 10 {
			t.Fatalf("peek of %s after the saves: %v, %v", r, b, err)
		}
	}
}
