package cosmos_test

import (
	"context"
	"log/slog"
	"net"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/admin"
	"github.com/energydatahub/messagehub/internal/audit"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	grpcserver "github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// auditedAdmin serves the Admin API of a hub on database db, with the audit
// log recorded as the service records it, and returns a client and the hub.
func auditedAdmin(t *testing.T, db string) (adminv1.AdminClient, *hub.Hub) {
	t.Helper()
	h := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
	t.Cleanup(h.Close)
	log := audit.NewLog(h, audit.Options{})
	t.Cleanup(func() { _ = log.Close(context.Background()) })
	srv, _ := grpcserver.NewGRPCServer(h, slog.New(slog.DiscardHandler), grpcserver.WithAudit(log, func(context.Context) string { return "op" }))
	admin.Register(srv, h)
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return adminv1.NewAdminClient(conn), h
}

// remedyEvents returns the recipient's audit events of action.
func remedyEvents(t *testing.T, client adminv1.AdminClient, recipient string, action adminv1.AuditAction) []*adminv1.AuditEvent {
	t.Helper()
	page, err := client.ListAuditEvents(context.Background(), &adminv1.ListAuditEventsRequest{Recipient: recipient})
	if err != nil {
		t.Fatal(err)
	}
	var out []*adminv1.AuditEvent
	for _, e := range page.GetEvents() {
		if e.GetAction() == action {
			out = append(out, e)
		}
	}
	return out
}

// callLosingAnswers makes an operator's call while fault loses the answers
// of its writes, and, when it failed, makes it again with the fault cleared,
// as the operator is told to.
func callLosingAnswers(t *testing.T, db string, fault cosmostest.Fault, call func() error) {
	t.Helper()
	inject(t, db, fault)
	err := call()
	if fired(t, db) == 0 {
		t.Fatal("the fault never fired; the test tested nothing")
	}
	clearFaults(t, db)
	if err != nil {
		again := call()
		t.Logf("first call: %v; second: %v", err, again)
	}
}

// A release whose answers are lost for longer than the transport's resends
// applied all the same: the bundle is released. The operator is told so
// (the store finds its own effect on the primary), and the audit log
// records it; answered as failed, the release took effect unrecorded, and
// the operator's second call found the bundle released already, which
// records nothing either.
func TestAReleaseWhoseAnswersAreLostIsRecordedOnce(t *testing.T) {
	for _, kind := range []cosmostest.FaultKind{cosmostest.LostUnavailable, cosmostest.LostTimeout, cosmostest.LostReset} {
		t.Run(string(kind), func(t *testing.T) {
			db := cosmostest.UniqueID("db")
			client, h := auditedAdmin(t, db)
			ctx := context.Background()
			r := uuid.NewString()
			if _, err := h.Save(ctx, notifications(3, r, 1)); err != nil {
				t.Fatal(err)
			}
			b, err := h.Peek(ctx, r, domain.GroupAll, "")
			if err != nil || b == nil {
				t.Fatalf("peek = %v, %v", b, err)
			}
			req := &adminv1.ReleaseBundleRequest{Recipient: r, BundleId: b.ID, Reason: "the actor lost its state"}
			callLosingAnswers(t, db, cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", Type: "released", Kind: kind, Count: 6}, func() error {
				_, err := client.ReleaseBundle(ctx, req)
				return err
			})
			if _, err := h.Peek(ctx, r, domain.GroupAll, b.ID); err == nil {
				t.Fatal("the bundle is still pending: the test expects the release to have applied")
			}
			if events := remedyEvents(t, client, r, adminv1.AuditAction_AUDIT_ACTION_RELEASE_BUNDLE); len(events) != 1 || events[0].GetBundleId() != b.ID {
				t.Fatalf("audit events of the release %v; want one, of bundle %s", events, b.ID)
			}
		})
	}
}

// The same of an acknowledgement on the actor's behalf: a dequeue batch
// that applied though its answers were lost past the transport's resends
// is a bundle dequeued, which the call answers and the audit log records;
// answered as failed, the call named no bundle, and the operator's next
// try found nothing left to do, which records nothing.
func TestAnAcknowledgementWhoseAnswersAreLostIsRecordedOnce(t *testing.T) {
	for _, kind := range []cosmostest.FaultKind{cosmostest.LostUnavailable, cosmostest.LostTimeout, cosmostest.LostReset} {
		t.Run(string(kind), func(t *testing.T) {
			db := cosmostest.UniqueID("db")
			client, h := auditedAdmin(t, db)
			ctx := context.Background()
			r := uuid.NewString()
			ns := notifications(3, r, 1)
			if _, err := h.Save(ctx, ns); err != nil {
				t.Fatal(err)
			}
			req := &adminv1.AcknowledgeOnBehalfRequest{
				Recipient: r, Domain: messagehubv1.Domain(ns[0].Origin), ContentType: ns[0].ContentType,
				UpToNotificationId: ns[2].ID, Reason: "the actor cannot parse them",
			}
			var resp *adminv1.AcknowledgeOnBehalfResponse // the first call's
			callLosingAnswers(t, db, cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", Type: "dequeued", Kind: kind, Count: 6}, func() error {
				answer, err := client.AcknowledgeOnBehalf(ctx, req)
				if resp == nil {
					resp = answer
				}
				return err
			})
			trace, terr := h.TraceNotification(ctx, r, ns[2].ID)
			if terr != nil || trace.State != hub.TraceDequeued || trace.Bundle == nil {
				t.Fatalf("the last notification after the calls: %+v, %v; want it dequeued", trace, terr)
			}
			events := remedyEvents(t, client, r, adminv1.AuditAction_AUDIT_ACTION_ACKNOWLEDGE_ON_BEHALF)
			if len(events) != 1 || events[0].GetBundleId() != trace.Bundle.ID {
				t.Fatalf("audit events of the acknowledgement %v (answer %v); want one, of bundle %s", events, resp, trace.Bundle.ID)
			}
		})
	}
}
