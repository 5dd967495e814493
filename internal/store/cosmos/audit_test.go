package cosmos_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/audit"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/internal/store/storetest"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// The audit log's part of the contract, on the chain the binary opens.
func TestAuditContract(t *testing.T) {
	storetest.RunAudit(t, openChain)
}

// A database provisioned before the audit log existed gets its container
// when the store is opened with provisioning, and is refused, naming it,
// without.
func TestAnExistingDatabaseGetsTheAuditContainer(t *testing.T) {
	ctx := context.Background()
	dbID := cosmostest.UniqueID("db")
	first := open(t, cosmos.Config{Database: dbID})
	_ = first.Close()
	db, err := cosmostest.NewClient(t, server).NewDatabase(dbID)
	if err != nil {
		t.Fatal(err)
	}
	container, err := db.NewContainer("audit")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := container.Delete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	_, err = cosmos.Open(ctx, cosmos.Config{Endpoint: server.Endpoint, Key: server.Key, Database: dbID, Transport: cosmostest.NewHTTPClient()})
	if err == nil || !strings.Contains(err.Error(), "container audit does not exist") {
		t.Fatalf("open without provisioning: %v; want a refusal naming the audit container", err)
	}
	s := open(t, cosmos.Config{Database: dbID})
	defer func() { _ = s.Close() }()
	r := uuid.NewString()
	e := audit.Event{Key: audit.NewKey(time.Now()), At: time.Now(), Action: audit.ActionDequeue, Recipient: r, Subject: r}
	if err := s.AppendAudit(ctx, []audit.Event{e}); err != nil {
		t.Fatal(err)
	}
	if page, err := s.AuditEvents(ctx, audit.Range(r, time.Time{}, time.Time{}, "", 10)); err != nil || len(page.Events) != 1 {
		t.Fatalf("read back %+v, %v", page, err)
	}
}

// An acknowledgement on an actor's behalf records one event per bundle it
// dequeued, all with its reason, in one write: a reason of characters
// that JSON escapes (here "<", six bytes each as \u003c) makes the
// documents far larger than their events' bytes, and each must still
// stay within the 2 MB Cosmos DB takes. 1,000 events with such a reason
// are stored and read back whole.
func TestAuditEventsWhoseDetailJSONEscapesFitTheirDocuments(t *testing.T) {
	ctx := context.Background()
	s := open(t, cosmos.Config{})
	defer func() { _ = s.Close() }()
	r := uuid.NewString()
	at := time.Now()
	detail := strings.Repeat("<", 500) + " (up to notification " + uuid.NewString() + " of time_series/rsm-014)"
	events := make([]audit.Event, 1000)
	for i := range events {
		events[i] = audit.Event{Key: audit.NewKey(at), At: at, Action: audit.ActionAcknowledgeOnBehalf, Subject: "operator",
			Recipient: r, BundleID: uuid.NewString(), Detail: detail}
	}
	if err := s.AppendAudit(ctx, events); err != nil {
		t.Fatal(err)
	}
	q := audit.Range(r, time.Time{}, time.Time{}, "", 400)
	read := 0
	for range 10 {
		page, err := s.AuditEvents(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		read += len(page.Events)
		if page.Next == "" {
			break
		}
		q = audit.Range(r, time.Time{}, time.Time{}, page.Next, 400)
	}
	if read != len(events) {
		t.Fatalf("read back %d events of %d", read, len(events))
	}
}

// A flush whose documents were created though their answers were lost
// fails, and its events are written again by the next flush, together with
// an event recorded meanwhile whose key is earlier (its call took its time
// before the failed flush took the buffer, and recorded it after): each
// event is stored once, in the documents of the recipient's partition.
// Were the retry's document named by its first key, the earlier event's,
// it would be created beside the first and hold its event again.
func TestAFlushRetriedAfterLostAnswersStoresEachEventOnce(t *testing.T) {
	ctx := context.Background()
	db := cosmostest.UniqueID("db")
	h := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
	t.Cleanup(h.Close)
	// No periodic flush: the test flushes.
	log := audit.NewLog(h, audit.Options{FlushInterval: time.Hour})
	t.Cleanup(func() { _ = log.Close(ctx) })
	r := uuid.NewString()
	at := time.Now().Truncate(time.Millisecond)
	later := audit.Event{At: at, Action: audit.ActionDequeue, Subject: r, Recipient: r, BundleID: uuid.NewString()}
	earlier := audit.Event{At: at.Add(-time.Millisecond), Action: audit.ActionPeek, Subject: r, Recipient: r, BundleID: later.BundleID}
	log.Record(later)
	// 6 firings: more than the transport's attempts of one create.
	inject(t, db, cosmostest.Fault{Ops: []string{"create"}, Coll: "audit", Kind: cosmostest.LostTimeout, Count: 6})
	if err := log.Flush(ctx); err == nil {
		t.Fatal("the flush whose answers were lost succeeded; the test expects it to fail")
	}
	if fired(t, db) == 0 {
		t.Fatal("the fault never fired; the test tested nothing")
	}
	clearFaults(t, db)
	log.Record(earlier)
	if err := log.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if stored := storedAuditEvents(t, db, r); stored != 2 {
		t.Fatalf("the recipient's documents hold %d events; want its 2, each once", stored)
	}
	page, err := h.AuditEvents(ctx, audit.Range(r, time.Time{}, time.Time{}, "", 10))
	if err != nil || len(page.Events) != 2 || page.Events[0].Action != audit.ActionPeek || page.Events[1].Action != audit.ActionDequeue {
		t.Fatalf("read back %+v, %v; want the peek, then the dequeue", page.Events, err)
	}
}

// storedAuditEvents counts the events the recipient's audit documents hold,
// repeats included. The query sees every write before it: it carries the
// session token of a document the test writes into the partition first,
// which holds no events.
func storedAuditEvents(t *testing.T, db, r string) int {
	t.Helper()
	ctx := context.Background()
	c := containerOf(t, db, "audit")
	pk := azcosmos.NewPartitionKeyString(r)
	marker, err := c.CreateItem(ctx, pk, []byte(`{"id":"`+uuid.NewString()+`","pk":"`+r+`"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	pager := c.NewQueryItemsPager("SELECT VALUE ARRAY_LENGTH(c.ev) FROM c WHERE IS_DEFINED(c.ev)", pk,
		&azcosmos.QueryOptions{SessionToken: marker.SessionToken})
	stored := 0
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range page.Items {
			var n int
			if err := json.Unmarshal(raw, &n); err != nil {
				t.Fatal(err)
			}
			stored += n
		}
	}
	return stored
}

// Instance B writes two events (remedies done through it), then instance A
// writes an earlier one (a flush of buffered events, a remedy whose time
// was taken before B's); the writes answered, so they are stored. B then
// pages through the recipient's audit log. Every read lags an hour here
// unless its session token names a later write, and B's token names only
// its own: its listing must still show A's event, or an operator behind a
// load balancer is shown a log without what another instance stored, and
// pages that go on past it for good.
func TestAnAuditListingOnAnotherInstanceShowsWhatIsStored(t *testing.T) {
	_, repos := twoInstances(t, laggingServer(t))
	a, b := repos[0], repos[1]
	ctx := context.Background()
	r := uuid.NewString()
	at := time.Now().Truncate(time.Millisecond)
	var events []audit.Event
	for i := range 3 {
		e := audit.Event{At: at.Add(time.Duration(i) * time.Millisecond), Action: audit.ActionReleaseBundle, Subject: "operator",
			Recipient: r, BundleID: uuid.NewString(), Detail: "ticket 4711"}
		e.Key = audit.NewKey(e.At)
		events = append(events, e)
	}
	if err := b.AppendAudit(ctx, events[1:]); err != nil {
		t.Fatal(err)
	}
	if err := a.AppendAudit(ctx, events[:1]); err != nil {
		t.Fatal(err)
	}
	var got []string
	q := audit.Range(r, time.Time{}, time.Time{}, "", 1)
	for range len(events) + 1 {
		page, err := b.AuditEvents(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Events {
			got = append(got, e.Key)
		}
		if page.Next == "" {
			break
		}
		q.After = page.Next
	}
	if want := []string{events[0].Key, events[1].Key, events[2].Key}; !slices.Equal(got, want) {
		t.Fatalf("B's pages of one event: %v; want %v", got, want)
	}
}
