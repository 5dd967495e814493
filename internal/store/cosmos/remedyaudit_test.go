package cosmos_test

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
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
// log recorded as the service records it, and returns a client, the hub and
// the audit log, which flushes when the test says.
func auditedAdmin(t *testing.T, db string) (adminv1.AdminClient, *hub.Hub, *audit.Log) {
	t.Helper()
	conn, h, log := auditedConn(t, db)
	return adminv1.NewAdminClient(conn), h, log
}

// auditedConn serves the MessageHub and Admin APIs of a hub on database db,
// with the audit log recorded as the services record it, and returns a
// connection to them, the hub and the audit log, which flushes when the
// test says.
func auditedConn(t *testing.T, db string) (*grpc.ClientConn, *hub.Hub, *audit.Log) {
	t.Helper()
	h := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
	t.Cleanup(h.Close)
	log := audit.NewLog(h, audit.Options{FlushInterval: time.Hour})
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
	return conn, h, log
}

// pendingBundle saves n notifications of a new recipient and peeks them:
// the recipient and its pending bundle.
func pendingBundle(t *testing.T, h *hub.Hub, n int) (string, *domain.Bundle) {
	t.Helper()
	r := uuid.NewString()
	if _, err := h.Save(context.Background(), notifications(n, r, 1)); err != nil {
		t.Fatal(err)
	}
	b, err := h.Peek(context.Background(), r, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("peek = %v, %v", b, err)
	}
	return r, b
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

// A release whose answers are lost for longer than the transport's resends
// applied all the same: the bundle is released. The operator is told so
// (the store finds its own effect on the primary), and the audit log
// records it; answered as failed, the release would take effect
// unrecorded. The operator's repeat finds the bundle released (NOT_FOUND)
// and records nothing.
func TestAReleaseWhoseAnswersAreLostIsRecordedOnce(t *testing.T) {
	for _, kind := range []cosmostest.FaultKind{cosmostest.LostUnavailable, cosmostest.LostTimeout, cosmostest.LostReset} {
		t.Run(string(kind), func(t *testing.T) {
			db := cosmostest.UniqueID("db")
			client, h, _ := auditedAdmin(t, db)
			ctx := context.Background()
			r, b := pendingBundle(t, h, 3)
			req := &adminv1.ReleaseBundleRequest{Recipient: r, BundleId: b.ID, Reason: "the actor lost its state"}
			// 6 firings: more than the transport's attempts of one batch.
			inject(t, db, cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", Type: "released", Kind: kind, Count: 6})
			_, err := client.ReleaseBundle(ctx, req)
			if fired(t, db) == 0 {
				t.Fatal("the fault never fired; the test tested nothing")
			}
			clearFaults(t, db)
			if err != nil {
				t.Fatalf("the release whose answers were lost: %v; want it answered as done", err)
			}
			if _, err := client.ReleaseBundle(ctx, req); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "released") {
				t.Fatalf("the release repeated: %v; want NOT_FOUND, released", err)
			}
			if _, err := h.Peek(ctx, r, domain.GroupAll, b.ID); err == nil {
				t.Fatal("the bundle is still pending: the test expects the release to have applied")
			}
			if events := remedyEvents(t, client, r, adminv1.AuditAction_AUDIT_ACTION_RELEASE_BUNDLE); len(events) != 1 || events[0].GetBundleId() != b.ID {
				t.Fatalf("audit events of the release %v; want one, of bundle %s", events, b.ID)
			}
		})
	}
}

// An acknowledgement on the actor's behalf whose dequeue batch applied
// though its answers were lost past the transport's resends, in a call
// that then fails, and that the operator repeats as told: a bundle each of
// three notifications; the second bundle's dequeue answers are lost (the
// store finds its own effect on the primary, so the call counts that bundle
// dequeued), and the third bundle's create batch is refused until the
// transport gives up, so the call fails naming the two bundles it dequeued,
// which the audit log records (a partial answer). The repeat dequeues the
// third; a further repeat finds nothing to do and records nothing. The log
// ends with exactly one event per bundle dequeued, and each notification
// is dequeued once, in the bundle its event names. Were the lost answers
// taken for a failure, the first call would name only the first bundle and
// the second would be dequeued unrecorded.
func TestAnAcknowledgementWhoseAnswersAreLostIsRecordedOnce(t *testing.T) {
	for _, kind := range []cosmostest.FaultKind{cosmostest.LostUnavailable, cosmostest.LostTimeout, cosmostest.LostReset} {
		t.Run(string(kind), func(t *testing.T) {
			db := cosmostest.UniqueID("db")
			client, h, _ := auditedAdmin(t, db)
			ctx := context.Background()
			r := uuid.NewString()
			ns := notifications(3, r, 1)
			for i := range ns {
				ns[i].SupportsBundling = false // a bundle each
			}
			if _, err := h.Save(ctx, ns); err != nil {
				t.Fatal(err)
			}
			req := &adminv1.AcknowledgeOnBehalfRequest{
				Recipient: r, Domain: messagehubv1.Domain(ns[0].Origin), ContentType: ns[0].ContentType,
				UpToNotificationId: ns[2].ID, Reason: "the actor cannot parse them",
			}
			// The first bundle's dequeue and the first two bundles' creates
			// pass; then each rule fires 6 times, more than the transport's
			// attempts of one batch.
			inject(t, db,
				cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", Type: "dequeued", Kind: kind, Skip: 1, Count: 6},
				cosmostest.Fault{Ops: []string{"batch"}, Coll: "recipients", Type: "slot", Kind: cosmostest.Refuse503, Skip: 2, Count: 6})
			_, err := client.AcknowledgeOnBehalf(ctx, req)
			rules, ferr := server.Faults()
			if ferr != nil {
				t.Fatal(ferr)
			}
			// The refusal shows in the first call's failure, checked below.
			if i := slices.IndexFunc(rules, func(f cosmostest.FaultState) bool { return f.DB == db && f.Type == "dequeued" }); i < 0 || rules[i].Fired == 0 {
				t.Fatalf("no dequeue answer was lost; the test tested nothing (first call: %v)", err)
			}
			clearFaults(t, db)
			bundles := make([]string, len(ns)) // the bundle each notification was dequeued in
			for i, n := range ns[:2] {
				trace, terr := h.TraceNotification(ctx, r, n.ID)
				if terr != nil || trace.State != hub.TraceDequeued || trace.Bundle == nil {
					t.Fatalf("notification %d after the first call: %+v, %v; want it dequeued", i, trace, terr)
				}
				bundles[i] = trace.Bundle.ID
				if err == nil || !strings.Contains(err.Error(), trace.Bundle.ID) {
					t.Fatalf("first call: %v; want it failed, naming bundle %s it dequeued", err, trace.Bundle.ID)
				}
			}
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("first call: %v; want UNAVAILABLE", err)
			}
			again, err := client.AcknowledgeOnBehalf(ctx, req)
			if err != nil || len(again.GetBundleIds()) != 1 || again.GetNotifications() != 1 || again.GetMore() {
				t.Fatalf("the repeat: %v, %v; want the last bundle, nothing more", again, err)
			}
			bundles[2] = again.GetBundleIds()[0]
			if nothing, err := client.AcknowledgeOnBehalf(ctx, req); err != nil || len(nothing.GetBundleIds()) != 0 || nothing.GetMore() {
				t.Fatalf("a further repeat: %v, %v; want nothing to do", nothing, err)
			}
			for i, n := range ns {
				trace, terr := h.TraceNotification(ctx, r, n.ID)
				if terr != nil || trace.State != hub.TraceDequeued || trace.Bundle == nil || trace.Bundle.ID != bundles[i] {
					t.Fatalf("notification %d after the calls: %+v, %v; want it dequeued in bundle %s", i, trace, terr, bundles[i])
				}
			}
			if b, err := h.Peek(ctx, r, domain.GroupAll, ""); err != nil || b != nil {
				t.Fatalf("the actor peeks %+v, %v after the acknowledgement; want nothing", b, err)
			}
			var recorded []string
			for _, e := range remedyEvents(t, client, r, adminv1.AuditAction_AUDIT_ACTION_ACKNOWLEDGE_ON_BEHALF) {
				recorded = append(recorded, e.GetBundleId())
			}
			slices.Sort(recorded)
			want := slices.Clone(bundles)
			slices.Sort(want)
			if !slices.Equal(recorded, want) || len(slices.Compact(slices.Clone(want))) != len(ns) {
				t.Fatalf("audit events of the acknowledgement name bundles %v; want one each of %v", recorded, bundles)
			}
		})
	}
}

// A release whose audit record cannot be written took effect all the same:
// the call fails, saying so and that its record waits for the audit log's
// next flush, which writes it. Refused, the record was not stored; its
// answers lost, it was, and the flush writes it again as the same
// document: either way the log then holds it once.
func TestAReleaseWhoseRecordFailsIsRecordedByTheNextFlush(t *testing.T) {
	for _, kind := range []cosmostest.FaultKind{cosmostest.Refuse503, cosmostest.LostTimeout} {
		t.Run(string(kind), func(t *testing.T) {
			db := cosmostest.UniqueID("db")
			client, h, log := auditedAdmin(t, db)
			ctx := context.Background()
			r, b := pendingBundle(t, h, 1)
			// 6 firings: more than the transport's attempts of one create.
			inject(t, db, cosmostest.Fault{Ops: []string{"create"}, Coll: "audit", Kind: kind, Count: 6})
			_, err := client.ReleaseBundle(ctx, &adminv1.ReleaseBundleRequest{Recipient: r, BundleId: b.ID, Reason: "the actor lost its state"})
			if fired(t, db) == 0 {
				t.Fatal("the fault never fired; the test tested nothing")
			}
			clearFaults(t, db)
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "took effect") || !strings.Contains(err.Error(), "next flush") {
				t.Fatalf("the release whose record failed: %v; want UNAVAILABLE, saying it took effect and its record waits", err)
			}
			if err := log.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if events := remedyEvents(t, client, r, adminv1.AuditAction_AUDIT_ACTION_RELEASE_BUNDLE); len(events) != 1 || events[0].GetBundleId() != b.ID {
				t.Fatalf("audit events of the release %v; want one, of bundle %s", events, b.ID)
			}
			if stored := storedAuditEvents(t, db, r); stored != 1 {
				t.Fatalf("the recipient's documents hold %d events; want the release's, once", stored)
			}
		})
	}
}
