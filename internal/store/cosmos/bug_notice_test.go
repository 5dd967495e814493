package cosmos_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// A removal of notices whose batch finds one gone deletes the others one
// at a time; when such a delete's answer is lost, the transport's resend
// meets a 404, taken (rightly) for removed. The same process's next look
// at the notices must not list the removed notice again (its domain would
// be told twice): the 404's session token must be kept as a success's is.
func TestBugARemovedNoticeIsNotListedAgainAfterALostDeleteAnswer(t *testing.T) {
	// Every read that names no later write is served as of 2 s ago: a
	// lagging replica, deterministically.
	opts := cosmostest.Default()
	opts.Lag, opts.LagFixed = 2*time.Second, true
	srv := cosmostest.StartWith(t, opts)
	db := cosmostest.UniqueID("db")
	s, err := cosmos.Open(context.Background(), cosmos.Config{
		Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: cosmostest.NewHTTPClient(),
	})
	if err != nil {
		t.Fatal(err)
	}
	repo := hub.New(s, hub.Options{Notices: func(domain.Origin) bool { return true }}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	b1 := cycleOne(t, repo, r, domain.OriginCharges)
	b2 := cycleOne(t, repo, r, domain.OriginCharges)
	all, err := s.Notices(ctx, domain.Origins, 10)
	if err != nil || len(all) != 2 {
		t.Fatalf("notices: %+v, %v; want 2", all, err)
	}
	var first []store.Notice
	for _, n := range all {
		if n.BundleID == b1 {
			first = append(first, n)
		}
	}
	if err := s.RemoveNotices(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddFaults(cosmostest.Fault{Kind: cosmostest.LostUnavailable, Count: 1, Ops: []string{"delete"},
		DB: db, Coll: "recipients", ID: "^" + regexp.QuoteMeta("n:"+b2+":")}); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveNotices(ctx, all); err != nil {
		t.Fatalf("removal: %v", err)
	}
	if rules, err := srv.Faults(); err != nil || len(rules) != 1 || rules[0].Fired != 1 {
		t.Fatalf("faults %+v, %v: the delete's answer was not lost; the test tested nothing", rules, err)
	}
	left, err := s.Notices(ctx, domain.Origins, 10)
	if err != nil || len(left) != 0 {
		t.Fatalf("notices after their removal: %+v, %v; want none", left, err)
	}
}
