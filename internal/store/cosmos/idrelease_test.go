package cosmos_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"
	"github.com/zeebo/xxh3"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// A save's id documents cover all its recipients: retention keeps them while
// any recipient's drawer still holds the save's notifications, so their
// ids are still found, and removes them with the last drawer, here swept by another
// instance that has seen none of the earlier deletes.
func TestIDsOfASaveLiveUntilItsLastDrawerIsSwept(t *testing.T) {
	db := cosmostest.UniqueID("db")
	clock := &costClock{now: time.Now()}
	opts := hub.Options{Retention: time.Hour, SweepInterval: time.Hour, Now: clock.Now}
	ctx := context.Background()
	first := open(t, cosmos.Config{Database: db})
	repo := hub.New(first, opts, nil)
	t.Cleanup(repo.Close)
	a, b := notifications(5, uuid.NewString(), 1), notifications(5, uuid.NewString(), 1)
	if _, err := repo.Save(ctx, append(append([]domain.Notification{}, a...), b...)); err != nil {
		t.Fatal(err)
	}
	drainRecipient(t, repo, a[0].Recipient)
	clock.advance(2 * time.Hour)
	if err := repo.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	if state, err := first.LoadRecipient(ctx, a[0].Recipient); err != nil || len(state.Entries) != 0 {
		t.Fatalf("%s's drawer not swept: %+v, %v", a[0].Recipient, state, err)
	}
	if found, err := first.LookupIDs(ctx, idsOf(b)); err != nil || len(found) != len(b) {
		t.Fatalf("ids of the drawer left: %d of %d found, %v", len(found), len(b), err)
	}
	if n := countIDDocs(t, db); n == 0 {
		t.Fatal("id documents removed while a drawer holds their notifications")
	}
	if n := countDocs(t, db, "saves"); n != 1 {
		t.Fatalf("%d commit records while the save's ids are kept, want 1", n)
	}

	waitOutLag() // another instance, without this one's session tokens
	second := open(t, cosmos.Config{Database: db})
	repo2 := hub.New(second, opts, nil)
	t.Cleanup(repo2.Close)
	drainRecipient(t, repo2, b[0].Recipient)
	clock.advance(2 * time.Hour)
	if err := repo2.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	if found, err := second.LookupIDs(ctx, append(idsOf(a), idsOf(b)...)); err != nil || len(found) != 0 {
		t.Fatalf("retention left ids %v, %v", found, err)
	}
	if n := countIDDocs(t, db); n != 0 {
		t.Fatalf("retention left %d id documents", n)
	}
	if n := countDocs(t, db, "saves"); n != 0 {
		t.Fatalf("retention left %d commit records of a save whose ids are all gone", n)
	}
}

// A sweep that fails half-way through a freed drawer leaves the drawer's
// pages, which name the saves, and its catalog: the next pass, on
// another instance that remembers nothing of the first, removes the
// documents.
func TestIDsAreRemovedByTheRetryOfASweepThatFailedHalfWay(t *testing.T) {
	e := newHourlyRetention(t)
	db, f, clock, repo := e.db, e.f, e.clock, e.repo
	ctx := context.Background()
	ns := e.saved(t, 3)
	drainRecipient(t, repo, ns[0].Recipient)
	clock.advance(2 * time.Hour)
	f.set(func(req *http.Request) int {
		if cosmos.Classify(req) == cosmos.OpQuery && toContainer(req, "ids") {
			return http.StatusBadRequest
		}
		return 0
	})
	if err := repo.SweepNow(ctx); err == nil {
		t.Fatal("sweep with the id container failing succeeded")
	}
	waitOutLag() // another instance, without this one's session tokens
	other := open(t, cosmos.Config{Database: db})
	otherRepo := hub.New(other, hub.Options{Retention: time.Hour, SweepInterval: time.Hour, Now: clock.Now}, nil)
	t.Cleanup(otherRepo.Close)
	if err := otherRepo.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	wantIDsGone(t, other, db, ns)
}

// A sweep whose delete of a save's commit record fails (a partition that
// answers 503 through every resend) after its last id documents went is
// finished by the next pass: the record goes too. The next pass finds the
// drawer's pages still naming the save but none of its id documents, so
// the record was left to nothing and stayed for good.
func TestACommitRecordWhoseDeleteFailedIsDeletedByTheNextSweep(t *testing.T) {
	e := newHourlyRetention(t)
	ctx := context.Background()
	ns := e.saved(t, 3)
	drainRecipient(t, e.repo, ns[0].Recipient)
	e.clock.advance(2 * time.Hour)
	e.f.set(func(req *http.Request) int {
		if toContainer(req, "saves") && req.Method == http.MethodDelete {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	if err := e.repo.SweepNow(ctx); err == nil {
		t.Fatal("sweep with the commit records' deletes failing succeeded")
	}
	e.f.set(func(*http.Request) int { return 0 })
	if err := e.repo.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	wantIDsGone(t, e.store, e.db, ns)
	if n := countDocs(t, e.db, "saves"); n != 0 {
		t.Fatalf("retention left %d commit records of a save whose ids are all gone", n)
	}
}

// hourlyRetention is a hub that retains an hour on a test clock, over a
// store whose requests f can fail.
type hourlyRetention struct {
	db    string
	f     *faulty
	store *cosmos.Store
	clock *costClock
	repo  *hub.Hub
}

func newHourlyRetention(t *testing.T) hourlyRetention {
	t.Helper()
	e := hourlyRetention{db: cosmostest.UniqueID("db"), f: newFaulty(), clock: &costClock{now: time.Now()}}
	e.store = open(t, cosmos.Config{Database: e.db, Transport: e.f})
	e.repo = hub.New(e.store, hub.Options{Retention: time.Hour, SweepInterval: time.Hour, Now: e.clock.Now}, nil)
	t.Cleanup(e.repo.Close)
	return e
}

// saved saves n notifications for a new recipient.
func (e hourlyRetention) saved(t *testing.T, n int) []domain.Notification {
	t.Helper()
	ns := notifications(n, uuid.NewString(), 1)
	if _, err := e.repo.Save(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns
}

// wantIDsGone fails unless retention removed the ids of ns and every id
// document.
func wantIDsGone(t *testing.T, s *cosmos.Store, db string, ns []domain.Notification) {
	t.Helper()
	if found, err := s.LookupIDs(context.Background(), idsOf(ns)); err != nil || len(found) != 0 {
		t.Fatalf("retention left ids %v, %v", found, err)
	}
	if n := countIDDocs(t, db); n != 0 {
		t.Fatalf("retention left %d id documents", n)
	}
}

// A cabinet's last save failed: its positions, the cabinet's last, are a
// hole, so the cursor of a recipient that dequeued everything stops short
// of the positions handed out. Retention must still take the drained
// cabinet out once its bundle is due: left, its entry, cursor and last
// drawer stayed forever, and with the drawer the ids of its notifications,
// refused as duplicates long after their retention.
func TestADrainedCabinetEndingInAHoleGoesWithItsRetention(t *testing.T) {
	e := newHourlyRetention(t)
	ns := e.saved(t, 3)
	r := ns[0].Recipient
	abortSave(t, e.f, e.repo, notifications(2, r, 1)) // positions 3 and 4: a hole at the cabinet's end
	drainExactly(t, e.repo, r, idsOf(ns))
	e.clock.advance(2 * time.Hour)
	if err := e.repo.SweepNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if state, err := e.store.LoadRecipient(context.Background(), r); err != nil || len(state.Entries) != 0 || len(state.Cursors) != 0 {
		t.Fatalf("a drained cabinet whose bundle is due stays: %+v, %v", state, err)
	}
	if found, err := e.store.LookupIDs(context.Background(), idsOf(ns)); err != nil || len(found) != 0 {
		t.Fatalf("ids of notifications past their retention still refused: %d of %d, %v", len(found), len(ns), err)
	}
	if n := countDocs(t, e.db, "drawers"); n != 0 {
		t.Fatalf("retention left %d pages", n)
	}
}

func idsOf(ns []domain.Notification) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.ID
	}
	return out
}

// countIDDocs counts the documents of the ids container, in all buckets.
func countIDDocs(t *testing.T, db string) int {
	t.Helper()
	return countDocs(t, db, "ids")
}

// countDocs counts the documents of a container, in all partitions.
func countDocs(t *testing.T, db, container string) int {
	t.Helper()
	waitOutLag() // the query carries no session token
	n := 0
	pager := containerOf(t, db, container).NewQueryItemsPager("SELECT c.id FROM c", azcosmos.NewPartitionKey(), nil)
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range page.Items {
			if json.Valid(raw) {
				n++
			}
		}
	}
	return n
}

// waitOutLag lets every replica of the test server catch up. Retention reads
// what was written at least its retention period before, far longer than
// any replica lags; a test that sweeps at once, on an instance without the
// writers' session tokens, waits as long as the server may lag instead.
func waitOutLag() {
	time.Sleep(cosmostest.Default().Lag + 50*time.Millisecond)
}

// An id document whose delete failed is deleted by the next sweep of the
// same instance: a save's documents in two buckets list one drawer each,
// and the sweep of the first drawer fails at the delete of its document.
// The instance remembers the save's documents between sweeps (a cache of
// reads), and must not remember that one as gone: left behind, it would
// keep the ids of a drawer long removed, and its bucket would never empty
// (an id index migration waits for that).
func TestAnIDDocumentWhoseDeleteFailedIsDeletedByTheNextSweep(t *testing.T) {
	db := cosmostest.UniqueID("db")
	clock := &costClock{now: time.Now()}
	opts := hub.Options{Retention: time.Hour, SweepInterval: time.Hour, Now: clock.Now}
	ctx := context.Background()
	s := open(t, cosmos.Config{Database: db, IDBuckets: 4})
	repo := hub.New(s, opts, nil)
	t.Cleanup(repo.Close)
	a, b := inBucket(t, 4, 0, uuid.NewString()), inBucket(t, 4, 1, uuid.NewString())
	if _, err := repo.Save(ctx, append(append([]domain.Notification{}, a...), b...)); err != nil {
		t.Fatal(err)
	}
	drainRecipient(t, repo, a[0].Recipient)
	clock.advance(2 * time.Hour)
	// Refused, never applied (449 is not retried past the transport's
	// attempts): the only batch of ids in this sweep is that delete.
	if err := server.AddFaults(cosmostest.Fault{Kind: cosmostest.RefuseRetryWith, Ops: []string{"batch"}, DB: db, Coll: "ids"}); err != nil {
		t.Fatal(err)
	}
	err := repo.SweepNow(ctx)
	if cerr := server.ClearFaults(db); cerr != nil {
		t.Fatal(cerr)
	}
	if err == nil {
		t.Fatal("sweep with the id documents' delete refused succeeded")
	}
	if err := repo.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	if found, err := s.LookupIDs(ctx, idsOf(a)); err != nil || len(found) != 0 {
		t.Fatalf("ids of the swept drawer still found: %v, %v", found, err)
	}
	drainRecipient(t, repo, b[0].Recipient)
	clock.advance(2 * time.Hour)
	if err := repo.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countIDDocs(t, db); n != 0 {
		t.Fatalf("retention left %d id documents", n)
	}
}

// inBucket returns a notification for recipient whose id falls in bucket n
// of count (the store's xxh3 of the id modulo the count).
func inBucket(t *testing.T, count, n uint64, recipient string) []domain.Notification {
	t.Helper()
	for range 10_000 {
		ns := notifications(1, recipient, 1)
		if xxh3.HashString(ns[0].ID)%count == n {
			return ns
		}
	}
	t.Fatalf("no id in bucket %d of %d", n, count)
	return nil
}

// Two instances sweep the two drawers of one save, the second while its
// replicas are behind the first's delete of the other drawer: a replica
// that still shows a page of a drawer another instance deleted must not
// keep the save's id documents, which no later sweep would come back to
// (their drawers are all gone), so that they kept its ids duplicates
// forever. Replicas here are an hour behind on the server's clock.
func TestIDsOfASaveSweptByTwoInstancesBehindEachOtherAreAllRemoved(t *testing.T) {
	opts := cosmostest.Default()
	opts.Lag, opts.LagFixed = time.Hour, true
	srv := cosmostest.StartWith(t, opts)
	db := cosmostest.UniqueID("db")
	clock := &costClock{now: time.Now()}
	ctx := context.Background()
	instance := func() (*cosmos.Store, *hub.Hub) {
		s, err := cosmos.Open(ctx, cosmos.Config{
			Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: cosmostest.NewHTTPClient(),
			Throughput: "manual=100000",
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		repo := hub.New(withoutBells{s}, hub.Options{Retention: time.Hour, SweepInterval: time.Hour, Now: clock.Now}, nil)
		t.Cleanup(repo.Close)
		return s, repo
	}
	_, first := instance()
	second, secondRepo := instance()
	// Enough ids that every bucket holds some of each recipient's.
	a, b := notifications(40, uuid.NewString(), 1), notifications(40, uuid.NewString(), 1)
	if _, err := first.Save(ctx, append(append([]domain.Notification{}, a...), b...)); err != nil {
		t.Fatal(err)
	}
	// Replicas now hold the save: reads an hour behind show its pages.
	if err := srv.AdvanceClock(2 * time.Hour); err != nil {
		t.Fatal(err)
	}
	drainRecipient(t, first, a[0].Recipient)
	clock.advance(2 * time.Hour)
	if err := first.SweepNow(ctx); err != nil { // a's drawer goes; b's holds the ids
		t.Fatal(err)
	}
	drainRecipient(t, secondRepo, b[0].Recipient)
	clock.advance(2 * time.Hour)
	if err := secondRepo.SweepNow(ctx); err != nil { // b's drawer goes, a's still shown by replicas
		t.Fatal(err)
	}
	// Replicas catch up with both instances' deletes, for the look-up.
	if err := srv.AdvanceClock(2 * time.Hour); err != nil {
		t.Fatal(err)
	}
	if found, err := second.LookupIDs(ctx, append(idsOf(a), idsOf(b)...)); err != nil || len(found) != 0 {
		t.Fatalf("retention left %d ids of a save whose drawers are all gone (%v)", len(found), err)
	}
}

// A save fails at its commit, and its rollback cannot delete its pages: its
// positions, the cabinet's last, are a hole holding the save's pages, and
// its id documents stay (the rollback deletes them after the pages).
// Retention removes such pages with their drawer, and the save's id
// documents with its pages: left, they stayed forever, the id documents
// keeping an id index migration from ever finding its old buckets empty.
func TestPagesARollbackLeftInAHoleAtADrawersEndGoWithTheDrawer(t *testing.T) {
	e := newHourlyRetention(t)
	ns := e.saved(t, 3)
	r := ns[0].Recipient
	e.f.set(func(req *http.Request) int {
		if (toContainer(req, "saves") && req.Method == http.MethodPut && commits(t, req)) ||
			(toContainer(req, "drawers") && req.Method == http.MethodDelete) {
			return http.StatusForbidden
		}
		return 0
	})
	if _, err := e.repo.Save(context.Background(), notifications(2, r, 1)); err == nil {
		t.Fatal("a save whose commit was refused succeeded")
	}
	e.f.set(func(*http.Request) int { return 0 })
	if n := countDocs(t, e.db, "drawers"); n != 2 {
		t.Fatalf("%d pages, want the saved one and the failed save's: the test tested something else", n)
	}
	drainExactly(t, e.repo, r, idsOf(ns))
	e.clock.advance(2 * time.Hour)
	if err := e.repo.SweepNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := countDocs(t, e.db, "drawers"); n != 0 {
		t.Fatalf("retention left %d pages", n)
	}
	wantIDsGone(t, e.store, e.db, ns)
}
