package cosmos_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// The notices' container splits while a notifier's looks go on from a
// kept continuation, with replicas an hour behind (what this instance
// reads is what its session tokens cover): every notice, written before
// and after the split, comes up within a bounded number of looks of 2,
// its bundle reads as the dequeue left it, and once removed none is
// listed again.
func TestNoticesComeUpAcrossASplit(t *testing.T) {
	opts := cosmostest.Default()
	opts.Ranges, opts.Lag, opts.LagFixed = 2, time.Hour, true
	srv := cosmostest.StartWith(t, opts)
	db := cosmostest.UniqueID("db")
	s, err := cosmos.Open(context.Background(), cosmos.Config{
		Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: cosmostest.NewHTTPClient(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	repo := hub.New(s, hub.Options{Notices: func(domain.Origin) bool { return true }}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	want := map[string]bool{}
	for range 6 {
		want[cycleOne(t, repo, uuid.NewString(), domain.OriginCharges)] = true
	}
	seen := map[string]store.Notice{}
	look := func() {
		t.Helper()
		batch, err := s.Notices(ctx, []domain.Origin{domain.OriginCharges}, 2)
		if err != nil {
			t.Fatalf("a look: %v", err)
		}
		for _, n := range batch {
			seen[n.BundleID] = n
		}
	}
	look() // a continuation is kept
	if _, err := srv.Split(db, "recipients", ""); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		want[cycleOne(t, repo, uuid.NewString(), domain.OriginCharges)] = true
	}
	for range 8 { // 8 notices, 2 a look: a few turns round
		look()
	}
	var all []store.Notice
	for id := range want {
		n, ok := seen[id]
		if !ok {
			t.Fatalf("notice of %s never came up in 9 looks of 2 at 8 notices across a split (seen %d)", id, len(seen))
		}
		if _, err := repo.NoticedBundle(ctx, n); err != nil {
			t.Fatalf("the bundle of the notice of %s: %v", id, err)
		}
		all = append(all, n)
	}
	if err := s.RemoveNotices(ctx, all); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if left, err := s.Notices(ctx, []domain.Origin{domain.OriginCharges}, 10); err != nil || len(left) != 0 {
			t.Fatalf("notices after their removal: %+v (%v); want none", left, err)
		}
	}
}
