package admin_test

import (
	"context"
	"encoding/base64"
	"log/slog"
	"net"
	"sync"
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
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/figures"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// testClock reads a second later every time.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Second)
	return c.now
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// figuresEnv is an Admin client over a hub whose figures the test
// recounts by hand.
type figuresEnv struct {
	client adminv1.AdminClient
	hub    *hub.Hub
	keeper *figures.Keeper
	clock  *testClock
}

func serveFigures(t *testing.T) *figuresEnv {
	t.Helper()
	st, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := &testClock{now: time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)}
	h := hub.New(st, hub.Options{Now: clock.Now}, nil)
	t.Cleanup(func() { h.Close(); _ = st.Close() })
	srv, _ := server.NewGRPCServer(h, slog.New(slog.DiscardHandler))
	admin.Register(srv, h)
	return &figuresEnv{client: dialAdmin(t, srv), hub: h, keeper: figures.New(st, figures.Options{Now: clock.Now}), clock: clock}
}

// dialAdmin serves srv in memory and returns an Admin client of it.
func dialAdmin(t *testing.T, srv *grpc.Server) adminv1.AdminClient {
	t.Helper()
	return adminv1.NewAdminClient(dial(t, srv))
}

// dial serves srv in memory and returns a connection to it, made with
// opts too.
func dial(t *testing.T, srv *grpc.Server, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet", append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func (e *figuresEnv) save(t *testing.T, recipient string, n int) {
	t.Helper()
	ns := make([]domain.Notification, n)
	for i := range ns {
		ns[i] = domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges,
			ContentType: "c", DocumentType: "c", SupportsBundling: true, Weight: 1}
	}
	if _, err := e.hub.Save(ctxT(t), ns); err != nil {
		t.Fatal(err)
	}
}

func (e *figuresEnv) recount(t *testing.T) {
	t.Helper()
	if err := e.keeper.Recount(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func recipientsOf(resp *adminv1.ListRecipientsResponse) []string {
	var out []string
	for _, r := range resp.GetRecipients() {
		out = append(out, r.GetRecipient())
	}
	return out
}

func TestListRecipientsPagesTheFiguresInEitherOrder(t *testing.T) {
	e := serveFigures(t)
	ctx := ctxT(t)
	empty, err := e.client.ListRecipients(ctx, &adminv1.ListRecipientsRequest{})
	if err != nil || len(empty.GetRecipients()) != 0 || empty.GetComputedAtMs() != 0 {
		t.Fatalf("before any recount: %v (%v); want nothing, computed at 0", empty, err)
	}
	oldest, middle, largest := uuid.NewString(), uuid.NewString(), uuid.NewString()
	e.save(t, oldest, 1)
	e.save(t, middle, 2)
	e.save(t, largest, 5)
	e.recount(t)

	byAge, err := e.client.ListRecipients(ctx, &adminv1.ListRecipientsRequest{PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := recipientsOf(byAge); len(got) != 2 || got[0] != oldest || got[1] != middle || byAge.GetNextPageToken() == "" || byAge.GetComputedAtMs() == 0 {
		t.Fatalf("first page by age: %v, next %q", got, byAge.GetNextPageToken())
	}
	if r := byAge.GetRecipients()[0]; r.GetWaiting() != 1 || r.GetOldestWaitingSavedAtMs() == 0 || r.GetPendingBundles() != 0 {
		t.Fatalf("oldest recipient's line: %v", r)
	}
	rest, err := e.client.ListRecipients(ctx, &adminv1.ListRecipientsRequest{PageSize: 2, PageToken: byAge.GetNextPageToken()})
	if err != nil {
		t.Fatal(err)
	}
	if got := recipientsOf(rest); len(got) != 1 || got[0] != largest || rest.GetNextPageToken() != "" {
		t.Fatalf("last page by age: %v, next %q", got, rest.GetNextPageToken())
	}
	bySize, err := e.client.ListRecipients(ctx, &adminv1.ListRecipientsRequest{Order: adminv1.RecipientOrder_RECIPIENT_ORDER_SIZE})
	if err != nil {
		t.Fatal(err)
	}
	if got := recipientsOf(bySize); len(got) != 3 || got[0] != largest || got[1] != middle || got[2] != oldest {
		t.Fatalf("by size: %v", got)
	}
	for name, req := range map[string]*adminv1.ListRecipientsRequest{
		"a page size over 1,000":       {PageSize: 1001},
		"a negative page size":         {PageSize: -1},
		"an order that does not exist": {Order: 7},
		"a token of the other order":   {Order: adminv1.RecipientOrder_RECIPIENT_ORDER_SIZE, PageToken: byAge.GetNextPageToken()},
		"a token never given":          {PageToken: "not-a-token"},
		// Its place plus the page size overflowed: a panic (INTERNAL).
		"a token past every list": {PageToken: base64.RawURLEncoding.EncodeToString([]byte("r1:0:9223372036854775807"))},
	} {
		if _, err := e.client.ListRecipients(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
}

func TestGetBacklogHistoryReturnsTheSamplesOfTheWindow(t *testing.T) {
	e := serveFigures(t)
	ctx := ctxT(t)
	none, err := e.client.GetBacklogHistory(ctx, &adminv1.GetBacklogHistoryRequest{})
	if err != nil || len(none.GetSamples()) != 0 {
		t.Fatalf("before any recount: %v (%v)", none, err)
	}
	r := uuid.NewString()
	e.save(t, r, 3)
	e.recount(t)
	e.clock.advance(store.HistoryStep)
	e.save(t, r, 1)
	e.recount(t)

	all, err := e.client.GetBacklogHistory(ctx, &adminv1.GetBacklogHistoryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.GetSamples()) != 2 {
		t.Fatalf("%d samples, want 2: %v", len(all.GetSamples()), all)
	}
	first, last := all.GetSamples()[0], all.GetSamples()[1]
	if first.GetAtMs() >= last.GetAtMs() {
		t.Fatalf("samples not oldest first: %v", all)
	}
	waiting := func(s *adminv1.BacklogSample) (int64, int64) {
		for _, d := range s.GetDomains() {
			if d.GetDomain() == messagehubv1.Domain_DOMAIN_CHARGES {
				return d.GetWaiting(), d.GetOldestAgeSeconds()
			}
		}
		t.Fatalf("no charges in %v", s)
		return 0, 0
	}
	if n, age := waiting(first); n != 3 || age < 0 {
		t.Fatalf("first sample: %d charges, %d s old; want 3", n, age)
	}
	if n, age := waiting(last); n != 4 || age < int64(store.HistoryStep/time.Second) {
		t.Fatalf("last sample: %d charges, %d s old; want 4, at least a step old", n, age)
	}
	recent, err := e.client.GetBacklogHistory(ctx, &adminv1.GetBacklogHistoryRequest{Minutes: 1})
	if err != nil || len(recent.GetSamples()) != 1 || recent.GetSamples()[0].GetAtMs() != last.GetAtMs() {
		t.Fatalf("the last minute: %v (%v); want the last sample only", recent, err)
	}
	for _, m := range []int32{-1, 1441} {
		if _, err := e.client.GetBacklogHistory(ctx, &adminv1.GetBacklogHistoryRequest{Minutes: m}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("minutes %d: %v, want INVALID_ARGUMENT", m, err)
		}
	}
}
