package cosmos_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/audit"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// lostDequeue has the next dequeue batches of database db apply with their
// answers lost past the transport's resends, and the store's reads on the
// primary of a bundle (which tell a lost answer from a refusal) fail, so
// that no one knows whether the dequeue applied; it does.
func lostDequeue(t *testing.T, db string) { lostBundleWrite(t, db, "dequeued") }

// lostBundleWrite is lostDequeue for the batches writing a bundle of type
// typ ("dequeued", "released").
func lostBundleWrite(t *testing.T, db, typ string) {
	t.Helper()
	inject(t, db,
		cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", Type: typ, Kind: cosmostest.LostUnavailable, Count: 6},
		cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", ID: "^b:", Body: `"operationType":"Read"`, Kind: cosmostest.Refuse503})
}

// savedForAudit serves a hub on a database of its own with the audit log
// (auditedConn) and saves n notifications for a recipient of their own.
func savedForAudit(t *testing.T, n int) (string, *grpc.ClientConn, *hub.Hub, *audit.Log, []domain.Notification) {
	t.Helper()
	db := cosmostest.UniqueID("db")
	conn, h, log := auditedConn(t, db)
	ns := notifications(n, uuid.NewString(), 1)
	if _, err := h.Save(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return db, conn, h, log, ns
}

// An acknowledgement on the actor's behalf whose dequeue applied, though
// its answers were lost and the store's look on the primary failed, is in
// the audit log: the call fails UNAVAILABLE naming nothing it knows
// dequeued, and the operator's repeat finds the notification dequeued and
// records nothing, so the record of the failed call is the only one of
// that bundle's dequeue. It says the outcome was not known.
func TestAnAcknowledgementOfUnknownOutcomeIsRecorded(t *testing.T) {
	db, conn, h, _, ns := savedForAudit(t, 1)
	client := adminv1.NewAdminClient(conn)
	ctx, r := context.Background(), ns[0].Recipient
	req := &adminv1.AcknowledgeOnBehalfRequest{
		Recipient: r, Domain: messagehubv1.Domain(ns[0].Origin), ContentType: ns[0].ContentType,
		UpToNotificationId: ns[0].ID, Reason: "the actor cannot parse it",
	}
	lostDequeue(t, db)
	_, err := client.AcknowledgeOnBehalf(ctx, req)
	if fired(t, db) == 0 {
		t.Fatal("the faults never fired; the test tested nothing")
	}
	clearFaults(t, db)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("the acknowledgement of unknown outcome: %v; want UNAVAILABLE", err)
	}
	trace, err := h.TraceNotification(ctx, r, ns[0].ID)
	if err != nil || trace.State != hub.TraceDequeued || trace.Bundle == nil {
		t.Fatalf("the notification: %+v, %v; the test expects its dequeue to have applied", trace, err)
	}
	if again, err := client.AcknowledgeOnBehalf(ctx, req); err != nil || len(again.GetBundleIds()) != 0 {
		t.Fatalf("the repeat: %v, %v; want nothing to do", again, err)
	}
	events := remedyEvents(t, client, r, adminv1.AuditAction_AUDIT_ACTION_ACKNOWLEDGE_ON_BEHALF)
	if len(events) != 1 || events[0].GetBundleId() != trace.Bundle.ID ||
		!strings.Contains(events[0].GetDetail(), req.Reason) || !strings.Contains(events[0].GetDetail(), "outcome unknown") {
		t.Fatalf("audit events of the acknowledgement: %v; want one, of bundle %s, with the reason and the outcome unknown", events, trace.Bundle.ID)
	}
}

// An actor's Dequeue that applied, though its answers were lost and the
// store's look on the primary failed, is in the audit log: the call fails
// UNAVAILABLE, and the actor's repeat finds no pending bundle (NOT_FOUND),
// so the record of the failed call is the only one of that dequeue. It
// says the outcome was not known.
func TestADequeueOfUnknownOutcomeIsRecorded(t *testing.T) {
	db, conn, h, log, ns := savedForAudit(t, 2)
	actor := messagehubv1.NewMessageHubClient(conn)
	ctx, r := context.Background(), ns[0].Recipient
	peeked, err := actor.Peek(ctx, &messagehubv1.PeekRequest{Recipient: r})
	if err != nil || peeked.GetBundle() == nil {
		t.Fatalf("peek = %v, %v", peeked, err)
	}
	id := peeked.GetBundle().GetId()
	lostDequeue(t, db)
	_, err = actor.Dequeue(ctx, &messagehubv1.DequeueRequest{Recipient: r, BundleId: id})
	if fired(t, db) == 0 {
		t.Fatal("the faults never fired; the test tested nothing")
	}
	clearFaults(t, db)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("the dequeue of unknown outcome: %v; want UNAVAILABLE", err)
	}
	if _, err := h.DequeuedBundle(ctx, r, id); err != nil {
		t.Fatalf("the bundle: %v; the test expects its dequeue to have applied", err)
	}
	if _, err := actor.Dequeue(ctx, &messagehubv1.DequeueRequest{Recipient: r, BundleId: id}); status.Code(err) != codes.NotFound {
		t.Fatalf("the dequeue repeated: %v; want NOT_FOUND", err)
	}
	if b, err := h.Peek(ctx, r, domain.GroupAll, ""); err != nil || b != nil {
		t.Fatalf("the actor peeks %+v, %v after its dequeue; want nothing", b, err)
	}
	if err := log.Flush(ctx); err != nil { // actors' events are buffered
		t.Fatal(err)
	}
	events := remedyEvents(t, adminv1.NewAdminClient(conn), r, adminv1.AuditAction_AUDIT_ACTION_DEQUEUE)
	if len(events) != 1 || events[0].GetBundleId() != id || !strings.Contains(events[0].GetDetail(), "outcome unknown") {
		t.Fatalf("audit events of the dequeue: %v; want one, of bundle %s, with the outcome unknown", events, id)
	}
}

// A release that applied, though its answers were lost and the store's
// look on the primary failed, is in the audit log: the call fails
// UNAVAILABLE, and the operator's repeat finds the bundle released
// (NOT_FOUND), so the record of the failed call is the only one of that
// release. It says the outcome was not known.
func TestAReleaseOfUnknownOutcomeIsRecorded(t *testing.T) {
	db, conn, h, _, ns := savedForAudit(t, 2)
	client := adminv1.NewAdminClient(conn)
	ctx, r := context.Background(), ns[0].Recipient
	b, err := h.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("peek = %v, %v", b, err)
	}
	req := &adminv1.ReleaseBundleRequest{Recipient: r, BundleId: b.ID, Reason: "the actor lost its state"}
	lostBundleWrite(t, db, "released")
	_, err = client.ReleaseBundle(ctx, req)
	if fired(t, db) == 0 {
		t.Fatal("the faults never fired; the test tested nothing")
	}
	clearFaults(t, db)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("the release of unknown outcome: %v; want UNAVAILABLE", err)
	}
	if _, err := client.ReleaseBundle(ctx, req); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "released") {
		t.Fatalf("the release repeated: %v; want NOT_FOUND, released (the test expects the release to have applied)", err)
	}
	events := remedyEvents(t, client, r, adminv1.AuditAction_AUDIT_ACTION_RELEASE_BUNDLE)
	if len(events) != 1 || events[0].GetBundleId() != b.ID ||
		!strings.Contains(events[0].GetDetail(), req.Reason) || !strings.Contains(events[0].GetDetail(), "outcome unknown") {
		t.Fatalf("audit events of the release: %v; want one, of bundle %s, with the reason and the outcome unknown", events, b.ID)
	}
}
