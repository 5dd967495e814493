package cosmos_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// lateIDCreate is a transport that, once armed, holds the first create of an
// id document until the save gives up on it (its context ends) and refuses
// the save's other id documents, so that the save aborts and rolls back.
// The held create is kept, to be sent again after the rollback, as a
// request delayed in the network arrives.
type lateIDCreate struct {
	next  *http.Client
	armed atomic.Bool
	once  sync.Once
	held  chan struct{}
	req   *http.Request
	body  []byte
}

func newLateIDCreate() *lateIDCreate {
	return &lateIDCreate{next: cosmostest.NewHTTPClient(), held: make(chan struct{})}
}

func (l *lateIDCreate) Do(req *http.Request) (*http.Response, error) {
	if !l.armed.Load() || !toContainer(req, "ids") || cosmos.Classify(req) != cosmos.OpCreate {
		return l.next.Do(req)
	}
	first := false
	l.once.Do(func() { first = true })
	if !first {
		<-l.held
		return injected(req, http.StatusForbidden), nil
	}
	raw, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	l.req, l.body = req.Clone(context.Background()), raw
	close(l.held)
	<-req.Context().Done() // the save gives up on it
	return nil, req.Context().Err()
}

// arrive sends the held create now.
func (l *lateIDCreate) arrive(t *testing.T) {
	t.Helper()
	if l.req == nil {
		t.Fatal("no id document create was held; the test tested nothing")
	}
	l.req.Body = io.NopCloser(bytes.NewReader(l.body))
	l.req.ContentLength = int64(len(l.body))
	resp, err := l.next.Do(l.req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("the late id document create answered %d, want 201", resp.StatusCode)
	}
}

// An id document whose create the save gave up on arrives after the save's
// rollback deleted its documents, and stays: nothing names it any more (the
// save's reservation and pages are gone, so retention never meets it). Its
// ids do not count (the save is aborted), but it is a document in the old
// layout's bucket, and a migration that waits for the old buckets to empty
// would never end. The look at the old buckets deletes the documents of
// saves that are not committed and not in flight, and the migration ends.
func TestAnIDDocumentCreatedAfterItsSavesRollbackDoesNotHoldUpAMigration(t *testing.T) {
	clock := &costClock{now: time.Now()}
	db := cosmostest.UniqueID("db")
	late := newLateIDCreate()
	old := open(t, cosmos.Config{Database: db, IDBuckets: 4, Now: clock.Now, Transport: late})
	oldHub := hub.New(old, hub.Options{}, nil)
	t.Cleanup(oldHub.Close)
	r := uuid.NewString()
	ns := notifications(40, r, 1) // ids in every bucket: four id documents
	late.armed.Store(true)
	if _, err := oldHub.Save(context.Background(), ns); err == nil {
		t.Fatal("the save succeeded though its id documents were refused")
	}
	late.armed.Store(false)
	late.arrive(t)
	if got := idDocRefs(t, db, "h4-"); len(got) != 1 {
		t.Fatalf("id documents after the late create: %v, want the late one alone", got)
	}
	next, err := openDB(db, cosmos.Config{IDBuckets: 8, MigrateIDBuckets: true, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = next.Close() })
	clock.advance(16 * time.Minute)
	saveExpecting(t, oldHub, notifications(1, r, 1), 1, 0) // starts the look at the old layout
	waitForIDMigrationCheck(t, old)
	if got, _ := readSettings(t, db); got.IDBuckets != 8 {
		t.Fatalf("settings after the look at an old layout holding only an aborted save's ids: %+v, want 8 buckets", got)
	}
	if got := idDocRefs(t, db, "h4-"); len(got) != 0 {
		t.Fatalf("the old layout after the migration: %v, want empty", got)
	}
	// Its ids were never stored: the resend saves them, once.
	clock.advance(time.Minute) // the settings are read again
	saveExpecting(t, oldHub, ns, 40, 0)
	saveExpecting(t, oldHub, ns, 0, 40)
}

// waitForIDMigrationCheck waits for the look at the old id layout that
// the last save began.
func waitForIDMigrationCheck(t *testing.T, s *cosmos.Store) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		begun, ended := cosmos.IDMigrationCheck(s)
		if !begun {
			t.Fatal("the save after the both-layouts phase did not look at the old layout")
		}
		if ended {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the look at the old layout did not end")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Outside a migration, the client's resend of the aborted save meets the
// late id document in its lookup: the document of an aborted save counts
// for nothing and is deleted there, so it does not stay for ever.
func TestAnIDDocumentCreatedAfterItsSavesRollbackGoesWhenALookupMeetsIt(t *testing.T) {
	db := cosmostest.UniqueID("db")
	late := newLateIDCreate()
	repo := hub.New(open(t, cosmos.Config{Database: db, Transport: late}), hub.Options{}, nil)
	t.Cleanup(repo.Close)
	r := uuid.NewString()
	ns := notifications(40, r, 1)
	late.armed.Store(true)
	if _, err := repo.Save(context.Background(), ns); err == nil {
		t.Fatal("the save succeeded though its id documents were refused")
	}
	late.armed.Store(false)
	late.arrive(t)
	aborted := idDocRefs(t, db, "h")
	if len(aborted) != 1 {
		t.Fatalf("id documents after the late create: %v, want the late one alone", aborted)
	}
	saveExpecting(t, repo, ns, 40, 0)
	saveExpecting(t, repo, ns, 0, 40)
	drainExactly(t, repo, r, ids(ns))
	for _, ref := range idDocRefs(t, db, "h") {
		if ref == aborted[0] {
			t.Fatalf("the aborted save's id document %v is still there after a lookup met it", ref)
		}
	}
}

// A rollback whose deletes of the save's id documents fail leaves them
// named by nothing (the reservation that listed them is dropped first):
// the resend's lookup meets them and deletes them.
func TestIDDocumentsARollbackFailedToDeleteGoWhenALookupMeetsThem(t *testing.T) {
	db := cosmostest.UniqueID("db")
	f := newFaulty()
	repo := hub.New(open(t, cosmos.Config{Database: db, Transport: f}), hub.Options{}, nil)
	t.Cleanup(repo.Close)
	r := uuid.NewString()
	ns := notifications(40, r, 1)
	f.set(func(req *http.Request) int {
		// The lookup after writing the id documents fails, and so do the
		// rollback's deletes of them.
		if op := cosmos.Classify(req); toContainer(req, "ids") && (op == cosmos.OpQuery || op == cosmos.OpDelete) {
			return http.StatusForbidden
		}
		return 0
	})
	if _, err := repo.Save(context.Background(), ns); err == nil {
		t.Fatal("the save succeeded though its lookup failed")
	}
	f.set(func(*http.Request) int { return 0 })
	left := idDocRefs(t, db, "h")
	if len(left) == 0 {
		t.Fatal("the rollback deleted the id documents; the test tested nothing")
	}
	saveExpecting(t, repo, ns, 40, 0)
	saveExpecting(t, repo, ns, 0, 40)
	drainExactly(t, repo, r, ids(ns))
	for _, ref := range idDocRefs(t, db, "h") {
		if slices.Contains(left, ref) {
			t.Fatalf("the aborted save's id document %v is still there after a lookup met it", ref)
		}
	}
}
