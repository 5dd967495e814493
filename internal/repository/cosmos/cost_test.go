package cosmos_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/repository"
	"github.com/energydatahub/messagehub/internal/repository/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// partitionAudit remembers every data-plane query sent without a partition
// key: a cross-partition query.
type partitionAudit struct {
	next *http.Client

	mu    sync.Mutex
	cross []string
}

func (a *partitionAudit) Do(req *http.Request) (*http.Response, error) {
	if cosmos.Classify(req) == cosmos.OpQuery && req.Header.Get("x-ms-documentdb-partitionkey") == "" {
		a.mu.Lock()
		a.cross = append(a.cross, req.URL.Path)
		a.mu.Unlock()
	}
	return a.next.Do(req)
}

type costEnv struct {
	store *cosmos.Store
	repo  *repository.Repository
	audit *partitionAudit
}

func newCostEnv(t *testing.T, opts repository.Options) *costEnv {
	t.Helper()
	audit := &partitionAudit{next: cosmostest.NewHTTPClient()}
	// Unthrottled: a 429's retry would count as a request.
	store := open(t, cosmos.Config{Transport: audit, Throughput: "manual=1000000"})
	repo := repository.New(store, opts, nil)
	t.Cleanup(func() {
		repo.Close()
		_ = store.Close()
	})
	return &costEnv{store: store, repo: repo, audit: audit}
}

// measure returns the data-plane requests op makes, by operation and in all.
func (e *costEnv) measure(t *testing.T, op func()) (map[string]cosmos.OpStats, cosmos.OpStats) {
	t.Helper()
	before := e.store.Meter().Snapshot()
	op()
	after := e.store.Meter().Snapshot()
	diff := map[string]cosmos.OpStats{}
	for k, v := range after {
		b := before[k]
		d := cosmos.OpStats{
			Requests: v.Requests - b.Requests, RequestBytes: v.RequestBytes - b.RequestBytes,
			ResponseBytes: v.ResponseBytes - b.ResponseBytes, RequestCharge: v.RequestCharge - b.RequestCharge,
		}
		if d.Requests > 0 {
			diff[k] = d
		}
	}
	return diff, cosmos.Total(diff)
}

func notifications(n int, recipient string, weight int64) []domain.Notification {
	out := make([]domain.Notification, n)
	for i := range out {
		out[i] = domain.Notification{
			ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginTimeSeries,
			ContentType: "rsm-014", DocumentType: "rsm-014", SupportsBundling: true, Weight: weight,
		}
	}
	return out
}

// An empty Peek reads the head on the primary (for its session token) and
// queries the recipient's partition with that token: two requests.
func TestEmptyPeekCostsTwoRequests(t *testing.T) {
	e := newCostEnv(t, repository.Options{})
	ctx := context.Background()
	// Once for the client's metadata caches, then measured.
	if _, err := e.repo.Peek(ctx, uuid.NewString(), domain.GroupAll, ""); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{uuid.NewString(), seeded(t, e)} {
		byOp, total := e.measure(t, func() {
			b, err := e.repo.Peek(ctx, r, domain.GroupAll, "")
			if err != nil || b != nil {
				t.Fatalf("peek: %v %v", b, err)
			}
		})
		if total.Requests != 2 {
			t.Fatalf("empty peek cost %d requests: %v", total.Requests, byOp)
		}
	}
}

// seeded returns a recipient that had notifications, all dequeued.
func seeded(t *testing.T, e *costEnv) string {
	t.Helper()
	ctx := context.Background()
	r := uuid.NewString()
	if _, err := e.repo.Save(ctx, notifications(3, r, 1)); err != nil {
		t.Fatal(err)
	}
	b, err := e.repo.Peek(ctx, r, domain.GroupAll, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.repo.Dequeue(ctx, r, b.ID); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSaveCostGrowsWithNOver100(t *testing.T) {
	e := newCostEnv(t, repository.Options{})
	ctx := context.Background()
	seeded(t, e) // warm the metadata caches
	for _, n := range []int{1, 100, 1_000, 10_000} {
		r := uuid.NewString()
		byOp, total := e.measure(t, func() {
			if _, err := e.repo.Save(ctx, notifications(n, r, 1)); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("save of %5d: %3d requests, %7d bytes sent, %v", n, total.Requests, total.RequestBytes, byOp)
		// Fixed steps (load, commit record, reserve, commit, finalize) plus
		// one id document write and one id query per bucket touched (16).
		if limit := int64(n/100 + 45); total.Requests > limit {
			t.Fatalf("save of %d cost %d requests, want at most %d", n, total.Requests, limit)
		}
		// Single creates: one id document per bucket, the commit record and
		// the recipient's registry entry. Notifications travel in batches.
		if creates := byOp[cosmos.OpCreate].Requests; creates > 16+2 {
			t.Fatalf("save of %d made %d single creates: notifications are not batched", n, creates)
		}
	}
	if len(e.audit.cross) > 0 {
		t.Fatalf("cross-partition queries: %v", e.audit.cross)
	}
}

func TestDequeueCostsThreeRequestsAndPeekReadsDrawersOnce(t *testing.T) {
	e := newCostEnv(t, repository.Options{})
	ctx := context.Background()
	r := uuid.NewString()
	for range 6 {
		if _, err := e.repo.Save(ctx, notifications(10_000, r, 1)); err != nil {
			t.Fatal(err)
		}
	}
	var b *domain.Bundle
	byOp, peek := e.measure(t, func() {
		var err error
		if b, err = e.repo.Peek(ctx, r, domain.GroupAll, ""); err != nil {
			t.Fatal(err)
		}
	})
	if len(b.NotificationIDs) != domain.DefaultMaxBundleWeight {
		t.Fatalf("bundle of %d", len(b.NotificationIDs))
	}
	t.Logf("peek of 51,200: %d requests, %d bytes received, %v", peek.Requests, peek.ResponseBytes, byOp)
	// One load (a primary read and a query), reads of six drawers (the
	// first read is small, then the rest in parallel), one batch to store
	// the bundle.
	if peek.Requests > 2+7+1 {
		t.Fatalf("peek cost %d requests: %v", peek.Requests, byOp)
	}
	byOp, deq := e.measure(t, func() {
		if err := e.repo.Dequeue(ctx, r, b.ID); err != nil {
			t.Fatal(err)
		}
	})
	if deq.Requests != 3 {
		t.Fatalf("dequeue cost %d requests: %v", deq.Requests, byOp)
	}
	if len(e.audit.cross) > 0 {
		t.Fatalf("cross-partition queries: %v", e.audit.cross)
	}
}

// TestModeledCostPerNotification prices save + peek + dequeue of bundles of
// 1,000 with the documented RU model and checks it stays within 1 RU per
// notification. See docs/cosmos.md.
func TestModeledCostPerNotification(t *testing.T) {
	e := newCostEnv(t, repository.Options{MaxBundleWeight: 1000})
	ctx := context.Background()
	seeded(t, e)
	r := uuid.NewString()
	const n = 10_000
	var all []map[string]cosmos.OpStats
	save, _ := e.measure(t, func() {
		if _, err := e.repo.Save(ctx, notifications(n, r, 1)); err != nil {
			t.Fatal(err)
		}
	})
	all = append(all, save)
	drain, _ := e.measure(t, func() {
		for {
			b, err := e.repo.Peek(ctx, r, domain.GroupAll, "")
			if err != nil {
				t.Fatal(err)
			}
			if b == nil {
				return
			}
			if err := e.repo.Dequeue(ctx, r, b.ID); err != nil {
				t.Fatal(err)
			}
		}
	})
	all = append(all, drain)
	ru := 0.0
	for _, byOp := range all {
		ru += modeledRU(byOp)
	}
	t.Logf("save %v", save)
	t.Logf("drain %v", drain)
	t.Logf("modeled cost: %.0f RU for %d notifications = %.3f RU per notification", ru, n, ru/n)
	if ru/n > 1 {
		t.Fatalf("modeled cost %.3f RU per notification, want ≤ 1", ru/n)
	}
}

// modeledRU prices requests with the RU model of docs/cosmos.md: a point
// read 1 RU per KB read, a write 5.5 RU per KB written, a query 2.5 RU per
// page plus 1 RU per KB returned; every request costs at least its 1 KB.
func modeledRU(byOp map[string]cosmos.OpStats) float64 {
	kb := func(b int64) float64 { return float64(b) / 1024 }
	ru := 0.0
	for op, s := range byOp {
		n := float64(s.Requests)
		switch op {
		case cosmos.OpRead:
			ru += max(kb(s.ResponseBytes), n) * 1
		case cosmos.OpQuery:
			ru += n*2.5 + kb(s.ResponseBytes)
		case cosmos.OpMetadata:
		default: // writes and batches
			ru += max(kb(s.RequestBytes), n) * 5.5
		}
	}
	return ru
}

// Re-saving stored notifications finds them all with a few requests: each
// save's commit record is read once, not once per id.
func TestResavingDuplicatesCostsFewReads(t *testing.T) {
	e := newCostEnv(t, repository.Options{})
	ctx := context.Background()
	ns := notifications(1_000, uuid.NewString(), 1)
	if _, err := e.repo.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	byOp, total := e.measure(t, func() {
		res, err := e.repo.Save(ctx, ns)
		if err != nil || res.Duplicates != len(ns) {
			t.Fatalf("resave: %+v %v", res, err)
		}
	})
	t.Logf("resave of 1,000 duplicates: %d requests %v", total.Requests, byOp)
	if reads := byOp[cosmos.OpRead].Requests; reads > 5 {
		t.Fatalf("resave read %d documents", reads)
	}
}
