package cosmos_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// The figures' holder reads the change feed, then each recipient it names
// in a query of its own: the feed carries no deletes, so the recipient's
// state is taken from its partition. The holder has no session token for
// the other instances' writes, so each read is served by a replica as far
// behind as the lag allows, and the query may not see the change the feed
// showed: the recipient's figures are then taken from its state before
// the change, and stay so until it changes again or the daily recount,
// since the feed goes on past the change. The query must see at least
// what the feed read showed.
//
// The test server serves each read as of a random moment up to the lag
// (an hour) in the past, and the saves are half an hour old when the
// holder reads: each read sees all of them or none, at even odds, on the
// server's clock, whatever the machine's speed. Reads go on until the
// feed has named the recipients; without the bound on the queries, about
// half of those named are read before their save, so that some of 16 are
// hit unless the odds fail 1 in 65,000 times.
func TestTheFiguresReadARecipientAtLeastAsFreshAsTheFeedThatNamedIt(t *testing.T) {
	const recipients, reads = 16, 12
	opts := cosmostest.Default()
	opts.Lag, opts.LagFixed = time.Hour, false
	srv := cosmostest.StartWith(t, opts)
	db := cosmostest.UniqueID("db")
	stores := make([]*cosmos.Store, 2)
	for i := range stores {
		s, err := cosmos.Open(context.Background(), cosmos.Config{
			Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: cosmostest.NewHTTPClient(),
			Throughput: "manual=100000",
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s
	}
	a := hub.New(withoutBells{stores[0]}, hub.Options{}, nil)
	t.Cleanup(a.Close)
	holder := stores[1]
	ctx := context.Background()
	start, err := holder.ChangedBacklog(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	cursor := start.Cursor
	for range recipients {
		if _, err := a.Save(ctx, notifications(1, uuid.NewString(), 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.AdvanceClock(30 * time.Minute); err != nil {
		t.Fatal(err)
	}
	last := map[string]store.RecipientRecords{}
	for range reads {
		ch, err := holder.ChangedBacklog(ctx, cursor)
		if err != nil {
			t.Fatal(err)
		}
		cursor = ch.Cursor
		for _, rec := range ch.Recipients {
			last[rec.Recipient] = rec
		}
	}
	if len(last) == 0 {
		t.Fatal("no read of the feed named a recipient: the test tested nothing")
	}
	for r, rec := range last {
		waiting := int64(0)
		for _, e := range rec.Entries {
			waiting += e.Total
		}
		for _, c := range rec.Cursors {
			waiting -= c.Acked
		}
		if waiting != 1 {
			t.Errorf("recipient %s, named by the feed after its save of one notification, is read with %d waiting", r, waiting)
		}
	}
	t.Logf("%d of %d recipients named by the feed", len(last), recipients)
}

// A recount (the figures' holder taking the lease over, or the daily one)
// first finds where the change feed is now (ChangedBacklog from no
// cursor), then counts every recipient (ScanBacklog), and from then on
// reads only what the feed shows after that point. The count must see at
// least what the feed's start showed: a change the feed has gone past but
// the count's replica had not yet applied is in neither, and its
// recipient's figures stay as before it until it changes again or the
// next recount, a day later.
//
// As above, each read is served as of a random moment up to an hour back
// and the saves are half an hour old: over the eight ranges, the start of
// the feed goes past some of them at even odds, and the count, a read of
// its own, misses them at even odds. Each round saves to new recipients
// and recounts as the holder does, then lets every replica catch up before
// it reads the changes after the start, so that those reads see all that
// the start did not go past (three reads of lagging replicas could miss a
// change that a later read would bring); without the bound on the count, a
// round hits the bug about half the time, so that the rounds all miss it 1
// in 4,000 times.
func TestARecountSeesAtLeastWhatTheFeedItStartsAfterShowed(t *testing.T) {
	const rounds, recipients, reads = 12, 16, 3
	opts := cosmostest.Default()
	opts.Lag, opts.LagFixed, opts.Ranges = time.Hour, false, 8
	srv := cosmostest.StartWith(t, opts)
	stores, repos := twoInstances(t, srv)
	a, holder := repos[0], stores[1]
	ctx := context.Background()
	saved := 0
	for round := range rounds {
		for range recipients {
			if _, err := a.Save(ctx, notifications(1, uuid.NewString(), 1)); err != nil {
				t.Fatal(err)
			}
			saved++
		}
		if err := srv.AdvanceClock(30 * time.Minute); err != nil {
			t.Fatal(err)
		}
		// The holder's recount, then its updates: a recipient read later
		// replaces what the recount read of it.
		start, err := holder.ChangedBacklog(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		waiting := map[string]int64{}
		set := func(r store.RecipientRecords) {
			n := int64(0)
			for _, e := range r.Entries {
				n += e.Total
			}
			for _, c := range r.Cursors {
				n -= c.Acked
			}
			waiting[r.Recipient] = n
		}
		if _, err := holder.ScanBacklog(ctx, func(r store.RecipientRecords) error { set(r); return nil }); err != nil {
			t.Fatal(err)
		}
		// Every replica catches up: the reads that follow see every change
		// after the feed's start, so what they cannot make up for is only
		// what the start went past and the count missed.
		if err := srv.AdvanceClock(time.Hour + time.Minute); err != nil {
			t.Fatal(err)
		}
		cursor := start.Cursor
		for range reads {
			ch, err := holder.ChangedBacklog(ctx, cursor)
			if err != nil {
				t.Fatal(err)
			}
			cursor = ch.Cursor
			for _, r := range ch.Recipients {
				set(r)
			}
		}
		counted := 0
		for _, n := range waiting {
			if n == 1 {
				counted++
			}
		}
		if counted != saved {
			t.Fatalf("round %d: a recount and %d reads of the changes after it count %d recipients with a notification waiting; %d have one", round, reads, counted, saved)
		}
	}
}
