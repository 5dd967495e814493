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

// A recipient over its retained bytes has its bundles removed before the
// retention ends (retention.go), and with them their ids are free again;
// their notices, which their domain may not have taken yet, stay until
// their own ttl (the full retention). An actor that peeks with such an id
// gets a new bundle under it, and its Dequeue writes the notice of that
// id: a create that met the old notice failed the whole batch (409, a
// conflict), every retry met it again, and the bundle could not be
// dequeued (UNAVAILABLE after the hub's retries), its group stuck behind it
// for as long as the old notice lived.
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
}
