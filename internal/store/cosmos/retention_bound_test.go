package cosmos_test

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// The worst case of docs/cosmos.md's partition arithmetic, scaled down: a
// recipient dequeues bundles of one notification as fast as it can, pass
// after pass, under 7-day retention, against a budget of 60 KB for its
// retained bundles instead of 10 GB. Without the bound its retained bundles
// grow with every pass (540 after 27 passes); with it they stay within the
// budget and one pass's worth, the oldest going first, while its other
// cabinet's waiting notification is untouched and delivered.
func TestRetainedBundlesStayWithinTheirPartitionsBudget(t *testing.T) {
	const retention, interval, perPass, passes, budget = 7 * 24 * time.Hour, 10 * time.Minute, 20, 27, 60_000
	clock := &costClock{now: time.Now()}
	db := cosmostest.UniqueID("db")
	s := open(t, cosmos.Config{Database: db, Throughput: "manual=1000000", Now: clock.Now})
	cosmos.SetRetainedBudget(s, budget)
	repo := hub.New(s, hub.Options{Now: clock.Now, Retention: retention, SweepInterval: time.Hour}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	waiting := notifications(1, r, 1)
	waiting[0].Origin = domain.OriginCharges // a cabinet of its own, never peeked until the end
	if _, err := repo.Save(ctx, waiting); err != nil {
		t.Fatal(err)
	}
	last := clock.Now()
	var retained []int
	var bytes int64
	for range passes {
		ns := notifications(perPass, r, 1)
		for i := range ns {
			ns[i].SupportsBundling = false // a bundle each
		}
		if _, err := repo.Save(ctx, ns); err != nil {
			t.Fatal(err)
		}
		for range perPass {
			b, err := repo.Peek(ctx, r, domain.GroupTimeSeries, "")
			if err != nil || b == nil || len(b.NotificationIDs) != 1 {
				t.Fatalf("peek: %+v, %v", b, err)
			}
			if err := repo.Dequeue(ctx, r, b.ID); err != nil {
				t.Fatal(err)
			}
		}
		clock.advance(interval)
		start := clock.Now()
		if err := repo.SweepSince(ctx, last.Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
		last = start
		var n int
		n, bytes = retainedBundles(t, db, r)
		retained = append(retained, n)
	}
	t.Logf("retained bundles after each pass: %v (%d bytes with system properties at the end, budget %d)", retained, bytes, budget)
	// The bound is a rate measured over a pass: one pass's bundles more
	// may be retained at the moment of the measure.
	if limit := int64(budget) + perPass*bytes/int64(retained[passes-1]); bytes > limit {
		t.Fatalf("%d bytes of retained bundles, want at most %d", bytes, limit)
	}
	if retained[passes-1] >= passes*perPass {
		t.Fatalf("every bundle retained (%d): the bound never acted", retained[passes-1])
	}
	b, err := repo.Peek(ctx, r, domain.GroupMasterData, "")
	if err != nil || b == nil || len(b.NotificationIDs) != 1 || b.NotificationIDs[0] != waiting[0].ID {
		t.Fatalf("the waiting notification: %+v, %v", b, err)
	}
}

// retainedBundles counts the recipient's dequeued bundles' documents and
// their bytes as stored (with the system properties and index terms the
// store reckons per document).
func retainedBundles(t *testing.T, db, recipient string) (int, int64) {
	t.Helper()
	waitOutLag()
	pager := containerOf(t, db, "recipients").NewQueryItemsPager("SELECT * FROM c WHERE c.t = 'dequeued'",
		azcosmos.NewPartitionKeyString(recipient), nil)
	n, bytes := 0, int64(0)
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range page.Items {
			n++
			bytes += int64(len(raw)) + 250 - 150 // the query returns the system properties (≈ 150 bytes)
		}
	}
	return n, bytes
}
