package admin_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/admin"
	"github.com/energydatahub/messagehub/internal/auth"
	"github.com/energydatahub/messagehub/internal/auth/authtest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// serve starts the gRPC server (MessageHub and Admin) over a hub on a
// pebble store in a temp dir and returns an Admin client and the hub.
func serve(t *testing.T, opts ...server.Option) (adminv1.AdminClient, *hub.Hub) {
	t.Helper()
	conn, h := serveConn(t, opts...)
	return adminv1.NewAdminClient(conn), h
}

// serveConn is serve with a connection to the server.
func serveConn(t *testing.T, opts ...server.Option) (*grpc.ClientConn, *hub.Hub) {
	t.Helper()
	st, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := hub.New(st, hub.Options{MaxBundleWeight: 2}, nil)
	t.Cleanup(func() { h.Close(); _ = st.Close() })
	srv, _ := server.NewGRPCServer(h, slog.New(slog.DiscardHandler), opts...)
	admin.Register(srv, h)
	return dial(t, srv), h
}

// serveWithTokens is serveConn of a server that checks tokens, with as,
// which makes a call's context carrying a token of subject with roles.
func serveWithTokens(t *testing.T) (*grpc.ClientConn, *hub.Hub, func(subject string, roles ...string) context.Context) {
	t.Helper()
	const issuer, audience = "https://issuer.test/", "messagehub"
	is := authtest.NewIssuer(t, issuer, audience)
	verifier, err := auth.NewVerifier(auth.Config{JWKSFile: is.WriteJWKS(t), Issuer: issuer, Audience: audience})
	if err != nil {
		t.Fatal(err)
	}
	conn, h := serveConn(t, server.WithAuthorizer(auth.NewAuthorizer(verifier)))
	as := func(subject string, roles ...string) context.Context {
		return metadata.AppendToOutgoingContext(ctxT(t), "authorization", "Bearer "+is.RS256(t, is.Claims(subject, roles...)))
	}
	return conn, h, as
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func save(t *testing.T, h *hub.Hub, recipient string, n int) []string {
	t.Helper()
	var ids []string
	ns := make([]domain.Notification, n)
	for i := range ns {
		ns[i] = domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginTimeSeries,
			ContentType: "rsm-014", DocumentType: "doc", SupportsBundling: true, Weight: 1}
		ids = append(ids, ns[i].ID)
	}
	if _, err := h.Save(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ids
}

// notFoundIsOK is err, except NOT_FOUND, which is nil.
func notFoundIsOK(err error) error {
	if status.Code(err) == codes.NotFound {
		return nil
	}
	return err
}

// Only a token with the admin role may call Admin: an actor (even about
// itself) and a domain are PERMISSION_DENIED, no token UNAUTHENTICATED.
func TestAdminNeedsTheAdminRole(t *testing.T) {
	conn, h, as := serveWithTokens(t)
	client := adminv1.NewAdminClient(conn)
	recipient := uuid.NewString()
	ids := save(t, h, recipient, 3)
	calls := map[string]func(ctx context.Context) error{
		"GetBacklog": func(ctx context.Context) error {
			_, err := client.GetBacklog(ctx, &adminv1.GetBacklogRequest{Recipient: recipient})
			return err
		},
		"PreviewNextBundle": func(ctx context.Context) error {
			_, err := client.PreviewNextBundle(ctx, &adminv1.PreviewNextBundleRequest{Recipient: recipient})
			return err
		},
		"TraceNotification": func(ctx context.Context) error {
			_, err := client.TraceNotification(ctx, &adminv1.TraceNotificationRequest{Recipient: recipient, NotificationId: ids[0]})
			return err
		},
		// The remedies: an allowed call is answered NOT_FOUND (no such
		// bundle; no such notification), so that the test needs
		// no state that a refused call could change.
		"ReleaseBundle": func(ctx context.Context) error {
			_, err := client.ReleaseBundle(ctx, &adminv1.ReleaseBundleRequest{Recipient: recipient, BundleId: uuid.NewString(), Reason: "r"})
			return notFoundIsOK(err)
		},
		"AcknowledgeOnBehalf": func(ctx context.Context) error {
			_, err := client.AcknowledgeOnBehalf(ctx, &adminv1.AcknowledgeOnBehalfRequest{
				Recipient: recipient, Domain: messagehubv1.Domain_DOMAIN_TIME_SERIES, ContentType: "rsm-014", UpToNotificationId: uuid.NewString(), Reason: "r",
			})
			return notFoundIsOK(err)
		},
	}
	for name, call := range calls {
		for _, tc := range []struct {
			who  string
			ctx  context.Context
			want codes.Code
		}{
			{"no token", ctxT(t), codes.Unauthenticated},
			{"the actor itself", as(recipient, auth.RoleActor), codes.PermissionDenied},
			{"a domain", as(uuid.NewString(), auth.RoleDomain), codes.PermissionDenied},
			{"an admin", as(uuid.NewString(), auth.RoleAdmin), codes.OK},
		} {
			if err := call(tc.ctx); status.Code(err) != tc.want {
				t.Errorf("%s by %s: %v; want %v", name, tc.who, err, tc.want)
			}
		}
	}
	// Nothing was peeked on the way.
	b, err := h.Backlog(ctxT(t), recipient)
	if err != nil || len(b.Pending) != 0 {
		t.Fatalf("pending after the admin calls: %+v, %v", b.Pending, err)
	}
}

// Without an authorizer (--auth none, loopback only) every call is served;
// the answers come from the hub's read-only calls.
func TestAdminAnswersWithoutAuthentication(t *testing.T) {
	client, h := serve(t)
	ctx := ctxT(t)
	recipient := uuid.NewString()
	ids := save(t, h, recipient, 3)

	backlog, err := client.GetBacklog(ctx, &adminv1.GetBacklogRequest{Recipient: recipient})
	if err != nil {
		t.Fatal(err)
	}
	if len(backlog.GetCabinets()) != 1 || backlog.GetCabinets()[0].GetWaiting() != 3 ||
		backlog.GetCabinets()[0].GetDomain() != messagehubv1.Domain_DOMAIN_TIME_SERIES ||
		backlog.GetCabinets()[0].GetOldestWaitingSavedAtMs() == 0 || len(backlog.GetPendingBundles()) != 0 {
		t.Fatalf("backlog: %v", backlog)
	}
	preview, err := client.PreviewNextBundle(ctx, &adminv1.PreviewNextBundleRequest{Recipient: recipient, Group: messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES})
	if err != nil {
		t.Fatal(err)
	}
	if p := preview.GetBundle(); p == nil || p.GetPending() || p.GetBundleId() != "" || p.GetNotificationCount() != 2 ||
		len(p.GetNotificationIds()) != 2 || p.GetNotificationIds()[0] != ids[0] || p.GetWeight() != 2 {
		t.Fatalf("preview: %v", preview)
	}
	peeked, err := h.Peek(ctx, recipient, domain.GroupTimeSeries, "")
	if err != nil || peeked == nil {
		t.Fatalf("peek: %v, %v", peeked, err)
	}
	preview, err = client.PreviewNextBundle(ctx, &adminv1.PreviewNextBundleRequest{Recipient: recipient})
	if err != nil || !preview.GetBundle().GetPending() || preview.GetBundle().GetBundleId() != peeked.ID || preview.GetBundle().GetCreatedAtMs() == 0 {
		t.Fatalf("preview with a pending bundle: %v, %v", preview, err)
	}
	trace, err := client.TraceNotification(ctx, &adminv1.TraceNotificationRequest{Recipient: recipient, NotificationId: ids[1]})
	if err != nil || trace.GetState() != adminv1.NotificationState_NOTIFICATION_STATE_PENDING ||
		trace.GetBundleId() != peeked.ID || trace.GetPosition() != 1 {
		t.Fatalf("trace: %v, %v", trace, err)
	}
	if err := h.Dequeue(ctx, recipient, peeked.ID); err != nil {
		t.Fatal(err)
	}
	trace, err = client.TraceNotification(ctx, &adminv1.TraceNotificationRequest{Recipient: recipient, NotificationId: ids[1]})
	if err != nil || trace.GetState() != adminv1.NotificationState_NOTIFICATION_STATE_DEQUEUED ||
		trace.GetBundleId() != peeked.ID || trace.GetDequeuedAtMs() == 0 {
		t.Fatalf("trace after the dequeue: %v, %v", trace, err)
	}
	trace, err = client.TraceNotification(ctx, &adminv1.TraceNotificationRequest{Recipient: recipient, NotificationId: uuid.NewString()})
	if err != nil || trace.GetState() != adminv1.NotificationState_NOTIFICATION_STATE_NOT_FOUND {
		t.Fatalf("trace of an unknown id: %v, %v", trace, err)
	}
	if _, err := client.GetBacklog(ctx, &adminv1.GetBacklogRequest{Recipient: "nobody"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a recipient that is no UUID: %v", err)
	}
	if _, err := client.PreviewNextBundle(ctx, &adminv1.PreviewNextBundleRequest{Recipient: recipient, Group: 99}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an unknown group: %v", err)
	}
}

// An Admin call's request is read as MessageHub's are: after its token and
// role are checked, so that a refused caller's request is never read
// (whatever it would cost to decode), and bytes that are not the method's
// message are INVALID_ARGUMENT, the client's error, not INTERNAL.
func TestAnAdminRequestIsReadOnlyAfterItsTokenIsChecked(t *testing.T) {
	conn, _, as := serveWithTokens(t)
	// Another message: its field 1 is a number, where each of these
	// requests has a string.
	notTheRequest := &messagehubv1.SaveResponse{Saved: 1}
	for _, tc := range []struct {
		who  string
		ctx  context.Context
		want codes.Code
	}{
		{"no token", ctxT(t), codes.Unauthenticated},
		{"an actor", as(uuid.NewString(), auth.RoleActor), codes.PermissionDenied},
		{"an admin", as(uuid.NewString(), auth.RoleAdmin), codes.InvalidArgument},
	} {
		for _, method := range []string{adminv1.Admin_GetBacklog_FullMethodName, adminv1.Admin_ReleaseBundle_FullMethodName} {
			err := conn.Invoke(tc.ctx, method, notTheRequest, &adminv1.GetBacklogResponse{})
			if status.Code(err) != tc.want {
				t.Errorf("%s by %s, a request that is no message of its own: %v; want %v", method, tc.who, err, tc.want)
			}
		}
	}
}
