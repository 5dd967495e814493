package cosmos_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// A recipient that dequeues more than its whole budget of retained bytes
// between two passes has its retention shortened to less than the time
// since the last pass: the cutoff falls after since, so the bundles
// dequeued between since and the cutoff are both new (the visit's query)
// and over the bound (the trim's). Each must be removed once: a bundle
// listed twice is deleted twice in the catalog batch, which then fails
// whole, pass after pass, and the bound never acts.
func TestABoundShorterThanThePassRemovesEachBundleOnce(t *testing.T) {
	const bundles, budget = 30, 5_000 // ≈ 700 bytes a bundle: several budgets in one pass
	clock := &costClock{now: time.Now()}
	db := cosmostest.UniqueID("db")
	s := open(t, cosmos.Config{Database: db, Throughput: "manual=1000000", Now: clock.Now})
	cosmos.SetRetainedBudget(s, budget)
	repo := hub.New(s, hub.Options{Now: clock.Now, Retention: 7 * 24 * time.Hour, SweepInterval: time.Hour}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	since := clock.Now().Add(-time.Minute) // the last pass started just before
	ns := notifications(bundles, r, 1)
	for i := range ns {
		ns[i].SupportsBundling = false // a bundle each
	}
	if _, err := repo.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, repo, r, ids(ns))
	clock.advance(10 * time.Minute)
	if err := repo.SweepSince(ctx, since); err != nil {
		t.Fatal(err)
	}
	// The budget holds about 2 minutes of this rate; every bundle is 10
	// minutes old.
	if n, bytes := retainedBundles(t, db, r); n != 0 {
		t.Fatalf("%d of %d bundles (%d bytes) are retained after the pass, against a budget of %d bytes", n, bundles, bytes, budget)
	}
}
