package cosmos_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// cycleOne saves one notification of origin for the recipient, peeks and
// dequeues it, and returns the bundle id.
func cycleOne(t *testing.T, repo *hub.Hub, recipient string, origin domain.Origin) string {
	t.Helper()
	ctx := context.Background()
	n := domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: origin, ContentType: "c", DocumentType: "c", Weight: 1}
	if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
		t.Fatal(err)
	}
	b, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("peek: %v %v", b, err)
	}
	if err := repo.Dequeue(ctx, recipient, b.ID); err != nil {
		t.Fatal(err)
	}
	if err := repo.Dequeue(ctx, recipient, b.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("a second dequeue: %v", err)
	}
	return b.ID
}

// A notice is written by its dequeue's batch only, for the domains that get notices;
// notices are read in batches across recipients, counted, and removed, a
// notice already removed being no error.
func TestNoticesAreWrittenWithTheirDequeueOnly(t *testing.T) {
	s := open(t, cosmos.Config{})
	repo := hub.New(s, hub.Options{Notices: func(o domain.Origin) bool { return o == domain.OriginCharges }}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	var want []string
	for range 5 {
		recipient := uuid.NewString()
		want = append(want, cycleOne(t, repo, recipient, domain.OriginCharges))
		cycleOne(t, repo, recipient, domain.OriginAggregations) // gets no notices
	}
	n, oldest, err := s.NoticeBacklog(ctx)
	if err != nil || n != 5 || oldest.IsZero() || time.Since(oldest) > time.Minute {
		t.Fatalf("backlog %d, oldest %v (%v); want 5, just now", n, oldest, err)
	}
	first, err := s.Notices(ctx, domain.Origins, 3)
	if err != nil || len(first) != 3 {
		t.Fatalf("notices %+v (%v); want 3", first, err)
	}
	if !slices.IsSortedFunc(first, func(a, b store.Notice) int { return a.DequeuedAt.Compare(b.DequeuedAt) }) {
		t.Fatalf("a batch not oldest first: %+v", first)
	}
	if err := s.RemoveNotices(ctx, first); err != nil {
		t.Fatal(err)
	}
	rest, err := s.Notices(ctx, domain.Origins, 10)
	if err != nil || len(rest) != 2 {
		t.Fatalf("notices after removing 3: %+v (%v); want 2", rest, err)
	}
	var got []string
	for _, n := range append(first, rest...) {
		got = append(got, n.BundleID)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("notices of %v, want %v", got, want)
	}
	if err := s.RemoveNotices(ctx, append(rest, first...)); err != nil {
		t.Fatalf("removing notices some of which are gone: %v", err)
	}
	if n, _, err := s.NoticeBacklog(ctx); err != nil || n != 0 {
		t.Fatalf("%d notices after removal (%v)", n, err)
	}
}

// Notices carry their domain and are read by domain: a domain left out of
// the query is not read, however many notices it has; its bundle's record
// is one point read, and a pending bundle's is not found.
func TestNoticesAreReadByDomain(t *testing.T) {
	s := open(t, cosmos.Config{})
	repo := hub.New(s, hub.Options{Notices: func(domain.Origin) bool { return true }}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	want := map[domain.Origin][]string{}
	for _, o := range []domain.Origin{domain.OriginCharges, domain.OriginTimeSeries, domain.OriginCharges, domain.OriginCharges} {
		want[o] = append(want[o], cycleOne(t, repo, uuid.NewString(), o))
	}
	for _, o := range []domain.Origin{domain.OriginTimeSeries, domain.OriginCharges} {
		got, err := s.Notices(ctx, []domain.Origin{o}, 10)
		if err != nil || len(got) != len(want[o]) {
			t.Fatalf("notices of %v: %+v (%v); want %d", o, got, err, len(want[o]))
		}
		for _, n := range got {
			if n.Origin != o || !slices.Contains(want[o], n.BundleID) {
				t.Fatalf("notice of %v: %+v; want one of %v", o, n, want[o])
			}
			rec, err := s.DequeuedBundle(ctx, n.Recipient, n.BundleID)
			if err != nil || rec.ID != n.BundleID || rec.Origin != o || !rec.DequeuedAt.Equal(n.DequeuedAt) {
				t.Fatalf("the record of %+v: %+v (%v)", n, rec, err)
			}
		}
	}
	if got, err := s.Notices(ctx, []domain.Origin{domain.OriginAggregations, domain.OriginUnspecified}, 10); err != nil || len(got) != 0 {
		t.Fatalf("notices of domains with none: %+v (%v)", got, err)
	}
	recipient := uuid.NewString()
	n := domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges, ContentType: "c", DocumentType: "c", Weight: 1}
	if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
		t.Fatal(err)
	}
	b, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("peek: %v %v", b, err)
	}
	for _, id := range []string{b.ID, uuid.NewString()} {
		if _, err := repo.DequeuedBundle(ctx, recipient, id); !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("bundle %s, pending or unknown: %v; want not found", id, err)
		}
	}
}

// Looks at a backlog larger than a batch go on where the last one stopped
// and wrap round, so every notice comes up even when none is removed (a
// domain that keeps failing, or ranges read first that never drain).
func TestNoticesLooksTakeTurns(t *testing.T) {
	s := open(t, cosmos.Config{})
	repo := hub.New(s, hub.Options{Notices: func(domain.Origin) bool { return true }}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	want := map[string]bool{}
	for range 5 {
		want[cycleOne(t, repo, uuid.NewString(), domain.OriginMarketRoles)] = true
	}
	seen := map[string]int{}
	for range 3 {
		batch, err := s.Notices(ctx, []domain.Origin{domain.OriginMarketRoles}, 2)
		if err != nil || len(batch) != 2 {
			t.Fatalf("a look: %+v (%v); want 2 notices", batch, err)
		}
		for _, n := range batch {
			seen[n.BundleID]++
		}
	}
	for id := range want {
		if seen[id] == 0 {
			t.Fatalf("notice of %s never came up in three looks of 2 at 5 notices: %v", id, seen)
		}
	}
	all, err := s.Notices(ctx, []domain.Origin{domain.OriginMarketRoles}, 10)
	if err != nil || len(all) != 5 {
		t.Fatalf("a look at all from mid-way: %+v (%v); want the 5 once each", all, err)
	}
	for _, n := range all {
		delete(want, n.BundleID)
	}
	if len(want) != 0 {
		t.Fatalf("notices missing from a whole look: %v", want)
	}
}

// Each domain's looks go on where that domain's last look stopped, while
// the looks of domains' workers take turns: looks of 2 at 4 notices of one
// domain, interleaved with another domain's, still bring every notice up
// within two looks.
func TestEachDomainsLooksGoOnWhereTheirOwnStopped(t *testing.T) {
	s := open(t, cosmos.Config{})
	repo := hub.New(s, hub.Options{Notices: func(domain.Origin) bool { return true }}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	want := map[domain.Origin]map[string]bool{}
	for _, o := range []domain.Origin{domain.OriginCharges, domain.OriginMeteringPoints} {
		want[o] = map[string]bool{}
		for range 4 {
			want[o][cycleOne(t, repo, uuid.NewString(), o)] = true
		}
	}
	for range 2 {
		for _, o := range []domain.Origin{domain.OriginCharges, domain.OriginMeteringPoints} {
			batch, err := s.Notices(ctx, []domain.Origin{o}, 2)
			if err != nil || len(batch) != 2 {
				t.Fatalf("a look at %v: %+v (%v); want 2 notices", o, batch, err)
			}
			for _, n := range batch {
				delete(want[o], n.BundleID)
			}
		}
	}
	for o, left := range want {
		if len(left) != 0 {
			t.Fatalf("notices of %v not in two looks of 2 at 4: %v", o, left)
		}
	}
}

// The notifier reads a notice's bundle right after it found the notice, on
// another instance than the one that dequeued: under replica lag, that read
// must still see the dequeue (it carries the token of the notices' answer).
func TestANoticesBundleIsFoundUnderLag(t *testing.T) {
	opts := cosmostest.Default()
	opts.Lag, opts.Seed = 200*time.Millisecond, 7
	srv := cosmostest.StartWith(t, opts)
	db := cosmostest.UniqueID("db")
	stores := make([]*cosmos.Store, 2)
	repos := make([]*hub.Hub, 2)
	for i := range stores {
		s, err := cosmos.Open(context.Background(), cosmos.Config{
			Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: cosmostest.NewHTTPClient(),
		})
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
		repos[i] = hub.New(s, hub.Options{Notices: func(domain.Origin) bool { return true }}, nil)
		t.Cleanup(repos[i].Close)
	}
	ctx := context.Background()
	for range 15 {
		cycleOne(t, repos[0], uuid.NewString(), domain.OriginTimeSeries)
		// The notice shows once the replicas catch up (200 ms); a minute
		// only bounds a busy machine's wait for it.
		var notices []store.Notice
		for deadline := time.Now().Add(time.Minute); len(notices) == 0 && time.Now().Before(deadline); {
			var err error
			if notices, err = stores[1].Notices(ctx, domain.Origins, 10); err != nil {
				t.Fatal(err)
			}
		}
		if len(notices) != 1 {
			t.Fatalf("%d notices, want 1", len(notices))
		}
		if _, err := repos[1].DequeuedBundle(ctx, notices[0].Recipient, notices[0].BundleID); err != nil {
			t.Fatalf("the bundle of a notice just read: %v", err)
		}
		if err := stores[1].RemoveNotices(ctx, notices); err != nil {
			t.Fatal(err)
		}
		// The remover reads its own delete; the other instance may lag.
		if n, _, err := stores[1].NoticeBacklog(ctx); err != nil || n != 0 {
			t.Fatalf("%d notices after removal (%v)", n, err)
		}
	}
}

// Bundle ids are the actors': two recipients may dequeue bundles of one id,
// and each dequeue's notice is listed (a listing that took the id for the
// notice's name told one domain of one of them only).
func TestNoticesOfTwoRecipientsBundlesOfOneIDAreBothListed(t *testing.T) {
	s := open(t, cosmos.Config{})
	repo := hub.New(s, hub.Options{Notices: func(domain.Origin) bool { return true }}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	id := uuid.NewString()
	recipients := []string{uuid.NewString(), uuid.NewString()}
	for _, r := range recipients {
		if _, err := repo.Save(ctx, notifications(1, r, 1)); err != nil {
			t.Fatal(err)
		}
		if b, err := repo.Peek(ctx, r, domain.GroupAll, id); err != nil || b == nil {
			t.Fatalf("peek: %+v, %v", b, err)
		}
		if err := repo.Dequeue(ctx, r, id); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.Notices(ctx, domain.Origins, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range all {
		if n.BundleID == id {
			got = append(got, n.Recipient)
		}
	}
	slices.Sort(got)
	slices.Sort(recipients)
	if !slices.Equal(got, recipients) {
		t.Fatalf("notices of bundle id %s name %v; want both recipients %v", id, got, recipients)
	}
}

// A look at the notices goes on from where the last one stopped; when the
// account refuses that continuation (400), the look fails, and the next one
// starts from the beginning instead of sending it again for good.
func TestANoticeLookWhoseContinuationIsRefusedStartsAgain(t *testing.T) {
	f := newFaulty()
	s := open(t, cosmos.Config{Transport: f})
	repo := hub.New(s, hub.Options{Notices: func(domain.Origin) bool { return true }}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	for range 3 {
		cycleOne(t, repo, uuid.NewString(), domain.OriginCharges)
	}
	if first, err := s.Notices(ctx, domain.Origins, 1); err != nil || len(first) != 1 {
		t.Fatalf("first look: %+v, %v", first, err)
	}
	var refused atomic.Int64
	f.set(func(req *http.Request) int {
		if req.Header.Get("x-ms-continuation") != "" {
			refused.Add(1)
			return http.StatusBadRequest
		}
		return 0
	})
	if _, err := s.Notices(ctx, domain.Origins, 1); err == nil || refused.Load() == 0 {
		t.Fatalf("a look from the refused continuation: %v after %d refusals; want an error", err, refused.Load())
	}
	if again, err := s.Notices(ctx, domain.Origins, 1); err != nil || len(again) != 1 {
		t.Fatalf("the next look: %+v, %v; want one notice, read from the beginning", again, err)
	}
}
