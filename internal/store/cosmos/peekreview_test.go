package cosmos_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// A recipient over its retained bytes has its bundles removed before the
// retention ends (retention.go), and with them their ids are free again;
// their notices, which their domain may not have taken yet, stay until
// their own ttl (the full retention). An actor that peeks with such an id
// gets a new bundle under it, and its Dequeue writes the notice of that
// id: a create that met the old notice failed the whole batch (409, a
// conflict), every retry met it again, and the bundle could not be
// dequeued (UNAVAILABLE after the hub's retries), its group stuck behind it
// for as long as the old notice lived. An upsert instead replaced the old
// notice, and a notifier that had read it removed the new one undelivered.
func TestADequeueOfAReusedIDWhoseOldNoticeIsStillKeptSucceeds(t *testing.T) {
	const retention, interval, perPass, budget = 7 * 24 * time.Hour, 10 * time.Minute, 4, 4_000
	clock := &costClock{now: time.Now()}
	db := cosmostest.UniqueID("db")
	s := open(t, cosmos.Config{Database: db, Throughput: "manual=1000000", Now: clock.Now})
	cosmos.SetRetainedBudget(s, budget)
	repo := hub.New(s, hub.Options{Now: clock.Now, Retention: retention, SweepInterval: time.Hour,
		Notices: func(domain.Origin) bool { return true }}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	var first []string // the bundle ids of the first pass, oldest first
	last := clock.Now()
	for pass := 0; pass < 8; pass++ {
		ns := notifications(perPass, r, 1)
		for i := range ns {
			ns[i].SupportsBundling = false // a bundle each
		}
		if _, err := repo.Save(ctx, ns); err != nil {
			t.Fatal(err)
		}
		for range perPass {
			b, err := repo.Peek(ctx, r, domain.GroupTimeSeries, uuid.NewString())
			if err != nil || b == nil {
				t.Fatalf("peek: %+v, %v", b, err)
			}
			if err := repo.Dequeue(ctx, r, b.ID); err != nil {
				t.Fatal(err)
			}
			if pass == 0 {
				first = append(first, b.ID)
			}
		}
		clock.advance(interval)
		start := clock.Now()
		if err := repo.SweepSince(ctx, last.Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
		last = start
		if used, err := s.BundleExists(ctx, r, first[0]); err != nil {
			t.Fatal(err)
		} else if !used {
			break // the bound removed it, its notice stays
		}
	}
	if used, err := s.BundleExists(ctx, r, first[0]); err != nil || used {
		t.Fatalf("bundle %s still kept (%v): the bound never acted; the test tested nothing", first[0], err)
	}
	ns := notifications(1, r, 1)
	if _, err := repo.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	b, err := repo.Peek(ctx, r, domain.GroupTimeSeries, first[0])
	if err != nil || b == nil || b.ID != first[0] || len(b.NotificationIDs) != 1 || b.NotificationIDs[0] != ns[0].ID {
		t.Fatalf("peek naming the freed id %s: %+v, %v; want the new notification under it", first[0], b, err)
	}
	if err := repo.Dequeue(ctx, r, b.ID); err != nil {
		t.Fatalf("dequeue of a bundle under a freed id: %v", err)
	}
	if again, err := repo.Peek(ctx, r, domain.GroupTimeSeries, ""); err != nil || again != nil {
		t.Fatalf("peek after the dequeue = %+v, %v; want nothing", again, err)
	}
	// Both dequeues keep their notice: the old one, which its domain may
	// not have taken yet, is neither replaced by the new one nor does its
	// removal remove the new one; and it no longer reads a bundle, so the
	// domain is told of the new dequeue once, by its own notice.
	all, err := s.Notices(ctx, domain.Origins, 1_000)
	if err != nil {
		t.Fatal(err)
	}
	var reused []store.Notice
	for _, n := range all {
		if n.BundleID == first[0] {
			reused = append(reused, n)
		}
	}
	if len(reused) != 2 || !reused[0].DequeuedAt.Before(reused[1].DequeuedAt) {
		t.Fatalf("notices of the id %s: %+v; want the old and the new dequeue's", first[0], reused)
	}
	if got, err := repo.NoticedBundle(ctx, reused[0]); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("the old notice reads %+v, %v; want not found: its bundle is gone", got, err)
	}
	if got, err := repo.NoticedBundle(ctx, reused[1]); err != nil || !slices.Equal(got.NotificationIDs, []string{ns[0].ID}) {
		t.Fatalf("the new notice reads %+v, %v; want the new bundle", got, err)
	}
	if err := s.RemoveNotices(ctx, reused[:1]); err != nil {
		t.Fatal(err)
	}
	left, err := s.Notices(ctx, domain.Origins, 1_000)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(left, func(n store.Notice) bool { return n.BundleID == first[0] }); i < 0 || !left[i].DequeuedAt.Equal(reused[1].DequeuedAt) ||
		slices.ContainsFunc(left[i+1:], func(n store.Notice) bool { return n.BundleID == first[0] }) {
		t.Fatalf("after removing the old notice: %+v; want the new one alone left", left)
	}
}

// pagedLoads is the network of an instance whose queries of one
// recipient's partition are answered in pages of size documents, as Cosmos
// DB answers any query in pages (100 documents by default; size scales that
// down to the few documents a test writes), and which holds the first
// request for a next page until release is closed, so that another
// instance writes between the pages.
type pagedLoads struct {
	next      policy.Transporter
	recipient string
	size      int
	held      chan struct{} // closed when a next page is asked for
	release   chan struct{}
	once      sync.Once
}

func (p *pagedLoads) Do(req *http.Request) (*http.Response, error) {
	if req.Header.Get("x-ms-documentdb-query") != "" && strings.Contains(req.URL.Path, "/colls/recipients/") &&
		strings.Contains(req.Header.Get("x-ms-documentdb-partitionkey"), p.recipient) {
		req.Header.Set("x-ms-max-item-count", strconv.Itoa(p.size))
		if req.Header.Get("x-ms-continuation") != "" {
			p.once.Do(func() {
				close(p.held)
				<-p.release
			})
		}
	}
	return p.next.Do(req)
}

// A recipient's load is one query, answered in pages, and each page may
// come from another replica, at another moment: the state of a Dequeue can
// hold a bundle as pending from one page and its cabinet's cursor as moved
// past it, by another instance's Dequeue of that bundle, from a later
// page. Every write a Dequeue makes is conditional on what it read, so such
// a state is a stale read like any other; it was answered INTERNAL ("bundle
// starts at 0 but its cabinet is acknowledged up to 3") instead of being
// read again, which finds the bundle dequeued: NOT_FOUND.
func TestADequeueWhoseLoadSpansAnotherInstancesDequeueIsNotFound(t *testing.T) {
	r := uuid.NewString()
	a, b, paged := pagedPairSized(t, r, 3, hub.Options{})
	ctx := context.Background()
	ns := notifications(3, r, 1)
	if _, err := b.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	bundle, err := b.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || bundle == nil {
		t.Fatalf("peek: %v, %v", bundle, err)
	}
	// A's Dequeue reads the head, the entry and the pending bundle in its
	// first page, and the cursor (created after the bundle, in its batch)
	// in the next, which waits for B's Dequeue.
	done := make(chan error, 1)
	go func() { done <- a.Dequeue(ctx, r, bundle.ID) }()
	select {
	case <-paged.held:
	case err := <-done:
		t.Fatalf("A's dequeue answered %v without asking for a second page; the test tested nothing", err)
	}
	if err := b.Dequeue(ctx, r, bundle.ID); err != nil {
		t.Fatal(err)
	}
	close(paged.release)
	if err := <-done; !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("A's dequeue of a bundle B dequeued meanwhile: %v; want NOT_FOUND", err)
	}
	if again, err := a.Peek(ctx, r, domain.GroupAll, ""); err != nil || again != nil {
		t.Fatalf("peek after the dequeue = %v, %v; want nothing", again, err)
	}
}

// peekAnswer is what a Peek answered.
type peekAnswer struct {
	b   *domain.Bundle
	err error
}

// peekHeldBetweenPages starts a Peek of group ALL through a, whose network
// is paged, and returns once its load asked for a next page (and is held
// there until paged.release is closed); the Peek's answer comes on the
// channel returned.
func peekHeldBetweenPages(t *testing.T, a *hub.Hub, r string, paged *pagedLoads) <-chan peekAnswer {
	t.Helper()
	done := make(chan peekAnswer, 1)
	go func() {
		got, err := a.Peek(context.Background(), r, domain.GroupAll, "")
		done <- peekAnswer{got, err}
	}()
	select {
	case <-paged.held:
	case got := <-done:
		t.Fatalf("A's peek answered %+v, %v without asking for a second page; the test tested nothing", got.b, got.err)
	}
	return done
}

// pagedPair is two instances on one database of a server without replica
// lag (each page of a load shows every write made before it), the first
// answered in pages of one document of the recipient's partition and held
// before its first next page.
func pagedPair(t *testing.T, recipient string) (a, b *hub.Hub, paged *pagedLoads) {
	t.Helper()
	return pagedPairWith(t, recipient, hub.Options{})
}

// pagedPairWith is pagedPair with hubs of opts.
func pagedPairWith(t *testing.T, recipient string, opts hub.Options) (a, b *hub.Hub, paged *pagedLoads) {
	t.Helper()
	return pagedPairSized(t, recipient, 1, opts)
}

// pagedPairSized is pagedPairWith with pages of size documents.
func pagedPairSized(t *testing.T, recipient string, size int, opts hub.Options) (a, b *hub.Hub, paged *pagedLoads) {
	t.Helper()
	serverOpts := cosmostest.Default()
	serverOpts.Lag = 0
	srv := cosmostest.StartWith(t, serverOpts)
	db := cosmostest.UniqueID("db")
	paged = &pagedLoads{next: cosmostest.NewHTTPClient(), recipient: recipient, size: size,
		held: make(chan struct{}), release: make(chan struct{})}
	repos := make([]*hub.Hub, 2)
	for i, transport := range []policy.Transporter{paged, cosmostest.NewHTTPClient()} {
		s, err := cosmos.Open(context.Background(), cosmos.Config{
			Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: transport,
			Throughput: "manual=100000",
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		repos[i] = hub.New(withoutBells{s}, opts, nil)
		t.Cleanup(repos[i].Close)
	}
	return repos[0], repos[1], paged
}

// A drained cabinet's entry and cursor leave the catalog at the next
// retention pass, which keeps its drawer for the retained bundle, and the
// next save creates the entry again, its positions from 0 in a new drawer.
// A Peek whose load read the old entry in one page and, in later pages,
// the new entry and a bundle another instance cut from it, read that
// bundle back through the first entry of its cabinet it found: the kept
// drawer's notifications at the bundle's positions, dequeued long ago,
// under the new bundle's id; its Dequeue then acknowledged the new
// notifications, never delivered. A load that holds two versions of one
// document is a stale read: it is read again.
func TestAPeekWhoseLoadSpansARecreatedEntryReadsTheNewOne(t *testing.T) {
	r := uuid.NewString()
	a, b, paged := pagedPair(t, r)
	ctx := context.Background()
	old := notifications(3, r, 1)
	if _, err := b.Save(ctx, old); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, b, r, ids(old))
	done := peekHeldBetweenPages(t, a, r, paged)
	// Meanwhile: the pass after the drain, a save and a Peek through B.
	if err := b.SweepSince(ctx, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	fresh := notifications(3, r, 1)
	if _, err := b.Save(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	cut, err := b.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || cut == nil || !slices.Equal(cut.NotificationIDs, ids(fresh)) {
		t.Fatalf("peek through B = %+v, %v; want the fresh notifications", cut, err)
	}
	close(paged.release)
	got := <-done
	if got.err != nil || got.b != nil && (got.b.ID != cut.ID || !slices.Equal(got.b.NotificationIDs, ids(fresh))) {
		t.Fatalf("A's peek = %+v, %v; want nothing or bundle %s of the fresh notifications %v, never the dequeued %v",
			got.b, got.err, cut.ID, ids(fresh), ids(old))
	}
	if err := b.Dequeue(ctx, r, cut.ID); err != nil {
		t.Fatal(err)
	}
}

// The same pass between the pages of a Peek's load, with nothing saved
// since: the load read the drained cabinet's entry in its first page and
// found no cursor in the next (retention deleted both between them). A
// cabinet without a cursor is acknowledged up to position 0, so the Peek
// cut the entry's notifications, dequeued long ago, from its kept drawer,
// and stored the bundle with a cursor created anew at 0 (nothing stopped
// the create: the cursor was gone); the next save's first notifications,
// in the entry created again from position 0, were then acknowledged by
// that bundle's dequeue, never delivered.
func TestAPeekWhoseLoadSpansTheRemovalOfADrainedEntryCutsNothingOfIt(t *testing.T) {
	r := uuid.NewString()
	a, b, paged := pagedPair(t, r)
	ctx := context.Background()
	old := notifications(3, r, 1)
	if _, err := b.Save(ctx, old); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, b, r, ids(old))
	done := peekHeldBetweenPages(t, a, r, paged)
	if err := b.SweepSince(ctx, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	close(paged.release)
	if got := <-done; got.err != nil || got.b != nil {
		t.Fatalf("A's peek = %+v, %v; want nothing (the dequeued %v again?)", got.b, got.err, ids(old))
	}
	fresh := notifications(3, r, 1)
	fresh[2].ContentType = "rsm-012" // a second cabinet: A's next load holds two entries, in two pages
	if _, err := b.Save(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	// A's loads still come in pages: the entries created anew, with no
	// cursor yet, are found as loaded and delivered.
	drainExactly(t, a, r, ids(fresh))
}

// holdBatch is the network of an instance that, once armed, holds its
// first transactional batch whose body holds body until release is closed.
type holdBatch struct {
	next    policy.Transporter
	body    string
	skip    atomic.Int32 // matching batches let through before the one held
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *holdBatch) Do(req *http.Request) (*http.Response, error) {
	if h.armed.Load() && req.Header.Get("x-ms-cosmos-is-batch-request") != "" && req.GetBody != nil {
		if rc, err := req.GetBody(); err == nil {
			raw, _ := io.ReadAll(rc)
			// The request's body is the same reader, read to its end now.
			if again, err := req.GetBody(); err == nil {
				req.Body = again
			}
			if strings.Contains(string(raw), h.body) && h.skip.Add(-1) < 0 {
				h.once.Do(func() {
					close(h.held)
					<-h.release
				})
			}
		}
	}
	return h.next.Do(req)
}

// Two Peeks naming one bundle id for two groups, on two instances, both
// cut before either stores its bundle: the one whose create comes second
// meets the other's bundle document (409), reads again and answers
// ALREADY_EXISTS (the id is pending in another group); one bundle has the
// id, and the other group's notifications stay for a Peek with another id.
func TestTwoPeeksNamingOneIDForTwoGroupsStoreOneBundle(t *testing.T) {
	srv := cosmostest.StartWith(t, cosmostest.Default())
	db := cosmostest.UniqueID("db")
	hold := &holdBatch{next: cosmostest.NewHTTPClient(), body: `"t":"slot"`, held: make(chan struct{}), release: make(chan struct{})}
	repos := make([]*hub.Hub, 2)
	for i, transport := range []policy.Transporter{hold, cosmostest.NewHTTPClient()} {
		s, err := cosmos.Open(context.Background(), cosmos.Config{
			Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: transport,
			Throughput: "manual=100000",
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		repos[i] = hub.New(withoutBells{s}, hub.Options{}, nil)
		t.Cleanup(repos[i].Close)
	}
	a, b := repos[0], repos[1]
	ctx := context.Background()
	r := uuid.NewString()
	ts := notifications(2, r, 1)
	md := notifications(2, r, 1)
	for i := range md {
		md[i].Origin = domain.OriginCharges
	}
	if _, err := b.Save(ctx, append(slices.Clone(ts), md...)); err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	type answer struct {
		b   *domain.Bundle
		err error
	}
	done := make(chan answer, 1)
	hold.armed.Store(true)
	go func() {
		got, err := a.Peek(ctx, r, domain.GroupTimeSeries, id)
		done <- answer{got, err}
	}()
	select {
	case <-hold.held: // A cut its bundle and is about to store it
	case got := <-done:
		t.Fatalf("A's peek answered %+v, %v without storing a bundle; the test tested nothing", got.b, got.err)
	}
	got, err := b.Peek(ctx, r, domain.GroupMasterData, id)
	if err != nil || got == nil || got.ID != id || !slices.Equal(got.NotificationIDs, ids(md)) {
		t.Fatalf("B's peek = %+v, %v; want bundle %s of %v", got, err, id, ids(md))
	}
	close(hold.release)
	if ans := <-done; !errors.Is(ans.err, domain.ErrBundleIDInUse) {
		t.Fatalf("A's peek = %+v, %v; want ALREADY_EXISTS", ans.b, ans.err)
	}
	if err := b.Dequeue(ctx, r, id); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, a, r, ids(ts))
}

// A Dequeue on one instance and an operator's release of the same bundle
// on another, the release first: the dequeue's batch meets the released
// bundle (412), the primary shows it released, not dequeued by this
// Dequeue, and the Dequeue answers NOT_FOUND, with no notice written and
// none told; the notifications come again under a new id.
func TestADequeueRacingAReleaseOfItsBundleIsNotFound(t *testing.T) {
	srv := cosmostest.StartWith(t, cosmostest.Default())
	db := cosmostest.UniqueID("db")
	hold := &holdBatch{next: cosmostest.NewHTTPClient(), body: `"t":"dequeued"`, held: make(chan struct{}), release: make(chan struct{})}
	repos := make([]*hub.Hub, 2)
	stores := make([]*cosmos.Store, 2)
	var told atomic.Int32
	for i, transport := range []policy.Transporter{hold, cosmostest.NewHTTPClient()} {
		s, err := cosmos.Open(context.Background(), cosmos.Config{
			Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: transport,
			Throughput: "manual=100000",
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s
		repos[i] = hub.New(withoutBells{s}, hub.Options{Notices: func(domain.Origin) bool { return true },
			OnNotice: func(store.Notice) { told.Add(1) }}, nil)
		t.Cleanup(repos[i].Close)
	}
	a, b := repos[0], repos[1]
	ctx := context.Background()
	r := uuid.NewString()
	ns := notifications(3, r, 1)
	if _, err := b.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	bundle, err := b.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || bundle == nil {
		t.Fatalf("peek: %v, %v", bundle, err)
	}
	hold.armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- a.Dequeue(ctx, r, bundle.ID) }()
	select {
	case <-hold.held: // A's dequeue batch is on its way
	case err := <-done:
		t.Fatalf("A's dequeue answered %v without its batch; the test tested nothing", err)
	}
	if _, err := b.ReleaseBundle(ctx, r, bundle.ID); err != nil {
		t.Fatal(err)
	}
	close(hold.release)
	if err := <-done; !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("A's dequeue of a bundle released meanwhile: %v; want NOT_FOUND", err)
	}
	if n, _, err := stores[1].NoticeBacklog(ctx); err != nil || n != 0 || told.Load() != 0 {
		t.Fatalf("notices written %d (%v), told %d; want none", n, err, told.Load())
	}
	if _, err := a.Peek(ctx, r, domain.GroupAll, bundle.ID); !errors.Is(err, domain.ErrBundleIDInUse) {
		t.Fatalf("peek naming the released id: %v", err)
	}
	drainExactly(t, a, r, ids(ns))
}

// Acknowledging on a recipient's behalf makes the actor's writes, bundle
// after bundle: each of them under every fault a write may meet. Asked
// again after an error, as an operator would (when the first call got
// there, the repeat finds nothing to do), every notification up to the one
// named ends acknowledged, none after it, none is left pending, and the
// cabinet serves the next save.
func TestAcknowledgingOnBehalfSurvivesALostOrRefusedAnswer(t *testing.T) {
	writes := []storeWrite{storeWrites[7], storeWrites[8]} // create bundle, acknowledge
	for _, w := range writes {
		for _, f := range writeFaults {
			t.Run(faultCase(w.name, f.kind, f.count), func(t *testing.T) {
				db := cosmostest.UniqueID("db")
				repo := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
				t.Cleanup(repo.Close)
				ctx := context.Background()
				r := uuid.NewString()
				ns := notifications(3, r, 1)
				for i := range ns {
					ns[i].SupportsBundling = false // a bundle each
				}
				if _, err := repo.Save(ctx, ns); err != nil {
					t.Fatal(err)
				}
				rule := w.rule
				rule.Kind, rule.Count = f.kind, f.count
				inject(t, db, rule)
				upTo := ns[1]
				_, err := repo.AcknowledgeOnBehalf(ctx, r, upTo.Origin, upTo.ContentType, upTo.ID)
				if fired(t, db) == 0 {
					t.Fatal("the fault never fired; the test tested nothing")
				}
				clearFaults(t, db)
				if err != nil {
					// Up to a notification dequeued already, it has nothing to do.
					_, err = repo.AcknowledgeOnBehalf(ctx, r, upTo.Origin, upTo.ContentType, upTo.ID)
				}
				if err != nil {
					t.Fatalf("acknowledge on behalf, asked again: %v", err)
				}
				more := notifications(2, r, 1)
				if _, err := repo.Save(ctx, more); err != nil {
					t.Fatal(err)
				}
				drainExactly(t, repo, r, append(ids(ns[2:]), ids(more)...))
			})
		}
	}
}

// A Peek's bundle batch applies and its answer is lost; before the
// transport's resend, another instance's Peek returns that bundle and its
// Dequeue acknowledges it. The resend meets the dequeued bundle's document
// (409) and the Peek reads again: it answers the next bundle, never the one
// dequeued before it answered.
func TestAPeekWhoseBundleIsDequeuedElsewhereBeforeItsResendAnswersTheNext(t *testing.T) {
	srv := cosmostest.StartWith(t, cosmostest.Default())
	db := cosmostest.UniqueID("db")
	hold := &holdBatch{next: cosmostest.NewHTTPClient(), body: `"t":"slot"`, held: make(chan struct{}), release: make(chan struct{})}
	hold.skip.Store(1) // the first attempt applies; its resend waits
	repos := make([]*hub.Hub, 2)
	for i, transport := range []policy.Transporter{hold, cosmostest.NewHTTPClient()} {
		s, err := cosmos.Open(context.Background(), cosmos.Config{
			Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: transport,
			Throughput: "manual=100000",
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		repos[i] = hub.New(withoutBells{s}, hub.Options{MaxBundleWeight: 2}, nil)
		t.Cleanup(repos[i].Close)
	}
	a, b := repos[0], repos[1]
	ctx := context.Background()
	r := uuid.NewString()
	ns := notifications(4, r, 1) // two bundles of two
	if _, err := b.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddFaults(cosmostest.Fault{DB: db, Kind: cosmostest.LostUnavailable, Count: 1, Ops: []string{"batch"}, Coll: "recipients", Type: "slot"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.ClearFaults(db) })
	hold.armed.Store(true)
	type answer struct {
		b   *domain.Bundle
		err error
	}
	done := make(chan answer, 1)
	go func() {
		got, err := a.Peek(ctx, r, domain.GroupAll, "")
		done <- answer{got, err}
	}()
	select {
	case <-hold.held: // A's bundle is stored, its answer lost, the resend waits
	case got := <-done:
		t.Fatalf("A's peek answered %+v, %v without resending its batch; the test tested nothing", got.b, got.err)
	}
	first, err := b.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || first == nil || !slices.Equal(first.NotificationIDs, ids(ns[:2])) {
		t.Fatalf("B's peek = %+v, %v; want the first two", first, err)
	}
	if err := b.Dequeue(ctx, r, first.ID); err != nil {
		t.Fatal(err)
	}
	close(hold.release)
	got := <-done
	if got.err != nil || got.b == nil || got.b.ID == first.ID || !slices.Equal(got.b.NotificationIDs, ids(ns[2:])) {
		t.Fatalf("A's peek = %+v, %v; want the last two under a new id, never bundle %s dequeued before it answered", got.b, got.err, first.ID)
	}
	if err := a.Dequeue(ctx, r, got.b.ID); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, b, r, nil)
}
