package cosmos_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// Sequences around an instance's memory of its own drains (drains.go) that
// a review tried: each must leave nothing undelivered and nothing delivered
// twice.

// retainingInstances opens two instances on one database of a server
// without replica lag, on one clock, with a retention of a week and
// cabinets of one drawer (a drained cabinet leaves the catalog with its
// cursor at its bundle's retention, and the next save starts it afresh at
// position 0).
func retainingInstances(t *testing.T) (*costClock, []*cosmos.Store, []*hub.Hub) {
	t.Helper()
	opts := cosmostest.Default()
	opts.Lag = 0
	srv := cosmostest.StartWith(t, opts)
	db := cosmostest.UniqueID("db")
	clock := &costClock{now: time.Now()}
	stores := make([]*cosmos.Store, 2)
	repos := make([]*hub.Hub, 2)
	for i := range repos {
		s, err := cosmos.Open(context.Background(), cosmos.Config{
			Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: cosmostest.NewHTTPClient(),
			Throughput: "manual=100000", Now: clock.Now,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s
		repos[i] = hub.New(withoutBells{s}, hub.Options{Now: clock.Now, Retention: 7 * 24 * time.Hour, SweepInterval: time.Hour, MaxCabinetDrawers: 1}, nil)
		t.Cleanup(repos[i].Close)
	}
	return clock, stores, repos
}

// A drains a recipient (its next Peek is answered by the head); B's sweep
// then takes the drained cabinet out of the catalog with its cursor, and
// B's save starts it afresh at position 0, in a new drawer. A's next Peek
// finds those notifications, A's Dequeue of that bundle (its own, no read)
// names the new drawer, so the dequeued bundle reads back B's
// notifications, and A's next Peek is empty.
func TestAnOwnDrainThenARestartedCabinetIsDeliveredAndDequeuedFromTheNewDrawer(t *testing.T) {
	clock, stores, repos := retainingInstances(t)
	a, b := repos[0], repos[1]
	ctx := context.Background()
	r := uuid.NewString()
	since := clock.Now().Add(-time.Minute)

	first := notifications(3, r, 1)
	if _, err := a.Save(ctx, first); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, a, r, ids(first))

	clock.advance(8 * 24 * time.Hour)
	if err := b.SweepSince(ctx, since); err != nil {
		t.Fatal(err)
	}
	st, err := stores[1].LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Entries) != 0 || len(st.Cursors) != 0 {
		t.Fatalf("after the sweep the recipient has %d entries and %d cursors; want the drained cabinet gone", len(st.Entries), len(st.Cursors))
	}

	second := notifications(2, r, 1)
	if _, err := b.Save(ctx, second); err != nil {
		t.Fatal(err)
	}
	got, err := a.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || got == nil || !slices.Equal(got.NotificationIDs, ids(second)) {
		t.Fatalf("peek through A after B restarted the cabinet = %v, %v; want %v", got, err, ids(second))
	}
	if err := a.Dequeue(ctx, r, got.ID); err != nil {
		t.Fatal(err)
	}
	back, err := b.DequeuedBundle(ctx, r, got.ID)
	if err != nil || !slices.Equal(back.NotificationIDs, ids(second)) {
		t.Fatalf("the bundle A dequeued reads back as %v, %v; want %v", back, err, ids(second))
	}
	for _, repo := range repos {
		if again, err := repo.Peek(ctx, r, domain.GroupAll, ""); err != nil || again != nil {
			t.Fatalf("peek after the restarted cabinet's dequeue = %v, %v; want nothing", again, err)
		}
	}
}

// A cuts bundle "x"; B dequeues it; retention removes its record, which
// frees the id; B's save and a Peek through B naming "x" make another
// bundle under that id. A's Dequeue of "x" (A remembers its own cut) must
// acknowledge the new bundle, exactly its notifications, and nothing is
// delivered again.
func TestADequeueOfAnOwnBundleIDReusedElsewhereAcknowledgesTheNewBundle(t *testing.T) {
	clock, _, repos := retainingInstances(t)
	a, b := repos[0], repos[1]
	ctx := context.Background()
	r := uuid.NewString()
	since := clock.Now().Add(-time.Minute)

	first := notifications(2, r, 1)
	if _, err := a.Save(ctx, first); err != nil {
		t.Fatal(err)
	}
	x, err := a.Peek(ctx, r, domain.GroupAll, "x")
	if err != nil || x == nil || !slices.Equal(x.NotificationIDs, ids(first)) {
		t.Fatalf("peek through A = %v, %v", x, err)
	}
	if err := b.Dequeue(ctx, r, "x"); err != nil {
		t.Fatal(err)
	}
	clock.advance(8 * 24 * time.Hour)
	if err := b.SweepSince(ctx, since); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DequeuedBundle(ctx, r, "x"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("bundle x after its retention: %v; want NOT_FOUND", err)
	}

	second := notifications(3, r, 1)
	if _, err := b.Save(ctx, second); err != nil {
		t.Fatal(err)
	}
	again, err := b.Peek(ctx, r, domain.GroupAll, "x")
	if err != nil || again == nil || !slices.Equal(again.NotificationIDs, ids(second)) {
		t.Fatalf("peek through B naming the freed id = %v, %v; want %v", again, err, ids(second))
	}
	if err := a.Dequeue(ctx, r, "x"); err != nil {
		t.Fatalf("dequeue through A of the id's new bundle: %v", err)
	}
	back, err := b.DequeuedBundle(ctx, r, "x")
	if err != nil || !slices.Equal(back.NotificationIDs, ids(second)) {
		t.Fatalf("bundle x reads back as %v, %v; want %v", back, err, ids(second))
	}
	for _, repo := range repos {
		if next, err := repo.Peek(ctx, r, domain.GroupAll, ""); err != nil || next != nil {
			t.Fatalf("peek after the dequeue = %v, %v; want nothing", next, err)
		}
	}
}

// A's Peek of one group loads a recipient with two cabinets waiting, one
// in each of two groups; A dequeues the bundle of the first. That drain
// proves nothing about the other cabinet: A's next Peek of all groups
// loads in full and returns it. Then two cabinets of one group: a drain
// of the oldest leaves the other found.
func TestAnOwnDrainOfOneOfTwoWaitingCabinetsLeavesTheOtherFound(t *testing.T) {
	_, repos := twoInstances(t, laggingServer(t))
	a, b := repos[0], repos[1]
	ctx := context.Background()

	r := uuid.NewString()
	charges := notifications(2, r, 1)
	for i := range charges {
		charges[i].Origin = domain.OriginCharges
	}
	series := notifications(2, r, 1)
	if _, err := b.Save(ctx, append(slices.Clone(series), charges...)); err != nil {
		t.Fatal(err)
	}
	got, err := a.Peek(ctx, r, domain.GroupTimeSeries, "")
	if err != nil || got == nil || !slices.Equal(got.NotificationIDs, ids(series)) {
		t.Fatalf("peek of time series = %v, %v", got, err)
	}
	if err := a.Dequeue(ctx, r, got.ID); err != nil {
		t.Fatal(err)
	}
	rest, err := a.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || rest == nil || !slices.Equal(rest.NotificationIDs, ids(charges)) {
		t.Fatalf("peek after the time series' dequeue = %v, %v; want %v", rest, err, ids(charges))
	}
	if err := a.Dequeue(ctx, r, rest.ID); err != nil {
		t.Fatal(err)
	}
	if next, err := a.Peek(ctx, r, domain.GroupAll, ""); err != nil || next != nil {
		t.Fatalf("peek after both dequeues = %v, %v; want nothing", next, err)
	}

	r = uuid.NewString()
	older := notifications(1, r, 1)
	newer := notifications(1, r, 1)
	newer[0].ContentType, newer[0].DocumentType = "rsm-012", "rsm-012"
	if _, err := b.Save(ctx, older); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Save(ctx, newer); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, a, r, append(ids(older), ids(newer)...))
}

// A cuts a bundle, B releases it (the cursor stays), A's next Peek cuts
// the same notifications again as a new bundle and A dequeues that one:
// A's Dequeue of the released id is NOT_FOUND, A's next Peek is empty,
// and a save through B after it is found by A.
func TestAReleaseElsewhereThenAnOwnRecutAndDrainHidesNothing(t *testing.T) {
	_, repos := twoInstances(t, laggingServer(t))
	a, b := repos[0], repos[1]
	ctx := context.Background()
	r := uuid.NewString()
	ns := notifications(2, r, 1)
	if _, err := a.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	x, err := a.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || x == nil {
		t.Fatalf("peek = %v, %v", x, err)
	}
	if _, err := b.ReleaseBundle(ctx, r, x.ID); err != nil {
		t.Fatal(err)
	}
	y, err := a.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || y == nil || y.ID == x.ID || !slices.Equal(y.NotificationIDs, ids(ns)) {
		t.Fatalf("peek after the release = %v, %v; want the notifications again in a new bundle", y, err)
	}
	if err := a.Dequeue(ctx, r, x.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("dequeue of the released bundle: %v; want NOT_FOUND", err)
	}
	if err := a.Dequeue(ctx, r, y.ID); err != nil {
		t.Fatal(err)
	}
	if next, err := a.Peek(ctx, r, domain.GroupAll, ""); err != nil || next != nil {
		t.Fatalf("peek after the drain = %v, %v; want nothing", next, err)
	}
	more := notifications(1, r, 1)
	if _, err := b.Save(ctx, more); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, a, r, ids(more))
}

// A remembers the load of its last full Peek, which saw cabinet C without
// a cursor (its first bundle), and drained C itself, so that its next
// Peeks are answered by the head and load nothing. Retention then takes
// the drained cabinet out of the catalog with its cursor and B's save
// starts it afresh at position 0, in a new drawer, again without a
// cursor. An operator's AcknowledgeOnBehalf through A creates a bundle of
// the new cabinet from a load of its own and fails before acknowledging
// it; the actor peeks that bundle through B and dequeues it through A.
// A's Dequeue must name the drawer that holds the bundle's notifications:
// the dequeued bundle reads back exactly them, and retention keeps them.
// (A created the bundle on a cursor that did not exist, as the old load
// also showed C: the memory must not pair that creation with the old
// cabinet's drawers.)
func TestAnOwnBundleOfARestartedCabinetIsNotDequeuedWithTheOldCabinetsDrawers(t *testing.T) {
	opts := cosmostest.Default()
	opts.Lag = 0
	srv := cosmostest.StartWith(t, opts)
	db := cosmostest.UniqueID("db")
	clock := &costClock{now: time.Now()}
	f := &faulty{next: cosmostest.NewHTTPClient()}
	repos := make([]*hub.Hub, 2)
	for i := range repos {
		cfg := cosmos.Config{
			Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: cosmostest.NewHTTPClient(),
			Throughput: "manual=100000", Now: clock.Now,
		}
		if i == 0 {
			cfg.Transport = f
		}
		s, err := cosmos.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		repos[i] = hub.New(withoutBells{s}, hub.Options{Now: clock.Now, Retention: 7 * 24 * time.Hour, SweepInterval: time.Hour, MaxCabinetDrawers: 1}, nil)
		t.Cleanup(repos[i].Close)
	}
	a, b := repos[0], repos[1]
	ctx := context.Background()
	r := uuid.NewString()
	since := clock.Now().Add(-time.Minute)

	first := notifications(2, r, 1)
	if _, err := a.Save(ctx, first); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, a, r, ids(first)) // its last Peek is answered by the head

	clock.advance(8 * 24 * time.Hour)
	if err := b.SweepSince(ctx, since); err != nil {
		t.Fatal(err)
	}
	second := notifications(2, r, 1)
	if _, err := b.Save(ctx, second); err != nil {
		t.Fatal(err)
	}

	// The operator's call through A stops once its bundle is created:
	// every later request of A to the recipients container is refused.
	var created atomic.Bool
	f.set(func(req *http.Request) int {
		if !toContainer(req, "recipients") || !strings.Contains(req.Header.Get("x-ms-documentdb-partitionkey"), r) {
			return 0
		}
		if created.Load() {
			return http.StatusForbidden
		}
		if req.Body != nil {
			raw, _ := io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(raw))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil }
			if strings.Contains(string(raw), `"t":"slot"`) {
				created.Store(true)
			}
		}
		return 0
	})
	if _, err := a.AcknowledgeOnBehalf(ctx, r, domain.OriginTimeSeries, "rsm-014", second[1].ID); err == nil {
		t.Fatal("AcknowledgeOnBehalf succeeded though its acknowledge was refused")
	}
	f.set(func(*http.Request) int { return 0 })
	if !created.Load() {
		t.Fatal("AcknowledgeOnBehalf created no bundle")
	}

	w, err := b.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || w == nil || !slices.Equal(w.NotificationIDs, ids(second)) {
		t.Fatalf("peek through B = %v, %v; want the operator's bundle of %v", w, err, ids(second))
	}
	if err := a.Dequeue(ctx, r, w.ID); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	back, err := b.DequeuedBundle(dctx, r, w.ID)
	if err != nil || !slices.Equal(back.NotificationIDs, ids(second)) {
		t.Fatalf("the bundle dequeued through A reads back as %v, %v; want %v", back, err, ids(second))
	}
}
