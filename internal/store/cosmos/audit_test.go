package cosmos_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/audit"
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
