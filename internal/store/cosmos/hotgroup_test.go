package cosmos_test

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
)

// Two Saves for different recipients share a group, and one recipient's
// partition cannot be read (unavailable past the retries): only that
// recipient's Save fails.
func TestAnUnavailableRecipientFailsOnlyItsOwnSaveInASharedGroup(t *testing.T) {
	f := newFaulty()
	s := open(t, cosmos.Config{Transport: f, Throughput: "manual=1000000"})
	repo := hub.New(s, hub.Options{PlanParallel: cosmos.Parallel, ConcurrentGroups: 8}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	hot, other, gate := uuid.NewString(), uuid.NewString(), uuid.NewString()

	// A first Save naming all three is held in flight on its first request
	// for gate, once its load of hot was sent, so that the Saves for hot and
	// for other both wait for it and then form one group. From the release
	// on, hot's partition cannot be read.
	var (
		mu                sync.Mutex
		failing           bool
		gateHit, hotSeen  = make(chan struct{}), make(chan struct{})
		gateOnce, hotOnce sync.Once
		release           = make(chan struct{})
	)
	f.set(func(req *http.Request) int {
		pk := req.Header.Get("x-ms-documentdb-partitionkey")
		switch {
		case strings.Contains(pk, gate):
			first := false
			gateOnce.Do(func() { first = true; close(gateHit) })
			if first {
				<-release
			}
		case strings.Contains(pk, hot):
			hotOnce.Do(func() { close(hotSeen) })
			mu.Lock()
			defer mu.Unlock()
			read := req.Method == http.MethodGet || strings.HasPrefix(req.Header.Get("Content-Type"), "application/query+json")
			if failing && toContainer(req, "recipients") && read {
				return http.StatusServiceUnavailable
			}
		}
		return 0
	})

	first := append(append(notifications(1, hot, 1), notifications(1, other, 1)...), notifications(1, gate, 1)...)
	firstSaved := make(chan error, 1)
	go func() { _, err := repo.Save(ctx, first); firstSaved <- err }()
	<-gateHit
	<-hotSeen
	hotSaved, otherSaved := make(chan error, 1), make(chan error, 1)
	go func() { _, err := repo.Save(ctx, notifications(10, hot, 1)); hotSaved <- err }()
	go func() { _, err := repo.Save(ctx, notifications(10, other, 1)); otherSaved <- err }()
	// Both wait for the first Save's group (the minute is only against a
	// hang).
	for deadline := time.Now().Add(time.Minute); repo.QueuedSaves() < 2; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("%d Saves wait for the held group after a minute, want 2", repo.QueuedSaves())
		}
	}
	mu.Lock()
	failing = true
	mu.Unlock()
	close(release)
	// The first Save names hot too: it commits or is unavailable.
	if err := <-firstSaved; err != nil && !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("the first Save: %v", err)
	}
	if err := <-hotSaved; !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("the Save for the unavailable recipient: %v, want unavailable", err)
	}
	if err := <-otherSaved; err != nil {
		t.Fatalf("the Save for another recipient in the same group: %v", err)
	}
}
