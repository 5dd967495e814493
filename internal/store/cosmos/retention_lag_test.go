package cosmos_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// A visit of retention that needs every retained bundle (sweepOfAll: here
// because a drawer's last bundle is retained between the due and the new
// ones) reads them in a query of its own after the visit's query. The
// sweeping instance holds no session token for the dequeues, which another
// instance made, so each read is served by a replica as far behind as the
// lag allows: the visit's query may see a cabinet acknowledged by a
// dequeue while the bundles' query, on a replica further behind, does not
// see the dequeued bundle. The drawer then looks named by no retained
// bundle and leaves the catalog unkept (its pages deleted, or left to
// nothing), though the bundle's record still reads from it. The bundles'
// query must see at least what the visit's saw.
//
// The test server serves each read as of a random moment up to the lag
// (an hour) in the past, and the writes are half an hour old when the
// sweeps run: each read sees all of them or none, at even odds, on the
// server's clock, whatever the machine's speed. Every recipient gets
// visits until one sees its dequeues; without the bound on the bundles'
// query, about half of those visits free the drawers, so that some of 16
// recipients are hit unless the odds fail 1 in 65,000 times.
func TestASweepReadsTheRetainedBundlesAtLeastAsFreshAsTheCatalog(t *testing.T) {
	const recipients, passes = 16, 12
	opts := cosmostest.Default()
	opts.Lag, opts.LagFixed = time.Hour, false
	srv := cosmostest.StartWith(t, opts)
	db := cosmostest.UniqueID("db")
	clock := &costClock{now: time.Now()}
	repos := make([]*hub.Hub, 2)
	for i := range repos {
		// Cabinets of one drawer leave the catalog once drained (others
		// keep their last drawer to append to), so that the visits decide
		// on every drawer.
		repos[i] = lagHub(t, srv, db, hub.Options{Now: clock.Now, Retention: 7 * 24 * time.Hour, SweepInterval: time.Hour, MaxCabinetDrawers: 1})
	}
	a, b := repos[0], repos[1]
	ctx := context.Background()
	rs := make([]string, recipients)
	bundles := map[string][]string{}
	cycle := func(r, contentType string) {
		ns := notifications(1, r, 1)
		ns[0].ContentType, ns[0].DocumentType = contentType, contentType
		bundles[r] = append(bundles[r], dequeueSaved(t, a, ns))
	}
	for i := range rs {
		rs[i] = uuid.NewString()
		cycle(rs[i], "rsm-012") // retained between the due and the new ones at the sweeps
	}
	clock.advance(time.Hour)
	since := clock.Now().Add(-time.Minute)
	for _, r := range rs {
		cycle(r, "rsm-014") // new at the sweeps
	}
	if err := srv.AdvanceClock(30 * time.Minute); err != nil {
		t.Fatal(err)
	}
	for range passes {
		if err := b.SweepSince(ctx, since); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.AdvanceClock(2 * time.Hour); err != nil { // every read sees every write
		t.Fatal(err)
	}
	c, err := cosmostest.NewClient(t, srv).NewContainer(db, "recipients")
	if err != nil {
		t.Fatal(err)
	}
	swept := 0
	for _, r := range rs {
		kept, named, entries := retainedDrawers(t, c, r)
		if entries < 2 {
			swept++
		}
		for _, d := range named {
			if !slices.Contains(kept, d) {
				t.Errorf("recipient %s: drawer %s, which a retained bundle reads, is in no entry and no kept record (of %v)", r, d, kept)
			}
		}
		for _, id := range bundles[r] {
			if _, err := a.DequeuedBundle(ctx, r, id); err != nil {
				t.Errorf("recipient %s: the retained bundle %s can no longer be read: %v", r, id, err)
			}
		}
	}
	if swept == 0 {
		t.Fatal("no visit saw a recipient's dequeues: the test tested nothing")
	}
	t.Logf("%d of %d recipients swept", swept, recipients)
}

// retainedDrawers reads the recipient's partition: the drawers its entries,
// shelves and kept records hold, the drawers its retained bundles name, and
// how many entries it has.
func retainedDrawers(t *testing.T, c *azcosmos.ContainerClient, recipient string) (held, named []string, entries int) {
	t.Helper()
	pager := c.NewQueryItemsPager(
		"SELECT * FROM c WHERE c.t IN ('entry', 'shelf', 'kept', 'dequeued')", azcosmos.NewPartitionKeyString(recipient), nil)
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range page.Items {
			var d struct {
				T  string          `json:"t"`
				DR json.RawMessage `json:"dr"`
			}
			if err := json.Unmarshal(raw, &d); err != nil {
				t.Fatal(err)
			}
			var ids []string
			switch d.T {
			case "kept":
				if err := json.Unmarshal(d.DR, &ids); err != nil {
					t.Fatal(err)
				}
			default:
				var metas []struct {
					ID string `json:"id"`
				}
				if len(d.DR) > 0 {
					if err := json.Unmarshal(d.DR, &metas); err != nil {
						t.Fatal(err)
					}
				}
				for _, m := range metas {
					ids = append(ids, m.ID)
				}
			}
			if d.T == "dequeued" {
				named = append(named, ids...)
			} else {
				held = append(held, ids...)
			}
			if d.T == "entry" {
				entries++
			}
		}
	}
	return held, named, entries
}

// A visit's query is answered in pages, each of which may show another
// moment: here its page of the entry comes before, and its page of the
// cursor after, another instance appends to the cabinet's drawer and
// dequeues what it appended. The visit sees the drawer's notifications up
// to the entry's end acknowledged and their bundle due, and frees the
// drawer; its catalog batch fails on the entry that changed, but the pages
// went first. Below the cursor it read, they were the appended ones too,
// with their ids, though their bundle is retained: its notice could no
// longer be built and a resend of their ids was saved again.
func TestAVisitWhoseEntryIsOlderThanItsCursorKeepsWhatTheEntryDoesNotShow(t *testing.T) {
	r := uuid.NewString()
	clock := &costClock{now: time.Now()}
	a, b, paged := pagedPairWith(t, r, hub.Options{Retention: time.Hour, SweepInterval: time.Hour, Now: clock.Now})
	ctx := context.Background()
	first := notifications(3, r, 1)
	if _, err := b.Save(ctx, first); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, b, r, idsOf(first)) // due once the clock moves
	clock.advance(2 * time.Hour)
	swept := make(chan error, 1)
	go func() { swept <- a.SweepNow(ctx) }()
	select {
	case <-paged.held: // the visit read the entry, not yet the cursor
	case err := <-swept:
		t.Fatalf("the sweep answered %v without asking for a second page; the test tested nothing", err)
	}
	appended := notifications(2, r, 1) // in the same drawer
	retained := dequeueSaved(t, b, appended)
	close(paged.release)
	if err := <-swept; err != nil {
		t.Fatal(err)
	}
	if again, err := b.DequeuedBundle(ctx, r, retained); err != nil || !slices.Equal(again.NotificationIDs, idsOf(appended)) {
		t.Fatalf("the retained bundle reads %v, %v; want %v", again, err, idsOf(appended))
	}
	if res, err := b.Save(ctx, appended); err != nil || res.Duplicates != len(appended) {
		t.Fatalf("a resend of a retained bundle's notifications: %+v, %v; want them all duplicates", res, err)
	}
}

// dequeueSaved saves ns, all for one recipient, peeks the recipient's next
// bundle and dequeues it, and returns its id.
func dequeueSaved(t *testing.T, repo *hub.Hub, ns []domain.Notification) string {
	t.Helper()
	ctx := context.Background()
	if _, err := repo.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	bundle, err := repo.Peek(ctx, ns[0].Recipient, domain.GroupAll, "")
	if err != nil || bundle == nil {
		t.Fatalf("peek: %v, %v", bundle, err)
	}
	if err := repo.Dequeue(ctx, ns[0].Recipient, bundle.ID); err != nil {
		t.Fatal(err)
	}
	return bundle.ID
}

// Two instances visit one recipient at once (the sweeper's lease ran out
// while its pass went on). The first visit's query, answered in pages,
// reads the drained cabinet's entry and cursor in its first page; then the
// second visit takes the cabinet out, entry and cursor, and a save starts
// it afresh at position 0 in a new drawer; then the first visit's next
// page shows the new entry. It pairs the new entry with the old cursor,
// which says its positions are acknowledged: the new notifications, which
// nobody peeked, looked drained, and their pages went before the visit's
// catalog batch failed on the old entry, gone.
func TestAVisitSpanningAnotherVisitAndARestartOfTheCabinetKeepsItsNewNotifications(t *testing.T) {
	r := uuid.NewString()
	clock := &costClock{now: time.Now()}
	a, b, paged := pagedPairWith(t, r, hub.Options{Retention: time.Hour, SweepInterval: time.Hour, Now: clock.Now})
	paged.size = 3 // the entry, the first bundle and the cursor; the second bundle in the next page
	ctx := context.Background()
	dequeueSaved(t, b, notifications(2, r, 1))
	dequeueSaved(t, b, notifications(1, r, 1))
	clock.advance(2 * time.Hour)
	swept := make(chan error, 1)
	go func() { swept <- a.SweepNow(ctx) }()
	select {
	case <-paged.held:
	case err := <-swept:
		t.Fatalf("the sweep answered %v without asking for a second page; the test tested nothing", err)
	}
	if err := b.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	fresh := notifications(3, r, 1)
	if _, err := b.Save(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	close(paged.release)
	if err := <-swept; err != nil {
		t.Fatal(err)
	}
	drainExactly(t, b, r, idsOf(fresh))
}
