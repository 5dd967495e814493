package content_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
)

// A notice its domain always refuses (here RESOURCE_EXHAUSTED, as from a
// provider whose server takes less than the bundle) while it takes the
// others does not hold the domain's other notices up: they are told while
// the refused one is tried again on a backoff of its own, and kept; once
// the domain takes it, it is told too. On the embedded store.
func TestANoticeItsDomainRefusesDoesNotHoldUpTheDomain(t *testing.T) {
	outbox, repo := openWithNotices(t, hub.Options{Notices: func(domain.Origin) bool { return true }})
	checkRefusedNotice(t, outbox, repo)
}

// The same on Cosmos DB.
func TestANoticeItsDomainRefusesDoesNotHoldUpTheDomainOnCosmos(t *testing.T) {
	s, repo := openCosmosWithNotices(t)
	checkRefusedNotice(t, s, repo)
}

// checkRefusedNotice dequeues two notices the domain refuses, the oldest
// and the one after it (so that every look meets them first), and three it
// takes.
func checkRefusedNotice(t *testing.T, outbox store.Outbox, repo *hub.Hub) {
	t.Helper()
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer { return contenttest.Answer{} })
	ctx := within(t, 2*time.Minute)
	bundles := dequeueAll(ctx, t, repo, slices.Repeat([]domain.Origin{domain.OriginTimeSeries}, 5)...)[domain.OriginTimeSeries]
	refused := bundles[:2]
	for _, id := range refused {
		provider.RejectDequeued(id, status.Error(codes.ResourceExhausted, "grpc: received message larger than max (test)"))
	}
	clock := newFakeClock()
	client := &clockedProvider{BundleContentProviderClient: provider.Client(t), clock: clock, calls: map[string][]time.Time{}}
	logs := &lockedBuffer{}
	metrics := &heldNotices{}
	notifier := content.StartNotifier(content.NotifierOptions{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: client},
		Notices:   outbox,
		Bundle:    repo.NoticedBundle,
		Clock:     clock,
		Logger:    slog.New(slog.NewJSONHandler(logs, nil)),
		Metrics:   metrics,
	})
	defer notifier.Close()

	told := map[string]int{}
	for fired := 0; len(told) < len(bundles)-len(refused); {
		select {
		case b := <-provider.Told():
			told[b.GetId()]++
		case w := <-clock.waits:
			if fired++; fired > 20 {
				t.Fatalf("%d of the %d notices the domain takes untold after %d waits, behind %d it refuses",
					len(bundles)-len(refused)-len(told), len(bundles)-len(refused), fired, len(refused))
			}
			clock.fire(w)
		case <-ctx.Done():
			t.Fatal("the notices the domain takes were never told")
		}
	}
	// Ten minutes more: each refused notice backs off on its own, from
	// 1 s doubling up to a minute: some fifteen calls, not one a look.
	clock.fireFor(ctx, t, 10*time.Minute)
	client.mu.Lock()
	for _, id := range refused {
		if n := len(client.calls[id]); n < 5 || n > 25 {
			t.Errorf("a refused notice was sent %d times in ten minutes; want it tried again on its own backoff (5 to 25)", n)
		}
	}
	client.mu.Unlock()
	if n, _, err := outbox.NoticeBacklog(ctx); err != nil || n != len(refused) {
		t.Fatalf("%d notices kept (%v); want the %d refused ones", n, err, len(refused))
	}
	// The log says which notices are held back and why, once each, not
	// once a look.
	warned, heldBack := map[string]int{}, map[string]int{}
	for _, l := range bundleWarnings(t, logs) {
		warned[l.Bundle]++
		if strings.Contains(l.Msg, "held back") && strings.Contains(l.Error, "ResourceExhausted") {
			heldBack[l.Bundle]++
		}
	}
	for _, id := range refused {
		if heldBack[id] != 1 || warned[id] > 2 {
			t.Errorf("a refused notice has %d warnings in the log, %d of them saying it is held back and why; want one of those, and at most one more",
				warned[id], heldBack[id])
		}
	}

	if held := metrics.count("DOMAIN_TIME_SERIES", "refused"); held != int64(len(refused)) {
		t.Errorf("%d notices counted as held back for being refused; want %d", held, len(refused))
	}

	for _, id := range refused {
		provider.RejectDequeued(id, nil)
	}
	for len(told) < len(bundles) {
		select {
		case b := <-provider.Told():
			told[b.GetId()]++
		case w := <-clock.waits:
			clock.fire(w)
		case <-ctx.Done():
			t.Fatal("the notices the domain took at last were never told")
		}
	}
	notifier.Close()
	if held := metrics.count("DOMAIN_TIME_SERIES", "refused"); held != 0 {
		t.Errorf("%d notices counted as held back once every one was told", held)
	}
	for id, n := range told {
		if n != 1 {
			t.Errorf("bundle %s told %d times", id, n)
		}
	}
	if n, _, err := outbox.NoticeBacklog(context.Background()); err != nil || n != 0 {
		t.Fatalf("%d notices left after delivery (%v)", n, err)
	}
}

// heldNotices counts the notices a notifier holds back, by domain and
// reason, as the telemetry gauge would.
type heldNotices struct {
	mu   sync.Mutex
	held map[[2]string]int64
}

func (h *heldNotices) RecordNoticesHeld(_ context.Context, origin, reason string, delta int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil {
		h.held = map[[2]string]int64{}
	}
	h.held[[2]string{origin, reason}] += delta
}

func (h *heldNotices) count(origin, reason string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held[[2]string{origin, reason}]
}

func (h *heldNotices) total() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n int64
	for _, v := range h.held {
		n += v
	}
	return n
}

// A domain that is down (every call fails) is still backed off as a
// whole: its looks thin out, doubling up to RetryMax, each asks it at most
// twice (its oldest notice, and once that has failed before, one more, to
// learn whether the domain takes any), no notice is held back, and once it
// is up again it hears of its dequeues in their order.
func TestADomainThatIsDownIsBackedOffAsAWholeAndToldInOrder(t *testing.T) {
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer { return contenttest.Answer{} })
	provider.FailDequeued(1 << 30)
	outbox, repo := openWithNotices(t, hub.Options{Notices: func(domain.Origin) bool { return true }})
	ctx := within(t, time.Minute)
	bundles := dequeueAll(ctx, t, repo, slices.Repeat([]domain.Origin{domain.OriginTimeSeries}, 5)...)[domain.OriginTimeSeries]
	notices := &countingNotices{Outbox: outbox}
	client := &countingProvider{BundleContentProviderClient: provider.Client(t)}
	metrics := &heldNotices{}
	clock := newFakeClock()
	notifier := content.StartNotifier(content.NotifierOptions{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: client},
		Notices:   notices,
		Bundle:    repo.NoticedBundle,
		Clock:     clock,
		Metrics:   metrics,
	})
	defer notifier.Close()

	var last time.Duration
	for start := clock.Now(); clock.Now().Sub(start) < 10*time.Minute; {
		select {
		case w := <-clock.waits:
			if w.d < last || w.d > time.Minute {
				t.Fatalf("a wait of %v after one of %v; want the domain's backoff, doubling up to a minute", w.d, last)
			}
			last = w.d
			clock.fire(w)
		case <-ctx.Done():
			t.Fatal("the notifier stopped waiting")
		}
	}
	looks, calls := notices.looks.Load(), client.calls.Load()
	if looks > 20 || calls > 2*looks {
		t.Fatalf("%d looks and %d calls in ten minutes of a domain down; want ≤ 20 looks (1 s doubling to a minute), ≤ 2 calls a look", looks, calls)
	}
	if held := metrics.total(); held != 0 {
		t.Fatalf("%d notices held back while the domain is down; want none", held)
	}

	provider.FailDequeued(0)
	var told []string
	for len(told) < len(bundles) {
		select {
		case b := <-provider.Told():
			told = append(told, b.GetId())
		case w := <-clock.waits:
			clock.fire(w)
		case <-ctx.Done():
			t.Fatal("the domain that is up again was never told of its dequeues")
		}
	}
	if !slices.Equal(told, bundles) {
		t.Fatalf("told %v; want the dequeues' order %v", told, bundles)
	}
}
