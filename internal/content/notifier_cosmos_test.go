package content_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// gatedProvider is one instance's client of a domain: it records each
// BundleDequeued call, says when the first one starts, and holds every call
// until the test opens the gate.
type gatedProvider struct {
	messagehubv1.BundleContentProviderClient
	gate    <-chan struct{}
	started chan struct{} // closed at the first call
	once    sync.Once
	mu      sync.Mutex
	calls   map[string]int // bundle id → calls
}

func (g *gatedProvider) BundleDequeued(ctx context.Context, in *messagehubv1.BundleDequeuedRequest, opts ...grpc.CallOption) (*messagehubv1.BundleDequeuedResponse, error) {
	g.mu.Lock()
	g.calls[in.GetBundle().GetId()]++
	g.mu.Unlock()
	g.once.Do(func() { close(g.started) })
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.BundleContentProviderClient.BundleDequeued(ctx, in, opts...)
}

// Two instances over one Cosmos DB store, each with its notifier, tell the
// domain of each dequeue once: the instance that dequeued tells it at once,
// and the other leaves it alone while it is younger than the grace. Both
// notifiers have a call in flight before any notice is removed, so an
// instance that took the other's notices would be caught calling for them.
func TestTwoInstancesTellEachDequeueOnce(t *testing.T) {
	srv := cosmostest.Start(t)
	db := cosmostest.UniqueID("db")
	domainProvider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer { return contenttest.Answer{} })
	gate := make(chan struct{})
	ctx := within(t, 2*time.Minute)
	const instances, dequeues = 2, 6
	repos := make([]*hub.Hub, instances)
	clients := make([]*gatedProvider, instances)
	stores := make([]*cosmos.Store, instances)
	var notifiers []*content.Notifier
	for i := range instances {
		s, err := cosmos.Open(ctx, cosmos.Config{Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: cosmostest.NewHTTPClient()})
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
		signal := content.NewNoticeSignal()
		repos[i] = hub.New(s, hub.Options{Notices: func(domain.Origin) bool { return true }, OnNotice: signal.Send}, nil)
		t.Cleanup(func() { repos[i].Close(); _ = s.Close() })
		clients[i] = &gatedProvider{BundleContentProviderClient: domainProvider.Client(t), gate: gate, started: make(chan struct{}), calls: map[string]int{}}
		notifiers = append(notifiers, content.StartNotifier(content.NotifierOptions{
			Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginCharges: clients[i]},
			Notices:   s,
			Bundle:    repos[i].NoticedBundle,
			Signal:    signal,
			Grace:     time.Hour, // nothing here is overdue
		}))
	}
	defer func() {
		for _, n := range notifiers {
			n.Close()
		}
	}()
	owner := map[string]int{} // bundle id → the instance that dequeued it
	for i, r := range repos {
		for range dequeues {
			id := cycle(ctx, t, r)
			owner[id] = i
		}
	}
	for i, c := range clients {
		select {
		case <-c.started:
		case <-ctx.Done():
			t.Fatalf("instance %d never told the domain of its dequeues", i)
		}
	}
	close(gate)
	for range owner {
		select {
		case <-domainProvider.Told():
		case <-ctx.Done():
			t.Fatal("not every dequeue was told")
		}
	}
	for _, n := range notifiers {
		n.Close() // finishes what is in flight: the counts are final
	}
	for i, s := range stores {
		// An instance reads its own removals; the other's may lag.
		left, err := s.Notices(context.Background(), domain.Origins, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range left {
			if owner[n.BundleID] == i {
				t.Errorf("instance %d left its notice of %s after delivery", i, n.BundleID)
			}
		}
	}
	for id, i := range owner {
		for j, c := range clients {
			want := 0
			if j == i {
				want = 1
			}
			if got := c.calls[id]; got != want {
				t.Errorf("bundle dequeued on instance %d: %d calls from instance %d, want %d", i, got, j, want)
			}
		}
	}
}

// cycle saves a notification of the charges domain for a new recipient,
// peeks and dequeues it, and returns the bundle's id.
func cycle(ctx context.Context, t *testing.T, repo *hub.Hub) string {
	t.Helper()
	recipient := uuid.NewString()
	n := domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges, ContentType: "c", DocumentType: "c", Weight: 1}
	if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
		t.Fatal(err)
	}
	b, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("peek: %v, %v", b, err)
	}
	if err := repo.Dequeue(ctx, recipient, b.ID); err != nil {
		t.Fatal(err)
	}
	return b.ID
}
