package cosmos_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// saveExpecting saves ns through h and fails unless saved and duplicates
// are as expected.
func saveExpecting(t *testing.T, h *hub.Hub, ns []domain.Notification, saved, duplicates int) {
	t.Helper()
	got, err := h.Save(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if got.Saved != saved || got.Duplicates != duplicates {
		t.Fatalf("save of %d: %+v, want %d saved and %d duplicates", len(ns), got, saved, duplicates)
	}
}

// Moving the id index to another bucket count keeps every duplicate
// recognised, by every instance, through the whole migration: an instance
// that has not read the settings since the migration began, an instance
// that began it, saves while both layouts are written and after, and after
// the old layout has emptied and the settings name the new count alone.
func TestTheIDIndexMigratesToAnotherBucketCountKeepingDuplicatesFound(t *testing.T) {

	clock := &costClock{now: time.Now()}
	db := cosmostest.UniqueID("db")
	old := open(t, cosmos.Config{Database: db, IDBuckets: 4, Now: clock.Now})
	oldHub := hub.New(old, hub.Options{}, nil)
	t.Cleanup(oldHub.Close)
	r := uuid.NewString()
	before := notifications(300, r, 1)
	saveExpecting(t, oldHub, before, 300, 0)

	// Another count is refused unless asked to migrate.
	if _, err := openDB(db, cosmos.Config{IDBuckets: 8, Now: clock.Now}); err == nil || !strings.Contains(err.Error(), "--cosmos-id-buckets-migrate") {
		t.Fatalf("open with 8 buckets = %v, want a refusal naming --cosmos-id-buckets-migrate", err)
	}
	next, err := openDB(db, cosmos.Config{IDBuckets: 8, MigrateIDBuckets: true, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = next.Close() })
	nextHub := hub.New(next, hub.Options{}, nil)
	t.Cleanup(nextHub.Close)
	if got, _ := readSettings(t, db); got.IDBuckets != 4 {
		t.Fatalf("settings during the migration: %+v", got)
	}
	// A third count cannot join it.
	if _, err := openDB(db, cosmos.Config{IDBuckets: 16, MigrateIDBuckets: true, Now: clock.Now}); err == nil || !strings.Contains(err.Error(), "migrating from 4 to 8 buckets") {
		t.Fatalf("open with 16 buckets during the migration = %v", err)
	}

	// Both layouts are written: the instance that still knows only the old
	// one finds what the migrating one saved, and the other way round.
	during := notifications(300, r, 1)
	saveExpecting(t, nextHub, during, 300, 0)
	saveExpecting(t, oldHub, during, 0, 300)
	saveExpecting(t, nextHub, before, 0, 300)

	// Later every instance has read the settings and writes the new layout
	// only; lookups still read both.
	clock.advance(16 * time.Minute)
	after := notifications(300, r, 1)
	saveExpecting(t, oldHub, after, 300, 0)
	saveExpecting(t, nextHub, after, 0, 300)
	saveExpecting(t, oldHub, before, 0, 300)
	if len(idDocRefs(t, db, "h4-")) == 0 {
		t.Fatal("the old layout holds nothing while ids saved before the migration are kept")
	}

	// Retention empties the old layout (here: by hand); the next look at
	// it, an hour on, ends the migration.
	deleteIDDocs(t, db, "h4-")
	clock.advance(time.Hour)
	deadline := time.Now().Add(time.Minute)
	for {
		saveExpecting(t, oldHub, notifications(1, r, 1), 1, 0)
		if got, _ := readSettings(t, db); got.IDBuckets == 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the migration did not end once the old layout was empty")
		}
		clock.advance(time.Minute)
		time.Sleep(50 * time.Millisecond)
	}
	clock.advance(time.Minute)
	saveExpecting(t, oldHub, after, 0, 300)
	saveExpecting(t, nextHub, during, 0, 300)
	if _, err := openDB(db, cosmos.Config{IDBuckets: 4, Now: clock.Now}); err == nil || !strings.Contains(err.Error(), "has 8 buckets") {
		t.Fatalf("open with the old count after the migration = %v", err)
	}

}

// idDocRefs lists the id documents (partition, id) in partitions starting
// with prefix.
func idDocRefs(t *testing.T, db, prefix string) [][2]string {
	t.Helper()
	waitOutLag() // the query carries no session token
	pager := containerOf(t, db, "ids").NewQueryItemsPager("SELECT VALUE [c.pk, c.id] FROM c WHERE STARTSWITH(c.pk, @p)",
		azcosmos.NewPartitionKey(), &azcosmos.QueryOptions{QueryParameters: []azcosmos.QueryParameter{{Name: "@p", Value: prefix}}})
	var out [][2]string
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range page.Items {
			var ref [2]string
			if err := json.Unmarshal(raw, &ref); err != nil {
				t.Fatal(err)
			}
			out = append(out, ref)
		}
	}
	return out
}

func deleteIDDocs(t *testing.T, db, prefix string) {
	t.Helper()
	c := containerOf(t, db, "ids")
	for _, ref := range idDocRefs(t, db, prefix) {
		if _, err := c.DeleteItem(context.Background(), azcosmos.NewPartitionKeyString(ref[0]), ref[1], nil); err != nil {
			t.Fatal(err)
		}
	}
	waitOutLag()
}

// The look at whether the old layout's buckets are empty reads with the
// session token of the ids this instance wrote: a replica that lags behind
// them finds the buckets empty while they hold ids, and the migration would
// end (lookups reading the new layout alone) with ids kept only in the old
// one, which would then be saved again instead of found as duplicates.
// Every read without a session token lags an hour here, so the old layout
// this instance filled a moment ago looks empty to any such read.
func TestTheOldLayoutIsFoundEmptyOnlyByAReadThatSeesItsIDs(t *testing.T) {
	opts := cosmostest.Default()
	opts.Lag, opts.LagFixed = time.Hour, true
	srv := cosmostest.StartWith(t, opts)
	db := cosmostest.UniqueID("db")
	clock := &costClock{now: time.Now()}
	old := openOnServer(t, srv, db, clock, cosmos.Config{IDBuckets: 4})
	oldHub := hub.New(old, hub.Options{}, nil)
	t.Cleanup(oldHub.Close)
	r := uuid.NewString()
	before := notifications(50, r, 1)
	saveExpecting(t, oldHub, before, 50, 0)
	_ = openOnServer(t, srv, db, clock, cosmos.Config{IDBuckets: 8, MigrateIDBuckets: true})

	// Past the both-layouts phase the old instance's next save writes the
	// new layout only and starts the look at the old one.
	clock.advance(16 * time.Minute)
	saveExpecting(t, oldHub, notifications(1, r, 1), 1, 0)
	waitForIDMigrationCheck(t, old)
	if got := idBucketsOn(t, srv, db); got.IDBuckets != 4 || got.NextIDBuckets != 8 {
		t.Fatalf("settings after the look at the old layout: %+v; want the migration from 4 to 8 still under way", got)
	}
	clock.advance(time.Minute) // the settings are read again
	saveExpecting(t, oldHub, before, 0, 50)
}

// holdSettingsRead holds the first read of the settings document sent once
// armed without an answer until its caller gives up (a lost answer: the
// request reached no one, or its answer never came back), and passes every
// other request.
type holdSettingsRead struct {
	next    *http.Client
	armed   atomic.Bool
	arrived chan struct{}
}

func (h *holdSettingsRead) Do(req *http.Request) (*http.Response, error) {
	if toContainer(req, "recipients") && req.Header.Get("x-ms-cosmos-is-batch-request") != "" &&
		strings.Contains(req.Header.Get("x-ms-documentdb-partitionkey"), "_settings") && h.armed.CompareAndSwap(true, false) {
		close(h.arrived)
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return h.next.Do(req)
}

// Every minute the settings are read again, for the id index's layout. A
// read whose answer never comes holds up its own caller, until that
// caller's deadline, and no one else: a Save meanwhile reads them itself
// and commits. It waited behind the lost read, whatever its own deadline
// (a sweep's read may go on for minutes: four attempts of up to 65 s), and
// every Save of the instance failed for that long.
func TestASettingsReadThatIsNeverAnsweredHoldsUpNoSave(t *testing.T) {
	hold := &holdSettingsRead{next: cosmostest.NewHTTPClient(), arrived: make(chan struct{})}
	clock := &costClock{now: time.Now()}
	s := open(t, cosmos.Config{Transport: hold, Now: clock.Now})
	repo := hub.New(s, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	r := uuid.NewString()
	saveExpecting(t, repo, notifications(1, r, 1), 1, 0)

	clock.advance(2 * time.Minute) // the settings are read again before the next use
	hold.armed.Store(true)
	held, release := context.WithCancel(context.Background())
	lookupDone := make(chan error, 1)
	go func() {
		_, err := s.LookupIDs(held, []string{uuid.NewString()})
		lookupDone <- err
	}()
	<-hold.arrived

	saveDone := make(chan error, 1)
	go func() {
		_, err := repo.Save(context.Background(), notifications(1, r, 1))
		saveDone <- err
	}()
	select {
	case err := <-saveDone:
		if err != nil {
			t.Fatalf("a save while another caller's settings read goes unanswered: %v", err)
		}
	case <-time.After(20 * time.Second): // never reached unless the Save waits for the held read
		release()
		t.Fatalf("a save waited for another caller's settings read that was never answered: %v", <-saveDone)
	}
	release()
	if err := <-lookupDone; err == nil {
		t.Fatal("the lookup whose settings read was never answered succeeded")
	}
}
