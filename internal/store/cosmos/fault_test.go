package cosmos_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// faulty answers some requests itself instead of the server: inject decides,
// per data-plane request, which status to answer (0: pass the request on).
type faulty struct {
	next       *http.Client
	inject     atomic.Pointer[func(*http.Request) int]
	retryAfter atomic.Int64 // milliseconds a 429 asks to wait; 0 means 5
}

func newFaulty() *faulty { return &faulty{next: cosmostest.NewHTTPClient()} }

func (f *faulty) set(fn func(*http.Request) int) { f.inject.Store(&fn) }

// dieAtCommit makes the process look gone from its save's commit record on:
// from the first replace in the saves container, nothing reaches the server.
func (f *faulty) dieAtCommit() {
	var dead atomic.Bool
	f.set(func(req *http.Request) int {
		if toContainer(req, "saves") && req.Method == http.MethodPut {
			dead.Store(true)
		}
		if dead.Load() {
			return http.StatusForbidden
		}
		return 0
	})
}

// goneAfterCommit makes the process look gone once its save's commit
// record was replaced with committed (the commit applied, its answer lost
// with the process): from then on nothing reaches the server. An attempt
// aborted before (its record replaced with aborted) goes on. The flag says
// whether the commit was sent.
func (f *faulty) goneAfterCommit() *atomic.Bool {
	var committed atomic.Bool
	f.set(func(req *http.Request) int {
		if committed.Load() {
			return http.StatusForbidden
		}
		if toContainer(req, "saves") && req.Method == http.MethodPut && req.Body != nil {
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return http.StatusServiceUnavailable
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			committed.Store(strings.Contains(string(body), `"state":"committed"`))
		}
		return 0
	})
	return &committed
}

func (f *faulty) Do(req *http.Request) (*http.Response, error) {
	if fn := f.inject.Load(); fn != nil && cosmos.Classify(req) != cosmos.OpMetadata {
		if code := (*fn)(req); code != 0 {
			resp := injected(req, code)
			if code == http.StatusTooManyRequests {
				wait := f.retryAfter.Load()
				if wait == 0 {
					wait = 5
				}
				resp.Header.Set("x-ms-retry-after-ms", strconv.FormatInt(wait, 10))
			}
			return resp, nil
		}
	}
	return f.next.Do(req)
}

// injected is the answer code to req from a transport standing in for the
// server.
func injected(req *http.Request, code int) *http.Response {
	return &http.Response{
		StatusCode: code, Status: http.StatusText(code), Request: req,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   io.NopCloser(strings.NewReader(`{"code":"injected","message":"injected fault"}`)),
	}
}

// toContainer reports whether req addresses documents of that container.
func toContainer(req *http.Request, name string) bool {
	return strings.Contains(req.URL.Path, "/colls/"+name+"/")
}

// abortSave saves ns while no drawer page can be written, so that the save
// reserves its positions and then aborts; the Save must fail.
func abortSave(t *testing.T, f *faulty, repo *hub.Hub, ns []domain.Notification) {
	t.Helper()
	f.set(func(req *http.Request) int {
		if toContainer(req, "drawers") && req.Method == http.MethodPost {
			return http.StatusForbidden
		}
		return 0
	})
	defer f.set(func(*http.Request) int { return 0 })
	if _, err := repo.Save(context.Background(), ns); err == nil {
		t.Fatal("save succeeded without its pages")
	}
}

func cycle(t *testing.T, repo *hub.Hub, n int) {
	t.Helper()
	ctx := context.Background()
	r := uuid.NewString()
	ns := notifications(n, r, 1)
	if _, err := repo.Save(ctx, ns); err != nil {
		t.Fatalf("save: %v", err)
	}
	b, err := repo.Peek(ctx, r, domain.GroupAll, "")
	if err != nil {
		t.Fatalf("peek: %v", err)
	}
	if b == nil || len(b.NotificationIDs) != n {
		t.Fatalf("peek returned %v", b)
	}
	if err := repo.Dequeue(ctx, r, b.ID); err != nil {
		t.Fatalf("dequeue: %v", err)
	}
}

// Cosmos DB asks a throttled client to wait as long as the partition's debt
// takes to repay, which can be seconds: the store waits as asked rather than
// giving up on waits over a fixed cap.
func TestALongRetryAfterIsWaitedFor(t *testing.T) {
	f := newFaulty()
	f.retryAfter.Store(2500) // over the 2 s the SDK's retry used to cap
	store := open(t, cosmos.Config{Transport: f})
	repo := hub.New(store, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	var n atomic.Int64
	f.set(func(req *http.Request) int {
		// The cycle's first request, not one of the hub's background
		// readers (bells, figures, retention), which the cycle never waits
		// for: the first to the recipients container in a recipient's own
		// partition.
		pk := req.Header.Get("x-ms-documentdb-partitionkey")
		if !strings.Contains(req.URL.Path, "/colls/recipients/") || pk == "" || strings.HasPrefix(pk, `["_`) {
			return 0
		}
		if n.Add(1) == 1 {
			return http.StatusTooManyRequests
		}
		return 0
	})
	start := time.Now()
	cycle(t, repo, 10)
	if took := time.Since(start); took < 2500*time.Millisecond {
		t.Fatalf("the cycle took %s: the 429's retry-after of 2.5 s was not honoured", took)
	}
}

func TestThrottlingAndServerErrorsAreRetried(t *testing.T) {
	for _, code := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusRequestTimeout} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			f := newFaulty()
			store := open(t, cosmos.Config{Transport: f})
			repo := hub.New(store, hub.Options{}, nil)
			t.Cleanup(repo.Close)
			var n atomic.Int64
			var failed sync.Map
			// Every third request fails, but an operation fails only once:
			// its resends carry the activity id the SDK gave it, and an
			// operation whose every resend also failed would be a fault
			// outlasting the retries, which depends on how requests
			// interleave, not on the store.
			f.set(func(req *http.Request) int {
				if n.Add(1)%3 != 0 {
					return 0
				}
				if _, again := failed.LoadOrStore(req.Header.Get("x-ms-activity-id"), true); again {
					return 0
				}
				return code
			})
			cycle(t, repo, 250)
			if n.Load() < 6 {
				t.Fatalf("only %d requests seen", n.Load())
			}
			if code == http.StatusTooManyRequests && cosmos.Total(store.Meter().Snapshot()).Throttled == 0 {
				t.Fatal("no 429 counted")
			}
		})
	}
}

func TestSaveFailingHalfWayLeavesNothingAndCanBeRetried(t *testing.T) {
	f := newFaulty()
	store := open(t, cosmos.Config{Transport: f})
	repo := hub.New(store, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	cycle(t, repo, 1) // warm up
	ns := notifications(1_500, r, 1)
	abortSave(t, f, repo, ns)
	if b, err := repo.Peek(ctx, r, domain.GroupAll, ""); err != nil || b != nil {
		t.Fatalf("after a failed save: %v %v", b, err)
	}
	// Its positions are recorded as a hole: its drawer holds none of them.
	state, err := store.LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(state.Entries) != 1 || state.Entries[0].Total != 1_500 || drawer.Held(state.Entries[0].Drawers, 0) != 0 {
		t.Fatalf("catalog after the abort = %+v, want one entry of 1,500 positions holding none", state.Entries)
	}
	found, err := store.LookupIDs(ctx, []string{ns[0].ID, ns[1_499].ID})
	if err != nil || len(found) != 0 {
		t.Fatalf("ids of a failed save are known: %v %v", found, err)
	}
	// The same ids again: stored, not duplicates.
	res, err := repo.Save(ctx, ns)
	if err != nil || res.Saved != len(ns) {
		t.Fatalf("retry: %+v %v", res, err)
	}
	b, err := repo.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || b == nil || !slices.Equal(b.NotificationIDs, ids(ns)) {
		t.Fatalf("retry not delivered in order: %v", err)
	}
}

func ids(ns []domain.Notification) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.ID
	}
	return out
}

// A save whose process dies after writing its pages leaves a reservation.
// Once its lease is over, the next reader aborts it and rolls it back; its
// sequence numbers are never handed out again.
func TestExpiredReservationIsRolledBack(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	db := cosmostest.UniqueID("db")
	f := newFaulty()
	dying := open(t, cosmos.Config{Database: db, Transport: f, Now: clock, Lease: time.Minute})
	repo := hub.New(dying, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	first := notifications(2, r, 1)
	if _, err := repo.Save(ctx, first); err != nil {
		t.Fatal(err)
	}
	// From the commit record's replace on, nothing reaches the server: the
	// process is gone.
	f.dieAtCommit()
	lost := notifications(3, r, 1)
	if _, err := repo.Save(ctx, lost); err == nil {
		t.Fatal("save succeeded while the server was unreachable")
	}

	other := open(t, cosmos.Config{Database: db, Now: clock, Lease: time.Minute})
	survivor := hub.New(other, hub.Options{}, nil)
	t.Cleanup(survivor.Close)
	b, err := survivor.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || !slices.Equal(b.NotificationIDs, ids(first)) {
		t.Fatalf("before the lease ends: %v %v", b, err)
	}
	if err := survivor.Dequeue(ctx, r, b.ID); err != nil {
		t.Fatal(err)
	}
	before, err := other.LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	now.Add(int64(2 * time.Minute))
	if b, err := survivor.Peek(ctx, r, domain.GroupAll, ""); err != nil || b != nil {
		t.Fatalf("a dead save became visible: %v %v", b, err)
	}
	after, err := other.LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if after.Head.Watermark != after.Head.NextSeq-1 || after.Head.NextSeq != before.Head.NextSeq {
		t.Fatalf("head after rollback %+v (before %+v)", after.Head, before.Head)
	}
	res, err := survivor.Save(ctx, lost)
	if err != nil || res.Saved != 3 {
		t.Fatalf("saving the lost notifications again: %+v %v", res, err)
	}
	state, err := other.LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if state.Head.NextSeq != before.Head.NextSeq+3 {
		t.Fatalf("sequence numbers reused or skipped oddly: %+v then %+v", before.Head, state.Head)
	}
	b, err = survivor.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || !slices.Equal(b.NotificationIDs, ids(lost)) {
		t.Fatalf("resaved notifications: %v %v", b, err)
	}
}

// Two instances on one database: concurrent saves keep each save's order,
// every notification is delivered once, and concurrent peeks agree.
func TestTwoInstancesShareOneDatabase(t *testing.T) {
	db := cosmostest.UniqueID("db")
	repos := make([]*hub.Hub, 2)
	for i := range repos {
		s := open(t, cosmos.Config{Database: db})
		repos[i] = hub.New(s, hub.Options{}, nil)
		t.Cleanup(repos[i].Close)
	}
	ctx := context.Background()
	recipients := []string{uuid.NewString(), uuid.NewString()}
	var mu sync.Mutex
	var saves [][]string
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 10 {
				ns := notifications(1+i%7, recipients[(w+i)%2], 1)
				if _, err := repos[w%2].Save(ctx, ns); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				saves = append(saves, ids(ns))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// No sequence number was handed out twice, and each cabinet's drawers
	// hold them in increasing order.
	probe := open(t, cosmos.Config{Database: db})
	for _, r := range recipients {
		state, err := probe.LoadRecipient(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int64]bool{}
		for _, e := range state.Entries {
			items, err := drawer.ReadRange(ctx, probe.ReadDrawer, e.Drawers, 0, e.Total)
			if err != nil {
				t.Fatal(err)
			}
			for i, it := range items {
				if seen[it.Seq] || (i > 0 && it.Seq <= items[i-1].Seq) {
					t.Fatalf("sequence number %d reused or out of order", it.Seq)
				}
				seen[it.Seq] = true
			}
		}
	}
	delivered := map[string]int{}
	var order []string
	for _, r := range recipients {
		for range 1000 {
			got := make([]*domain.Bundle, 6)
			var pw sync.WaitGroup
			for i := range got {
				pw.Go(func() {
					var err error
					if got[i], err = repos[i%2].Peek(ctx, r, domain.GroupAll, ""); err != nil {
						t.Error(err)
					}
				})
			}
			pw.Wait()
			if got[0] == nil {
				break
			}
			for _, b := range got[1:] {
				if b == nil || b.ID != got[0].ID || !slices.Equal(b.NotificationIDs, got[0].NotificationIDs) {
					t.Fatal("concurrent peeks on two instances disagree")
				}
			}
			for _, id := range got[0].NotificationIDs {
				delivered[id]++
				order = append(order, id)
			}
			if err := repos[1].Dequeue(ctx, r, got[0].ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	pos := map[string]int{}
	for i, id := range order {
		pos[id] = i
	}
	for _, s := range saves {
		for i, id := range s {
			if delivered[id] != 1 {
				t.Fatalf("notification delivered %d times", delivered[id])
			}
			if i > 0 && pos[id] != pos[s[i-1]]+1 {
				t.Fatal("a save's notifications were not delivered together in order")
			}
		}
	}
	if len(order) != len(delivered) {
		t.Fatalf("%d deliveries of %d notifications", len(order), len(delivered))
	}
}

// A sweep deletes a freed drawer's pages before it takes the drawer out of
// the catalog: when it stops before its catalog batch, the catalog still
// names the drawer, fully acknowledged, and the next sweep of the
// recipient frees it again, so no page is left behind that nothing points
// to.
func TestASweepStoppedBeforeItsDeletesIsFinishedByTheNext(t *testing.T) {
	ctx := context.Background()
	f := newFaulty()
	clock := &costClock{now: time.Now()}
	store := open(t, cosmos.Config{Transport: f, Now: clock.Now})
	repo := hub.New(store, hub.Options{Retention: time.Hour, SweepInterval: time.Hour, Now: clock.Now}, nil)
	t.Cleanup(repo.Close)
	r := uuid.NewString()
	if _, err := repo.Save(ctx, notifications(30, r, 1)); err != nil {
		t.Fatal(err)
	}
	state, err := store.LoadRecipient(ctx, r)
	if err != nil || len(state.Entries) != 1 || len(state.Entries[0].Drawers) != 1 {
		t.Fatalf("state %+v, %v", state, err)
	}
	drawerID := state.Entries[0].Drawers[0].ID
	b, err := repo.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("peek: %v, %v", b, err)
	}
	if err := repo.Dequeue(ctx, r, b.ID); err != nil {
		t.Fatal(err)
	}
	clock.advance(2 * time.Hour)

	// The drawers container refuses every delete: the sweep stops before
	// its catalog batch.
	f.set(func(req *http.Request) int {
		if req.Method == http.MethodDelete || (toContainer(req, "drawers") && req.Header.Get("x-ms-cosmos-is-batch-request") != "") {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	if err := repo.SweepNow(ctx); err == nil {
		t.Fatal("a sweep whose deletes all failed reported success")
	}
	if state, err := store.LoadRecipient(ctx, r); err != nil || len(state.Entries) != 1 {
		t.Fatalf("after the stopped sweep the catalog has %+v (%v): its batch should not have run", state.Entries, err)
	}
	items, err := store.ReadDrawer(ctx, drawerID, 0, 1<<40, 100)
	if err != nil || len(items) != 30 {
		t.Fatalf("before the next sweep the drawer holds %d items (%v), want its 30 still there", len(items), err)
	}

	f.set(func(*http.Request) int { return 0 })
	if err := repo.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	if items, err := store.ReadDrawer(ctx, drawerID, 0, 1<<40, 100); err != nil || len(items) != 0 {
		t.Fatalf("the next sweep left %d items of the freed drawer (%v)", len(items), err)
	}
	if state, err := store.LoadRecipient(ctx, r); err != nil || len(state.Entries) != 0 {
		t.Fatalf("after the next sweep the catalog still has %+v (%v)", state.Entries, err)
	}
}

// A Save returns when the account stops answering at its commit: the
// commit is given up at half the lease, and the abort that follows, which
// runs without the caller's deadline, by the lease's end; past it whoever
// finds the reservation settles it. Each attempt of a request ends only
// after the HTTP client's timeout, and the SDK tries again almost without
// end, so an abort bounded by nothing held its Save for days.
func TestASaveReturnsWhenTheAccountStopsAnswering(t *testing.T) {
	db := cosmostest.UniqueID("db")
	const lease = 2 * time.Second
	s := open(t, cosmos.Config{Database: db, Lease: lease})
	repo := hub.New(s, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	cycle(t, repo, 1) // the client's metadata caches
	r := uuid.NewString()
	state, err := s.LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	ns := notifications(3, r, 1)
	fps := map[string]store.Fingerprint{}
	for i, n := range ns {
		fps[n.ID] = store.Fingerprint{byte(i + 1)}
	}
	// The store's own Save, with no deadline: the hub's would make the lease
	// twice its own 30 s.
	save := hub.PlanSave(r, state, ns, fps, uuid.NewString, time.Now().UnixMilli(), 0)
	inject(t, db, cosmostest.Fault{Kind: cosmostest.LostHold, Coll: "saves", Ops: []string{"replace", "read", "batch"}})

	done := make(chan error, 1)
	go func() { done <- s.CommitSaves(ctx, []store.RecipientSave{save}) }()
	// The lease and a wide margin for a busy machine, well below the
	// client's 30 s per attempt.
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a save whose commit was never answered succeeded")
		}
	case <-time.After(lease + 15*time.Second):
		t.Fatalf("a save on an account that stopped answering has not returned after %v (lease %v)", lease+15*time.Second, lease)
	}
}
