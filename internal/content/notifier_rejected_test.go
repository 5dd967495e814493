package content_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
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
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
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
	srv := cosmostest.Start(t)
	s, err := cosmos.Open(within(t, time.Minute), cosmos.Config{Endpoint: srv.Endpoint, Key: srv.Key, Provision: true,
		Database: cosmostest.UniqueID("db"), Transport: cosmostest.NewHTTPClient()})
	if err != nil {
		t.Fatal(err)
	}
	repo := hub.New(s, hub.Options{Notices: func(domain.Origin) bool { return true }}, nil)
	t.Cleanup(func() { repo.Close(); _ = s.Close() })
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
	notifier := content.StartNotifier(content.NotifierOptions{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: client},
		Notices:   outbox,
		Bundle:    repo.NoticedBundle,
		Clock:     clock,
		Logger:    slog.New(slog.NewJSONHandler(logs, nil)),
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
	for start := clock.Now(); clock.Now().Sub(start) < 10*time.Minute; {
		select {
		case w := <-clock.waits:
			if w.d > time.Minute {
				t.Fatalf("a wait of %v; want none longer than RetryMax (1 min)", w.d)
			}
			clock.fire(w)
		case <-ctx.Done():
			t.Fatal("the notifier stopped waiting")
		}
	}
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
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var l struct{ Level, Msg, Bundle, Error string }
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if l.Level == "WARN" && l.Bundle != "" {
			warned[l.Bundle]++
			if strings.Contains(l.Msg, "held back") && strings.Contains(l.Error, "ResourceExhausted") {
				heldBack[l.Bundle]++
			}
		}
	}
	for _, id := range refused {
		if heldBack[id] != 1 || warned[id] > 2 {
			t.Errorf("a refused notice has %d warnings in the log, %d of them saying it is held back and why; want one of those, and at most one more",
				warned[id], heldBack[id])
		}
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
	for id, n := range told {
		if n != 1 {
			t.Errorf("bundle %s told %d times", id, n)
		}
	}
	if n, _, err := outbox.NoticeBacklog(context.Background()); err != nil || n != 0 {
		t.Fatalf("%d notices left after delivery (%v)", n, err)
	}
}
