package cosmos_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// partitionAudit remembers every data-plane query sent without a partition
// key: a cross-partition query.
// It also sums the charges the server reports by container.
type partitionAudit struct {
	next *http.Client

	mu      sync.Mutex
	cross   []string
	charged map[string]float64 // container → RU
	queries map[string]int     // container → queries sent
}

func (a *partitionAudit) Do(req *http.Request) (*http.Response, error) {
	if cosmos.Classify(req) == cosmos.OpQuery && req.Header.Get("x-ms-documentdb-partitionkey") == "" {
		a.mu.Lock()
		a.cross = append(a.cross, req.URL.Path)
		a.mu.Unlock()
	}
	resp, err := a.next.Do(req)
	if parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/"); err == nil && len(parts) >= 4 && parts[2] == "colls" {
		ru, _ := strconv.ParseFloat(resp.Header.Get("x-ms-request-charge"), 64)
		a.mu.Lock()
		if a.charged == nil {
			a.charged = map[string]float64{}
		}
		a.charged[parts[3]] += ru
		if cosmos.Classify(req) == cosmos.OpQuery {
			if a.queries == nil {
				a.queries = map[string]int{}
			}
			a.queries[parts[3]]++
		}
		a.mu.Unlock()
	}
	return resp, err
}

// queriesOf returns the queries sent so far to container.
func (a *partitionAudit) queriesOf(container string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.queries[container]
}

// byContainer returns the charges so far by container.
func (a *partitionAudit) byContainer() map[string]float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.charged)
}

type costEnv struct {
	store *cosmos.Store
	repo  *hub.Hub
	audit *partitionAudit
	db    string
}

func newCostEnv(t *testing.T, opts hub.Options) *costEnv {
	t.Helper()
	audit := &partitionAudit{next: cosmostest.NewHTTPClient()}
	// Unthrottled: a 429's retry would count as a request.
	db := cosmostest.UniqueID("db")
	store := open(t, cosmos.Config{Database: db, Transport: audit, Throughput: "manual=1000000"})
	// The first Open of a database looks across partitions for documents
	// once, before it writes the settings; the audit is of what follows.
	audit.mu.Lock()
	audit.cross = nil
	audit.mu.Unlock()
	repo := hub.New(withoutBells{store}, opts, nil)
	t.Cleanup(func() {
		repo.Close()
		_ = store.Close()
	})
	return &costEnv{store: store, repo: repo, audit: audit, db: db}
}

// another is a second instance on the environment's database.
func (e *costEnv) another(t *testing.T) *hub.Hub {
	t.Helper()
	s := open(t, cosmos.Config{Database: e.db, Throughput: "manual=1000000"})
	repo := hub.New(withoutBells{s}, hub.Options{}, nil)
	t.Cleanup(func() {
		repo.Close()
		_ = s.Close()
	})
	return repo
}

// withoutBells is the store without the bells through which instances wake
// each other's waiting peeks: the hub rings and reads them in the
// background, at moments of their own, so the cost tests measure the
// operations alone. What the bells cost is measured in bells_test.go.
type withoutBells struct{ *cosmos.Store }

func (withoutBells) RingBell(context.Context, []string) error { return nil }

func (withoutBells) ReadBells(_ context.Context, cursor string) ([]string, string, error) {
	return nil, cursor, nil
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

// An empty Peek reads the head on the primary and is answered by it when
// the recipient has no head, its head is marked idle, or this instance's
// own Dequeue drained it at that head: one request of at most 1.5 RU. A
// recipient drained through another instance is loaded in full (the head,
// then a query) until the second such look marks it idle.
func TestEmptyPeekCostsOneRequest(t *testing.T) {
	e := newCostEnv(t, hub.Options{})
	ctx := context.Background()
	// Once for the client's metadata caches, then measured.
	if _, err := e.repo.Peek(ctx, uuid.NewString(), domain.GroupAll, ""); err != nil {
		t.Fatal(err)
	}
	peek := func(name string, r string, requests int64) cosmos.OpStats {
		t.Helper()
		byOp, total := e.measure(t, func() {
			b, err := e.repo.Peek(ctx, r, domain.GroupAll, "")
			if err != nil || b != nil {
				t.Fatalf("peek: %v %v", b, err)
			}
		})
		t.Logf("COST empty peek, %s: %d requests, %.2f RU (%s)", name, total.Requests, total.RequestCharge, byOpCharges(byOp))
		if total.Requests != requests {
			t.Fatalf("empty peek (%s) cost %d requests, want %d: %v", name, total.Requests, requests, byOp)
		}
		return total
	}
	idle := []cosmos.OpStats{
		peek("a recipient never seen", uuid.NewString(), 1),
		peek("drained by this instance's Dequeue, first look", seeded(t, e), 1),
	}
	drained := seeded(t, &costEnv{store: e.store, repo: e.another(t)})
	peek("drained through another instance, first look (full load)", drained, 2)
	peek("drained through another instance, second look (full load and the idle mark)", drained, 3)
	idle = append(idle, peek("drained and marked idle", drained, 1))
	for _, total := range idle {
		if total.RequestCharge > 1.5 {
			t.Fatalf("an idle empty peek cost %.2f RU, want ≤ 1.5", total.RequestCharge)
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
	e := newCostEnv(t, hub.Options{})
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
		// one id document write and one id query per bucket touched.
		if limit := int64(n/100 + 13 + 2*cosmos.DefaultIDBuckets); total.Requests > limit {
			t.Fatalf("save of %d cost %d requests, want at most %d", n, total.Requests, limit)
		}
		// Single creates: one id document per bucket, the commit record and
		// the recipient's registry entry. Notifications travel in batches.
		if creates := byOp[cosmos.OpCreate].Requests; creates > cosmos.DefaultIDBuckets+2 {
			t.Fatalf("save of %d made %d single creates: notifications are not batched", n, creates)
		}
	}
	if len(e.audit.cross) > 0 {
		t.Fatalf("cross-partition queries: %v", e.audit.cross)
	}
}

// TestASavePlansOnTheCatalogItsInstanceLastWrote: a recipient's next save
// on the instance that made its last one is planned on the head and
// entries that save left, without a query; after another instance's save
// the plan's reserve batch fails on the head's etag, the save loads the
// recipient and goes on, and every notification is delivered once, in
// order.
func TestASavePlansOnTheCatalogItsInstanceLastWrote(t *testing.T) {
	e := newCostEnv(t, hub.Options{})
	other := e.another(t)
	ctx := context.Background()
	r := uuid.NewString()
	var want []string
	save := func(repo *hub.Hub) {
		t.Helper()
		ns := notifications(3, r, 1)
		if _, err := repo.Save(ctx, ns); err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			want = append(want, n.ID)
		}
	}
	queried := func(repo *hub.Hub) int {
		t.Helper()
		before := e.audit.queriesOf("recipients")
		save(repo)
		return e.audit.queriesOf("recipients") - before
	}
	save(e.repo)
	if n := queried(e.repo); n != 0 {
		t.Fatalf("a save after this instance's own cost %d queries of the recipient, want 0", n)
	}
	save(other)
	if n := queried(e.repo); n == 0 {
		t.Fatal("a save after another instance's was planned without loading the recipient")
	}
	if n := queried(e.repo); n != 0 {
		t.Fatalf("a save after this instance's own cost %d queries of the recipient, want 0", n)
	}
	drainExactly(t, e.repo, r, want)
}

// TestAPeekReadsThePageItsInstanceWroteByID: a Peek of the notifications
// one page of this instance's save holds reads that page by id, not by a
// query of the drawer; another instance, which did not write it, queries
// the drawer and delivers the same notifications.
func TestAPeekReadsThePageItsInstanceWroteByID(t *testing.T) {
	e := newCostEnv(t, hub.Options{})
	other := e.another(t)
	ctx := context.Background()
	for _, peeker := range []struct {
		name       string
		repo       *hub.Hub
		wrotePages bool
	}{{"the instance that saved", e.repo, true}, {"another instance", other, false}} {
		r := uuid.NewString()
		ns := notifications(5, r, 1)
		if _, err := e.repo.Save(ctx, ns); err != nil {
			t.Fatal(err)
		}
		before := e.audit.queriesOf("drawers")
		b, err := peeker.repo.Peek(ctx, r, domain.GroupAll, "")
		if err != nil || b == nil {
			t.Fatalf("%s: peek: %v %v", peeker.name, b, err)
		}
		if len(b.NotificationIDs) != len(ns) {
			t.Fatalf("%s: peeked %d notifications, want %d", peeker.name, len(b.NotificationIDs), len(ns))
		}
		for i, n := range ns {
			if b.NotificationIDs[i] != n.ID {
				t.Fatalf("%s: peeked %v, want the saved ones in order", peeker.name, b.NotificationIDs)
			}
		}
		// Only the instance that saved sends its requests through the
		// audit.
		if queried := e.audit.queriesOf("drawers") - before; peeker.wrotePages && queried != 0 {
			t.Fatalf("%s: the peek queried the drawer %d times, want its page read by id", peeker.name, queried)
		}
	}
}

func TestDequeueCostsOneRequestAndPeekReadsDrawersOnce(t *testing.T) {
	e := newCostEnv(t, hub.Options{})
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
	t.Logf("COST dequeue of a bundle of %d: %d requests, %.2f RU (%s)", len(b.NotificationIDs), deq.Requests, deq.RequestCharge, byOpCharges(byOp))
	// The batch that acknowledges it, on the versions the bundle's creation
	// left: this instance cut it (store.OwnBundle).
	if deq.Requests != 1 {
		t.Fatalf("dequeue cost %d requests: %v", deq.Requests, byOp)
	}
	if len(e.audit.cross) > 0 {
		t.Fatalf("cross-partition queries: %v", e.audit.cross)
	}
}

// TestModeledCostPerNotification measures what a notification costs, from the
// charges the test server reports (x-ms-request-charge, priced by Microsoft's
// published rules: test/cosmostest/README.md "Request charges"): saved, peeked
// and dequeued in bundles of 1,000, then removed by retention. See
// docs/cosmos.md, "Cost".
func TestModeledCostPerNotification(t *testing.T) {
	const n = 10_000
	for _, tc := range []struct {
		name        string
		saves       int
		goal, total float64 // RU per notification; 0: printed, not asserted
	}{
		{name: "one save of 10,000", saves: 1, goal: 0.5, total: 1},
		{name: "ten saves of 1,000", saves: 10, goal: 0.5, total: 1},
		{name: "a hundred saves of 100", saves: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &costClock{now: time.Now()}
			e := newCostEnv(t, hub.Options{MaxBundleWeight: 1000, Retention: time.Hour, SweepInterval: time.Hour, Now: clock.Now})
			ctx := context.Background()
			seeded(t, e) // warm the metadata caches
			r := uuid.NewString()
			ns := notifications(n, r, 1)
			save, _ := e.measure(t, func() {
				for i := range tc.saves {
					if _, err := e.repo.Save(ctx, ns[i*n/tc.saves:(i+1)*n/tc.saves]); err != nil {
						t.Fatal(err)
					}
				}
			})
			bundles := 0
			drain, _ := e.measure(t, func() {
				for {
					b, err := e.repo.Peek(ctx, r, domain.GroupAll, "")
					if err != nil {
						t.Fatal(err)
					}
					if b == nil {
						return
					}
					bundles++
					if err := e.repo.Dequeue(ctx, r, b.ID); err != nil {
						t.Fatal(err)
					}
				}
			})
			if bundles != n/1000 {
				t.Fatalf("%d bundles, want %d", bundles, n/1000)
			}
			clock.advance(2 * time.Hour)
			retention, _ := e.measure(t, func() {
				if err := e.repo.SweepNow(ctx); err != nil {
					t.Fatal(err)
				}
			})
			state, err := e.store.LoadRecipient(ctx, r)
			if err != nil || len(state.Entries) != 0 {
				t.Fatalf("retention left %+v, %v", state, err)
			}
			if found, err := e.store.LookupIDs(ctx, []string{ns[0].ID, ns[n-1].ID}); err != nil || len(found) != 0 {
				t.Fatalf("retention left ids %v, %v", found, err)
			}
			for name, total := range e.audit.byContainer() {
				t.Logf("container %-10s %8.1f RU = %.3f RU per notification (all parts, warm-up included)", name, total, total/n)
			}
			ru := logParts(t, n, save, drain, retention)
			perN := (ru["save"] + ru["peek+dequeue"]) / n
			withRetention := perN + ru["retention"]/n
			t.Logf("COST %s: %.3f RU per notification for save + peek + dequeue, %.3f with retention", tc.name, perN, withRetention)
			if tc.goal > 0 && (perN > tc.goal || withRetention > tc.total) {
				t.Fatalf("%.3f RU per notification (%.3f with retention), want ≤ %.1f (≤ %.1f)", perN, withRetention, tc.goal, tc.total)
			}
		})
	}
}

// charged sums the request charges the server reported.
func charged(byOp map[string]cosmos.OpStats) float64 {
	ru := 0.0
	for _, s := range byOp {
		ru += s.RequestCharge
	}
	return ru
}

func byOpCharges(byOp map[string]cosmos.OpStats) string {
	ops := slices.Sorted(maps.Keys(byOp))
	var b strings.Builder
	for _, op := range ops {
		fmt.Fprintf(&b, "%s %d %.1f; ", op, byOp[op].Requests, byOp[op].RequestCharge)
	}
	return b.String()
}

type costClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *costClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Millisecond)
	return c.now
}

func (c *costClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Re-saving stored notifications finds them all with a few requests: each
// save's commit record is read once, not once per id.
func TestResavingDuplicatesCostsFewReads(t *testing.T) {
	e := newCostEnv(t, hub.Options{})
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

// TestCostOfASaveSpreadOverManyRecipients measures a save of 1,000
// notifications for 100 recipients (10 each: a domain publishing for many
// actors at once), each drained in one bundle of 10, then retention. Each
// recipient has its own head, entry and drawer; the id index writes one
// document per bucket for the whole save. Asserted: the id index's part of
// the save and of retention stays small, and retention leaves no id behind.
func TestCostOfASaveSpreadOverManyRecipients(t *testing.T) {
	const n = 1000
	clock := &costClock{now: time.Now()}
	e := newCostEnv(t, hub.Options{Retention: time.Hour, SweepInterval: time.Hour, Now: clock.Now})
	ctx := context.Background()
	seeded(t, e)
	var ns []domain.Notification
	for range 100 {
		ns = append(ns, notifications(n/100, uuid.NewString(), 1)...)
	}
	before := e.audit.byContainer()
	start := before
	save, _ := e.measure(t, func() {
		if _, err := e.repo.Save(ctx, ns); err != nil {
			t.Fatal(err)
		}
	})
	idsSave := e.audit.byContainer()["ids"] - before["ids"]
	drain, _ := e.measure(t, func() {
		// The first recipient's Peek and Dequeue are also measured apart.
		var b *domain.Bundle
		peekOps, peek := e.measure(t, func() {
			var err error
			if b, err = e.repo.Peek(ctx, ns[0].Recipient, domain.GroupAll, ""); err != nil || b == nil {
				t.Fatalf("peek: %v %v", b, err)
			}
		})
		deqOps, deq := e.measure(t, func() {
			if err := e.repo.Dequeue(ctx, ns[0].Recipient, b.ID); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("COST peek of a bundle of %d: %d requests, %.2f RU (%s); its dequeue: %d requests, %.2f RU (%s)",
			len(b.NotificationIDs), peek.Requests, peek.RequestCharge, byOpCharges(peekOps), deq.Requests, deq.RequestCharge, byOpCharges(deqOps))
		if deq.Requests != 1 {
			t.Fatalf("dequeue cost %d requests, want 1 (the bundle this instance cut): %v", deq.Requests, deqOps)
		}
		for i := 0; i < n; i += n / 100 {
			want := 1
			if i == 0 {
				want = 0 // drained above
			}
			if bundles := drainRecipient(t, e.repo, ns[i].Recipient); bundles != want {
				t.Fatalf("%d bundles for %s", bundles, ns[i].Recipient)
			}
		}
	})
	clock.advance(2 * time.Hour)
	before = e.audit.byContainer()
	retention, _ := e.measure(t, func() {
		if err := e.repo.SweepNow(ctx); err != nil {
			t.Fatal(err)
		}
	})
	idsRetention := e.audit.byContainer()["ids"] - before["ids"]
	ids := make([]string, len(ns))
	for i, x := range ns {
		ids[i] = x.ID
	}
	if found, err := e.store.LookupIDs(ctx, ids); err != nil || len(found) != 0 {
		t.Fatalf("retention left %d ids, %v", len(found), err)
	}
	// By container, for the sizing of each (every part, the hub's
	// background readers included).
	for name, total := range e.audit.byContainer() {
		if used := total - start[name]; used > 0 {
			t.Logf("container %-10s %8.1f RU = %.3f RU per notification (save, peek, dequeue, retention)", name, used, used/n)
		}
	}
	ru := logParts(t, n, save, drain, retention)
	t.Logf("COST a save of 1,000 for 100 recipients: save %.3f RU per notification (id index %.3f), peek + dequeue in bundles of 10 %.3f, retention %.3f (id index %.3f); %.3f in all",
		ru["save"]/n, idsSave/n, ru["peek+dequeue"]/n, ru["retention"]/n, idsRetention/n, (ru["save"]+ru["peek+dequeue"]+ru["retention"])/n)
	t.Logf("COST a save of 1,000 for 100 recipients: %.2f RU per notification for save + peek + dequeue; the save %.1f RU per recipient",
		(ru["save"]+ru["peek+dequeue"])/n, ru["save"]/100)
	// Id documents of one drawer each would cost several RU per notification.
	if idsSave/n > 0.5 || idsRetention/n > 0.5 {
		t.Fatalf("the id index costs %.3f RU per notification to save and %.3f to remove, want ≤ 0.5 each", idsSave/n, idsRetention/n)
	}

	// The same recipients again, now known: no registry entry, and their
	// heads as the hub's loads read them.
	var again []domain.Notification
	for i := 0; i < n; i += n / 100 {
		again = append(again, notifications(n/100, ns[i].Recipient, 1)...)
	}
	resave, _ := e.measure(t, func() {
		if _, err := e.repo.Save(ctx, again); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("save again   %8.1f RU; by operation (requests, RU): %s", charged(resave), byOpCharges(resave))
	t.Logf("COST a save of 1,000 for the same 100 recipients again: %.3f RU per notification, %.1f RU per recipient",
		charged(resave)/n, charged(resave)/100)
}

// drainRecipient peeks and dequeues everything the recipient has, and
// returns how many bundles that took.
func drainRecipient(t *testing.T, repo *hub.Hub, recipient string) int {
	t.Helper()
	ctx := context.Background()
	bundles := 0
	for {
		b, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			return bundles
		}
		bundles++
		if err := repo.Dequeue(ctx, recipient, b.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// logParts logs what saving, draining and retention each charged, in all,
// per notification of n and by operation, and returns the totals by part
// ("save", "peek+dequeue", "retention").
func logParts(t *testing.T, n float64, save, drain, retention map[string]cosmos.OpStats) map[string]float64 {
	t.Helper()
	ru := map[string]float64{"save": charged(save), "peek+dequeue": charged(drain), "retention": charged(retention)}
	for _, part := range []struct {
		name string
		ops  map[string]cosmos.OpStats
	}{{"save", save}, {"peek+dequeue", drain}, {"retention", retention}} {
		t.Logf("%-12s %8.1f RU = %.3f RU per notification; by operation (requests, RU): %s", part.name, ru[part.name], ru[part.name]/n, byOpCharges(part.ops))
	}
	return ru
}
