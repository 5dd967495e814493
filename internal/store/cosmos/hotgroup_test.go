package cosmos_test

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"slices"
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
// recipient's Save fails, nothing of it stored, and its resend stores it
// once.
func TestAnUnavailableRecipientFailsOnlyItsOwnSaveInASharedGroup(t *testing.T) {
	saveBesideAFailingRecipient(t, func(read bool) int {
		if read {
			return http.StatusServiceUnavailable
		}
		return 0
	})
}

// Two Saves for different recipients share a group, and one recipient's
// partition answers 429 to its reads for longer than the group's time:
// the other recipient's Save is stored (visible, peeked once), the
// throttled one fails UNAVAILABLE with nothing of it visible, and its
// resend once the partition answers again stores it once.
func TestARecipientThrottledPastTheGroupsDeadlineFailsOnlyItsOwnSave(t *testing.T) {
	saveBesideAFailingRecipient(t, func(read bool) int {
		if read {
			return http.StatusTooManyRequests
		}
		return 0
	})
}

// Two Saves for different recipients share a group, and one recipient's
// partition refuses its writes (unavailable past the retries) once the
// group's loads are done: only that recipient's Save fails, nothing of it
// stored, and its resend stores it once.
func TestARecipientWhoseWritesFailFailsOnlyItsOwnSaveInASharedGroup(t *testing.T) {
	loaded := false // fault runs under the transport's lock
	saveBesideAFailingRecipient(t, func(read bool) int {
		if read {
			loaded = true
			return 0
		}
		if loaded {
			return http.StatusServiceUnavailable
		}
		return 0
	})
}

// hubWithFaults is a hub as the binary runs it on Cosmos DB (groups written
// side by side), over a transport that injects faults; a 429 asks for 50 ms.
func hubWithFaults(t *testing.T) (*faulty, *hub.Hub) {
	f := newFaulty()
	f.retryAfter.Store(50)
	s := open(t, cosmos.Config{Transport: f, Throughput: "manual=1000000"})
	repo := hub.New(s, hub.Options{PlanParallel: cosmos.Parallel, ConcurrentGroups: 8}, nil)
	t.Cleanup(repo.Close)
	return f, repo
}

// saveBesideAFailingRecipient saves 10 notifications for a recipient and
// 10 for another in one group, while the first one's requests to the
// recipients container are answered with fault (0: the server answers), and
// checks that only its Save failed, UNAVAILABLE, and left nothing visible:
// the other's is peeked once, and the failed one's resend, once the fault
// is gone, stores it once.
func saveBesideAFailingRecipient(t *testing.T, fault func(read bool) int) {
	f, repo := hubWithFaults(t)
	ctx := context.Background()
	hot, other, gate := uuid.NewString(), uuid.NewString(), uuid.NewString()

	// A first Save naming other and gate is held in flight on its first
	// request for gate, so that the Save for hot (which names other too)
	// and the one for other both wait for it and then form one group. From
	// its release until the failing Save has been answered, fault answers
	// hot's requests to the recipients container. Hot is new to the
	// instance, so its Save loads it (an instance plans on the catalog it
	// last wrote itself without a read).
	var (
		mu       sync.Mutex
		failing  bool
		gateHit  = make(chan struct{})
		gateOnce sync.Once
		release  = make(chan struct{})
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
			read := req.Method == http.MethodGet || strings.HasPrefix(req.Header.Get("Content-Type"), "application/query+json")
			mu.Lock()
			defer mu.Unlock()
			if failing && toContainer(req, "recipients") {
				return fault(read)
			}
		}
		return 0
	})
	setFailing := func(on bool) {
		mu.Lock()
		failing = on
		mu.Unlock()
	}

	first := append(notifications(1, other, 1), notifications(1, gate, 1)...)
	firstSaved := make(chan error, 1)
	go func() { _, err := repo.Save(ctx, first); firstSaved <- err }()
	<-gateHit
	hotSave, otherSave := append(notifications(10, hot, 1), notifications(1, other, 1)...), notifications(10, other, 1)
	hotSaved, otherSaved := make(chan error, 1), make(chan error, 1)
	go func() { _, err := repo.Save(ctx, hotSave); hotSaved <- err }()
	go func() { _, err := repo.Save(ctx, otherSave); otherSaved <- err }()
	for deadline := time.Now().Add(time.Minute); repo.QueuedSaves() < 2; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("%d Saves wait for the held group after a minute, want 2", repo.QueuedSaves())
		}
	}
	setFailing(true)
	close(release)
	if err := <-firstSaved; err != nil {
		t.Fatalf("the first Save: %v", err)
	}
	hotErr := <-hotSaved
	setFailing(false)
	otherErr := <-otherSaved
	if otherErr != nil {
		t.Fatalf("the Save for a healthy recipient in the failing one's group: %v", otherErr)
	}
	if !errors.Is(hotErr, domain.ErrUnavailable) {
		t.Fatalf("the Save for the failing recipient: %v, want unavailable", hotErr)
	}
	t.Logf("the failing recipient's Save: %v", hotErr)

	if got, want := drainAll(t, repo, other), ids(append(first[:1:1], otherSave...)); !slices.Equal(got, want) {
		t.Fatalf("%s holds %v, want %v", other, got, want)
	}
	if got := drainAll(t, repo, hot); len(got) != 0 {
		t.Fatalf("the failed Save shows: %s holds %v, want nothing", hot, got)
	}
	res, err := repo.Save(ctx, hotSave)
	if err != nil || res.Saved != len(hotSave) || res.Duplicates != 0 {
		t.Fatalf("the resend of the failed Save: %+v, %v; want all %d saved", res, err, len(hotSave))
	}
	if got, want := drainAll(t, repo, hot), ids(hotSave[:10]); !slices.Equal(got, want) {
		t.Fatalf("after the resend %s holds %v, want %v", hot, got, want)
	}
	if got, want := drainAll(t, repo, other), ids(hotSave[10:]); !slices.Equal(got, want) {
		t.Fatalf("after the resend %s holds %v, want %v", other, got, want)
	}
}
