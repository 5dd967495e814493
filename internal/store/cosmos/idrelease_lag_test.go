package cosmos_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// A save for two recipients writes an id document in each of two buckets,
// each listing its own recipient's drawer. When retention frees one of the
// drawers it reads the save's id documents, one query per bucket; the
// sweeping instance holds no session token of the ids container (another
// instance saved), so each query may be served by a replica behind the
// save. One that showed the freed drawer's document but not the other's
// made the sweep take the first for the save's last and delete the commit
// record with it: the other document, listing a drawer that still holds
// its notification, then counted for no look-up, and a resend of that
// notification was stored and delivered twice.
//
// The test server serves each read as of a random moment up to the lag (an
// hour) in the past, and each save's writes are half an hour old when the
// instance that dequeued (so that its visit sees the dequeue) sweeps: each
// bucket's query sees the save's document or not, at even odds, on the
// server's clock. Without the bucket queries on the primaries' tokens,
// about a quarter of the 24 trials lose the live recipient's ids (9 in a
// run), none only 1 in 1,000 times.
func TestASweepBehindAnotherInstancesSaveKeepsTheIDsOfItsLiveDrawers(t *testing.T) {
	const trials = 24
	opts := cosmostest.Default()
	opts.Lag, opts.LagFixed = time.Hour, false
	srv := cosmostest.StartWith(t, opts)
	db := cosmostest.UniqueID("db")
	clock := &costClock{now: time.Now()}
	hopts := hub.Options{Now: clock.Now, Retention: time.Hour, SweepInterval: time.Hour, MaxCabinetDrawers: 1}
	openHub := func() *hub.Hub { return lagHub(t, srv, db, hopts) }
	a := openHub()
	sweepers := make([]*hub.Hub, trials) // opened before the saves: no token of them
	for i := range sweepers {
		sweepers[i] = openHub()
	}
	ctx := context.Background()
	var live []domain.Notification
	buckets := cosmos.Buckets(cosmos.DefaultIDBuckets)
	for _, sweeper := range sweepers {
		// The live notification in the bucket read first, the swept one's
		// in the last.
		swept, kept := notifications(1, uuid.NewString(), 1)[0], notifications(1, uuid.NewString(), 1)[0]
		for cosmos.Bucket(cosmos.DefaultIDBuckets, kept.ID) != buckets[0] {
			kept.ID = uuid.NewString()
		}
		for cosmos.Bucket(cosmos.DefaultIDBuckets, swept.ID) != buckets[len(buckets)-1] {
			swept.ID = uuid.NewString()
		}
		live = append(live, kept)
		if _, err := a.Save(ctx, []domain.Notification{swept, kept}); err != nil {
			t.Fatal(err)
		}
		if err := srv.AdvanceClock(30 * time.Minute); err != nil {
			t.Fatal(err)
		}
		// The sweeper serves the dequeue, so that its visit sees it.
		drainExactly(t, sweeper, swept.Recipient, []string{swept.ID})
		clock.advance(3 * time.Hour) // the bundle is due; the last sweeper's lease is over
		if err := sweeper.SweepNow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.AdvanceClock(2 * time.Hour); err != nil { // every read sees every write
		t.Fatal(err)
	}
	lost := 0
	for _, n := range live {
		if _, err := a.Save(ctx, []domain.Notification{n}); err != nil {
			t.Fatal(err)
		}
		got := drainIDs(t, a, n.Recipient)
		if len(got) != 1 {
			lost++
			t.Errorf("recipient %s: its notification, still undelivered, was stored again by a resend: delivered %v", n.Recipient, got)
		}
	}
	t.Logf("%d of %d live notifications stored twice", lost, len(live))
}

// lagHub is a hub over a new instance of the store on db of srv, without
// bells, on the clock of opts.
func lagHub(t *testing.T, srv *cosmostest.Server, db string, opts hub.Options) *hub.Hub {
	t.Helper()
	s, err := cosmos.Open(context.Background(), cosmos.Config{
		Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: cosmostest.NewHTTPClient(),
		Throughput: "manual=100000", Now: opts.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	h := hub.New(withoutBells{s}, opts, nil)
	t.Cleanup(h.Close)
	return h
}

// drainIDs peeks and dequeues the recipient's bundles until none is left,
// and returns their notifications' ids.
func drainIDs(t *testing.T, repo *hub.Hub, recipient string) []string {
	t.Helper()
	ctx := context.Background()
	var got []string
	for range 10 {
		b, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			return got
		}
		got = append(got, b.NotificationIDs...)
		if err := repo.Dequeue(ctx, recipient, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("recipient %s: more than 10 bundles", recipient)
	return nil
}
