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
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// slowTransport holds every request for delay before sending it, as a
// real account's round trip would, and records how many transactional
// batches on the recipients container (reservations, finalizes) were in
// flight at most.
type slowTransport struct {
	next     *http.Client
	delay    time.Duration
	inFlight atomic.Int64
	mu       sync.Mutex
	most     int64
}

func (t *slowTransport) Do(req *http.Request) (*http.Response, error) {
	if req.Header.Get("x-ms-cosmos-is-batch-request") != "" && strings.Contains(req.URL.Path, "/colls/recipients/") {
		n := t.inFlight.Add(1)
		defer t.inFlight.Add(-1)
		t.mu.Lock()
		t.most = max(t.most, n)
		t.mu.Unlock()
	}
	time.Sleep(t.delay)
	return t.next.Do(req)
}

func (t *slowTransport) peak() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.most
}

// spread is n notifications over recipients recipients, n/recipients each.
func spread(n, recipients int) []domain.Notification {
	var out []domain.Notification
	for range recipients {
		out = append(out, notifications(n/recipients, uuid.NewString(), 1)...)
	}
	return out
}

// A save over many recipients reserves them side by side: its reserve
// batches overlap instead of queueing one recipient behind the other.
func TestASaveReservesItsRecipientsSideBySide(t *testing.T) {
	slow := &slowTransport{next: cosmostest.NewHTTPClient(), delay: 5 * time.Millisecond}
	s := open(t, cosmos.Config{Transport: slow, Throughput: "manual=1000000"})
	repo := hub.New(s, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	before := slow.peak()
	if _, err := repo.Save(context.Background(), spread(1_000, 100)); err != nil {
		t.Fatal(err)
	}
	if got := slow.peak(); got < 4 {
		t.Fatalf("at most %d batches on recipients in flight at once during a save over 100 recipients (before it: %d)", got, before)
	}
}

// BenchmarkSaveOf1000Over100RecipientsAt5msPerRequest times a save of 1,000
// notifications over 100 recipients when every request takes 5 ms more, as
// an account in the same region would (docs/cosmos.md, "Latency").
func BenchmarkSaveOf1000Over100RecipientsAt5msPerRequest(b *testing.B) {
	slow := &slowTransport{next: cosmostest.NewHTTPClient(), delay: 5 * time.Millisecond}
	s := open(b, cosmos.Config{Transport: slow, Throughput: "manual=1000000"})
	repo := hub.New(s, hub.Options{PlanParallel: cosmos.Parallel}, nil) // as the binary composes it
	b.Cleanup(repo.Close)
	b.ResetTimer()
	for b.Loop() {
		if _, err := repo.Save(context.Background(), spread(1_000, 100)); err != nil {
			b.Fatal(err)
		}
	}
}
