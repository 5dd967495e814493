package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/domain"
)

// recordingHub is a stand-in for the repository at the transport edge only:
// it records what reached it, to prove that invalid input never does, and
// answers with canned results. The repository itself is tested against real
// stores.
type recordingHub struct {
	mu       sync.Mutex
	saves    [][]domain.Notification
	peeks    []peekCall
	dequeues []dequeueCall

	saveResult domain.SaveResult
	bundle     *domain.Bundle
	err        error
}

type peekCall struct {
	Recipient string
	Group     domain.PeekGroup
	BundleID  string
}

type dequeueCall struct{ Recipient, BundleID string }

func (h *recordingHub) Save(_ context.Context, ns []domain.Notification) (domain.SaveResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.saves = append(h.saves, ns)
	return h.saveResult, h.err
}

func (h *recordingHub) Peek(_ context.Context, recipient string, group domain.PeekGroup, bundleID string) (*domain.Bundle, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.peeks = append(h.peeks, peekCall{recipient, group, bundleID})
	return h.bundle, h.err
}

func (h *recordingHub) Dequeue(_ context.Context, recipient, bundleID string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dequeues = append(h.dequeues, dequeueCall{recipient, bundleID})
	return h.err
}

func (h *recordingHub) calls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.saves) + len(h.peeks) + len(h.dequeues)
}

// testServer serves hub over an in-process connection and returns clients.
func testServer(t *testing.T, hub Hub) (messagehubv1.MessageHubClient, healthpb.HealthClient, *health.Server) {
	t.Helper()
	conn, hs := testConn(t, hub)
	return messagehubv1.NewMessageHubClient(conn), healthpb.NewHealthClient(conn), hs
}

// testConn serves hub over an in-process connection and returns a client connection.
func testConn(t *testing.T, hub Hub, opts ...Option) (*grpc.ClientConn, *health.Server) {
	t.Helper()
	srv, hs := NewGRPCServer(hub, slog.New(slog.DiscardHandler), opts...)
	return serveConn(t, srv), hs
}

// serveConn serves srv over an in-process connection and returns a client
// connection to it.
func serveConn(t *testing.T, srv *grpc.Server) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxSendMsgSize), grpc.MaxCallSendMsgSize(MaxRecvMsgSize)),
	)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

const (
	recipient = "9f1c2b0e-3a4d-4e5f-8a6b-7c8d9e0f1a2b"
	bundleID  = "0b9a8c7d-6e5f-4a3b-9c2d-1e0f9a8b7c6d"
)

func uuidN(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012x", i) }

func validNotification(i int) *messagehubv1.DataAvailable {
	return &messagehubv1.DataAvailable{
		Id:               uuidN(i),
		Recipient:        recipient,
		Origin:           messagehubv1.Domain_DOMAIN_TIME_SERIES,
		ContentType:      "TimeSeries",
		DocumentType:     "NotifyValidatedMeasureData",
		SupportsBundling: true,
		Weight:           1,
	}
}

func notifications(n int) []*messagehubv1.DataAvailable {
	out := make([]*messagehubv1.DataAvailable, n)
	for i := range out {
		out[i] = validNotification(i)
	}
	return out
}

func with(f func(*messagehubv1.DataAvailable)) []*messagehubv1.DataAvailable {
	n := validNotification(1)
	f(n)
	return []*messagehubv1.DataAvailable{validNotification(0), n}
}

func TestSaveRejectsInvalidRequestsBeforeTheHub(t *testing.T) {
	tests := []struct {
		name          string
		notifications []*messagehubv1.DataAvailable
	}{
		{"an empty save", nil},
		{"a save of 10,001 notifications", notifications(10_001)},
		{"a notification id that is not a UUID", with(func(n *messagehubv1.DataAvailable) { n.Id = "not-a-uuid" })},
		{"a notification id without dashes", with(func(n *messagehubv1.DataAvailable) { n.Id = strings.ReplaceAll(uuidN(1), "-", "") })},
		{"a notification id in braces", with(func(n *messagehubv1.DataAvailable) { n.Id = "{" + uuidN(1) + "}" })},
		{"a missing notification id", with(func(n *messagehubv1.DataAvailable) { n.Id = "" })},
		{"a missing recipient", with(func(n *messagehubv1.DataAvailable) { n.Recipient = "" })},
		{"a recipient that is not a UUID", with(func(n *messagehubv1.DataAvailable) { n.Recipient = "8f1c2b0e-3a4d-4e5f-8a6b-7c8d9e0f1a2g" })},
		{"an unspecified origin", with(func(n *messagehubv1.DataAvailable) { n.Origin = messagehubv1.Domain_DOMAIN_UNSPECIFIED })},
		{"an undefined origin", with(func(n *messagehubv1.DataAvailable) { n.Origin = 99 })},
		{"a negative origin", with(func(n *messagehubv1.DataAvailable) { n.Origin = -1 })},
		{"a missing content type", with(func(n *messagehubv1.DataAvailable) { n.ContentType = "" })},
		{"a content type with a space", with(func(n *messagehubv1.DataAvailable) { n.ContentType = "Time Series" })},
		{"a content type with a slash", with(func(n *messagehubv1.DataAvailable) { n.ContentType = "application/xml" })},
		{"a content type of 256 characters", with(func(n *messagehubv1.DataAvailable) { n.ContentType = strings.Repeat("a", 256) })},
		{"a document type outside the charset", with(func(n *messagehubv1.DataAvailable) { n.DocumentType = "doc/type" })},
		{"a document type of 256 characters", with(func(n *messagehubv1.DataAvailable) { n.DocumentType = strings.Repeat("d", 256) })},
		{"weight 0", with(func(n *messagehubv1.DataAvailable) { n.Weight = 0 })},
		{"a negative weight", with(func(n *messagehubv1.DataAvailable) { n.Weight = -1 })},
		{"weight 2^31", with(func(n *messagehubv1.DataAvailable) { n.Weight = 1 << 31 })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hub := &recordingHub{}
			client, _, _ := testServer(t, hub)
			_, err := client.Save(ctxT(t), &messagehubv1.SaveRequest{Notifications: tt.notifications})
			if got := status.Code(err); got != codes.InvalidArgument {
				t.Fatalf("code = %s, want InvalidArgument (err %v)", got, err)
			}
			if n := hub.calls(); n != 0 {
				t.Errorf("the hub was called %d times for an invalid request", n)
			}
		})
	}
}

func TestSaveNormalisesAndPassesTheNotificationsInOrder(t *testing.T) {
	hub := &recordingHub{saveResult: domain.SaveResult{Saved: 2, Duplicates: 1}}
	client, _, _ := testServer(t, hub)
	req := &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{
		{
			Id: "AAAAAAAA-BBBB-4CCC-8DDD-EEEEEEEEEEEE", Recipient: strings.ToUpper(recipient),
			Origin: messagehubv1.Domain_DOMAIN_CHARGES, ContentType: "Charges", DocumentType: "",
			SupportsBundling: false, Weight: 1<<31 - 1,
		},
		{
			Id: uuidN(2), Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_AGGREGATIONS,
			ContentType: "a.b_c:d-E9", DocumentType: "Doc-1", SupportsBundling: true, Weight: 1,
		},
		{
			Id: uuidN(2), Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_AGGREGATIONS,
			ContentType: "a.b_c:d-E9", DocumentType: "Doc-1", SupportsBundling: true, Weight: 1,
		},
	}}
	resp, err := client.Save(ctxT(t), req)
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	if resp.GetSaved() != 2 || resp.GetDuplicates() != 1 {
		t.Errorf("response = %v, want saved 2 duplicates 1", resp)
	}
	want := [][]domain.Notification{{
		{
			ID: "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee", Recipient: recipient, Origin: domain.OriginCharges,
			ContentType: "Charges", DocumentType: "Charges", SupportsBundling: false, Weight: 1<<31 - 1,
		},
		{
			ID: uuidN(2), Recipient: recipient, Origin: domain.OriginAggregations,
			ContentType: "a.b_c:d-E9", DocumentType: "Doc-1", SupportsBundling: true, Weight: 1,
		},
		{
			ID: uuidN(2), Recipient: recipient, Origin: domain.OriginAggregations,
			ContentType: "a.b_c:d-E9", DocumentType: "Doc-1", SupportsBundling: true, Weight: 1,
		},
	}}
	if !reflect.DeepEqual(hub.saves, want) {
		t.Errorf("hub received\n%+v\nwant\n%+v", hub.saves, want)
	}
}

func TestAFullSaveOfTheLargestNotificationsFits(t *testing.T) {
	hub := &recordingHub{saveResult: domain.SaveResult{Saved: domain.MaxNotificationsPerSave}}
	client, _, _ := testServer(t, hub)
	ns := notifications(domain.MaxNotificationsPerSave)
	for _, n := range ns {
		n.ContentType = strings.Repeat("c", domain.MaxContentTypeLength)
		n.DocumentType = strings.Repeat("d", domain.MaxContentTypeLength)
	}
	req := &messagehubv1.SaveRequest{Notifications: ns}
	t.Logf("request size: %.1f MiB", float64(proto.Size(req))/(1<<20))
	resp, err := client.Save(ctxT(t), req)
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	if resp.GetSaved() != domain.MaxNotificationsPerSave || len(hub.saves) != 1 || len(hub.saves[0]) != domain.MaxNotificationsPerSave {
		t.Errorf("saved %d; hub got %d saves", resp.GetSaved(), len(hub.saves))
	}
}

func TestPeekRejectsInvalidRequestsBeforeTheHub(t *testing.T) {
	tests := []struct {
		name string
		req  *messagehubv1.PeekRequest
	}{
		{"a missing recipient", &messagehubv1.PeekRequest{}},
		{"a recipient that is not a UUID", &messagehubv1.PeekRequest{Recipient: "actor-1"}},
		{"a recipient with a trailing space", &messagehubv1.PeekRequest{Recipient: recipient + " "}},
		{"an undefined group", &messagehubv1.PeekRequest{Recipient: recipient, Group: 5}},
		{"a negative group", &messagehubv1.PeekRequest{Recipient: recipient, Group: -1}},
		{"a bundle id that is not a UUID", &messagehubv1.PeekRequest{Recipient: recipient, BundleId: "bundle-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hub := &recordingHub{}
			client, _, _ := testServer(t, hub)
			_, err := client.Peek(ctxT(t), tt.req)
			if got := status.Code(err); got != codes.InvalidArgument {
				t.Fatalf("code = %s, want InvalidArgument (err %v)", got, err)
			}
			if n := hub.calls(); n != 0 {
				t.Errorf("the hub was called %d times for an invalid request", n)
			}
		})
	}
}

func TestPeekPassesNormalisedArguments(t *testing.T) {
	tests := []struct {
		name string
		req  *messagehubv1.PeekRequest
		want peekCall
	}{
		{
			name: "an unspecified group and no bundle id pass through as they are",
			req:  &messagehubv1.PeekRequest{Recipient: recipient},
			want: peekCall{Recipient: recipient, Group: domain.GroupUnspecified},
		},
		{
			name: "upper-case ids are lower-cased",
			req:  &messagehubv1.PeekRequest{Recipient: strings.ToUpper(recipient), Group: messagehubv1.PeekGroup_PEEK_GROUP_MASTER_DATA, BundleId: strings.ToUpper(bundleID)},
			want: peekCall{Recipient: recipient, Group: domain.GroupMasterData, BundleID: bundleID},
		},
		{
			name: "every defined group maps to the domain group of the same number",
			req:  &messagehubv1.PeekRequest{Recipient: recipient, Group: messagehubv1.PeekGroup_PEEK_GROUP_AGGREGATIONS},
			want: peekCall{Recipient: recipient, Group: domain.GroupAggregations},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hub := &recordingHub{}
			client, _, _ := testServer(t, hub)
			resp, err := client.Peek(ctxT(t), tt.req)
			if err != nil {
				t.Fatalf("Peek: %v", err)
			}
			if resp.GetBundle() != nil {
				t.Errorf("bundle = %v, want none when the hub has nothing", resp.GetBundle())
			}
			if len(hub.peeks) != 1 || hub.peeks[0] != tt.want {
				t.Errorf("hub received %+v, want %+v", hub.peeks, tt.want)
			}
		})
	}
}

func TestEnumNumbersMatchTheDomain(t *testing.T) {
	origins := map[messagehubv1.Domain]domain.Origin{
		messagehubv1.Domain_DOMAIN_UNSPECIFIED:     domain.OriginUnspecified,
		messagehubv1.Domain_DOMAIN_TIME_SERIES:     domain.OriginTimeSeries,
		messagehubv1.Domain_DOMAIN_CHARGES:         domain.OriginCharges,
		messagehubv1.Domain_DOMAIN_MARKET_ROLES:    domain.OriginMarketRoles,
		messagehubv1.Domain_DOMAIN_METERING_POINTS: domain.OriginMeteringPoints,
		messagehubv1.Domain_DOMAIN_AGGREGATIONS:    domain.OriginAggregations,
	}
	for p, d := range origins {
		if int32(p) != int32(d) {
			t.Errorf("%s = %d, domain origin = %d", p, p, d)
		}
	}
	if len(origins) != len(messagehubv1.Domain_name) {
		t.Errorf("the proto has %d domains, the test knows %d", len(messagehubv1.Domain_name), len(origins))
	}
	groups := map[messagehubv1.PeekGroup]domain.PeekGroup{
		messagehubv1.PeekGroup_PEEK_GROUP_UNSPECIFIED:  domain.GroupUnspecified,
		messagehubv1.PeekGroup_PEEK_GROUP_ALL:          domain.GroupAll,
		messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES:  domain.GroupTimeSeries,
		messagehubv1.PeekGroup_PEEK_GROUP_AGGREGATIONS: domain.GroupAggregations,
		messagehubv1.PeekGroup_PEEK_GROUP_MASTER_DATA:  domain.GroupMasterData,
	}
	for p, d := range groups {
		if int32(p) != int32(d) {
			t.Errorf("%s = %d, domain group = %d", p, p, d)
		}
	}
	if len(groups) != len(messagehubv1.PeekGroup_name) {
		t.Errorf("the proto has %d groups, the test knows %d", len(messagehubv1.PeekGroup_name), len(groups))
	}
}

func TestPeekReturnsTheBundleWithEveryField(t *testing.T) {
	b := &domain.Bundle{
		ID: bundleID, Recipient: recipient, Origin: domain.OriginMeteringPoints, ContentType: "MeteringPoint",
		DocumentTypes: []string{"Create", "Update"}, NotificationIDs: []string{uuidN(1), uuidN(2), uuidN(3)}, Weight: 3,
	}
	client, _, _ := testServer(t, &recordingHub{bundle: b})
	resp, err := client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	want := &messagehubv1.Bundle{
		Id: bundleID, Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_METERING_POINTS, ContentType: "MeteringPoint",
		DocumentTypes: []string{"Create", "Update"}, NotificationIds: []string{uuidN(1), uuidN(2), uuidN(3)}, Weight: 3,
	}
	if !proto.Equal(resp.GetBundle(), want) {
		t.Errorf("bundle = %v\nwant %v", resp.GetBundle(), want)
	}
}

func TestTheLargestBundleFitsTheSendLimit(t *testing.T) {
	const n = domain.DefaultMaxBundleWeight
	b := &domain.Bundle{ID: bundleID, Recipient: recipient, Origin: domain.OriginTimeSeries, ContentType: "TimeSeries", Weight: n}
	for i := range n {
		b.NotificationIDs = append(b.NotificationIDs, uuidN(i))
		// Worst case: every notification brings its own 255-character document type.
		b.DocumentTypes = append(b.DocumentTypes, fmt.Sprintf("%0255d", i))
	}
	client, _, _ := testServer(t, &recordingHub{bundle: b})
	resp, err := client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	t.Logf("response size: %.1f MiB", float64(proto.Size(resp))/(1<<20))
	if got := len(resp.GetBundle().GetNotificationIds()); got != n {
		t.Errorf("got %d notification ids, want %d", got, n)
	}
}

func TestDequeueRejectsInvalidRequestsBeforeTheHub(t *testing.T) {
	tests := []struct {
		name string
		req  *messagehubv1.DequeueRequest
	}{
		{"a missing recipient", &messagehubv1.DequeueRequest{BundleId: bundleID}},
		{"a missing bundle id", &messagehubv1.DequeueRequest{Recipient: recipient}},
		{"a recipient that is not a UUID", &messagehubv1.DequeueRequest{Recipient: "x", BundleId: bundleID}},
		{"a bundle id that is not a UUID", &messagehubv1.DequeueRequest{Recipient: recipient, BundleId: bundleID[:35]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hub := &recordingHub{}
			client, _, _ := testServer(t, hub)
			_, err := client.Dequeue(ctxT(t), tt.req)
			if got := status.Code(err); got != codes.InvalidArgument {
				t.Fatalf("code = %s, want InvalidArgument (err %v)", got, err)
			}
			if n := hub.calls(); n != 0 {
				t.Errorf("the hub was called %d times for an invalid request", n)
			}
		})
	}
}

func TestDequeuePassesLowerCasedIDs(t *testing.T) {
	hub := &recordingHub{}
	client, _, _ := testServer(t, hub)
	if _, err := client.Dequeue(ctxT(t), &messagehubv1.DequeueRequest{Recipient: strings.ToUpper(recipient), BundleId: strings.ToUpper(bundleID)}); err != nil {
		t.Fatalf("Dequeue: %v", err)
	}
	want := []dequeueCall{{recipient, bundleID}}
	if !reflect.DeepEqual(hub.dequeues, want) {
		t.Errorf("hub received %+v, want %+v", hub.dequeues, want)
	}
}

func TestHubErrorsReachTheClientAsStatusCodes(t *testing.T) {
	tests := []struct {
		name string
		err  error
		call func(context.Context, messagehubv1.MessageHubClient) error
		want codes.Code
	}{
		{
			name: "a conflicting save is ALREADY_EXISTS",
			err:  domain.ErrNotificationConflict,
			call: func(ctx context.Context, c messagehubv1.MessageHubClient) error {
				_, err := c.Save(ctx, &messagehubv1.SaveRequest{Notifications: notifications(1)})
				return err
			},
			want: codes.AlreadyExists,
		},
		{
			name: "another pending bundle is FAILED_PRECONDITION",
			err:  domain.ErrOtherBundlePending,
			call: func(ctx context.Context, c messagehubv1.MessageHubClient) error {
				_, err := c.Peek(ctx, &messagehubv1.PeekRequest{Recipient: recipient, BundleId: bundleID})
				return err
			},
			want: codes.FailedPrecondition,
		},
		{
			name: "an unknown bundle is NOT_FOUND",
			err:  domain.ErrNotFound,
			call: func(ctx context.Context, c messagehubv1.MessageHubClient) error {
				_, err := c.Dequeue(ctx, &messagehubv1.DequeueRequest{Recipient: recipient, BundleId: bundleID})
				return err
			},
			want: codes.NotFound,
		},
		{
			name: "an unexpected error is INTERNAL without detail",
			err:  fmt.Errorf("secret detail"),
			call: func(ctx context.Context, c messagehubv1.MessageHubClient) error {
				_, err := c.Peek(ctx, &messagehubv1.PeekRequest{Recipient: recipient})
				if strings.Contains(status.Convert(err).Message(), "secret") {
					return fmt.Errorf("internal detail leaked: %w", err)
				}
				return err
			},
			want: codes.Internal,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, _, _ := testServer(t, &recordingHub{err: tt.err})
			err := tt.call(ctxT(t), client)
			if got := status.Code(err); got != tt.want {
				t.Errorf("code = %s, want %s (err %v)", got, tt.want, err)
			}
		})
	}
}

func TestHealthFollowsSetServing(t *testing.T) {
	_, hc, hs := testServer(t, &recordingHub{})
	check := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for _, name := range []string{"", ServiceName} {
			resp, err := hc.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: name})
			if err != nil {
				t.Fatalf("Check(%q): %v", name, err)
			}
			if resp.GetStatus() != want {
				t.Errorf("Check(%q) = %s, want %s", name, resp.GetStatus(), want)
			}
		}
	}
	check(healthpb.HealthCheckResponse_NOT_SERVING)
	SetServing(hs, true)
	check(healthpb.HealthCheckResponse_SERVING)
	SetServing(hs, false)
	check(healthpb.HealthCheckResponse_NOT_SERVING)
}

func TestReflectionListsTheServices(t *testing.T) {
	conn, _ := testConn(t, &recordingHub{})
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctxT(t))
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatalf("send: %v", err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{ServiceName, "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
}
