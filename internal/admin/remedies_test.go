package admin_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/admin"
	"github.com/energydatahub/messagehub/internal/audit"
	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

const timeSeries = messagehubv1.Domain_DOMAIN_TIME_SERIES

// wantCode fails the test unless err has the code and its message holds
// words.
func wantCode(t *testing.T, what string, err error, code codes.Code, words string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), words) {
		t.Fatalf("%s: %v; want %v saying %q", what, err, code, words)
	}
}

// Releasing a pending bundle answers it as it was; the next Peek cuts
// afresh. Acknowledging on the actor's behalf names every bundle dequeued.
// What cannot be served is answered with the code that says why.
func TestRemediesOverGRPC(t *testing.T) {
	client, h := serve(t) // bundles of at most 2
	ctx := ctxT(t)
	recipient := uuid.NewString()
	ids := save(t, h, recipient, 5)
	peeked, err := h.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || peeked == nil {
		t.Fatalf("peek: %v, %v", peeked, err)
	}

	released, err := client.ReleaseBundle(ctx, &adminv1.ReleaseBundleRequest{Recipient: recipient, BundleId: peeked.ID, Reason: "the actor lost its state"})
	if err != nil {
		t.Fatal(err)
	}
	if r := released.GetReleased(); r.GetBundleId() != peeked.ID || r.GetNotificationCount() != 2 || r.GetDomain() != timeSeries ||
		r.GetGroup() != messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES || r.GetCreatedAtMs() == 0 || r.GetEndPosition() != 2 {
		t.Fatalf("released: %v", released)
	}
	_, err = client.ReleaseBundle(ctx, &adminv1.ReleaseBundleRequest{Recipient: recipient, BundleId: peeked.ID, Reason: "again"})
	wantCode(t, "a second release", err, codes.NotFound, "released")
	if _, err := h.Peek(ctx, recipient, domain.GroupAll, peeked.ID); !errors.Is(err, domain.ErrBundleIDInUse) {
		t.Fatalf("a peek naming the released id: %v", err)
	}

	acked, err := client.AcknowledgeOnBehalf(ctx, &adminv1.AcknowledgeOnBehalfRequest{
		Recipient: recipient, Domain: timeSeries, ContentType: "rsm-014", UpToNotificationId: ids[2], Reason: "ticket 4711",
	})
	if err != nil {
		t.Fatal(err)
	}
	if acked.GetNotifications() != 3 || len(acked.GetBundleIds()) != 2 || slices.Contains(acked.GetBundleIds(), peeked.ID) {
		t.Fatalf("acknowledged: %v", acked)
	}
	next, err := h.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || next == nil || !slices.Equal(next.NotificationIDs, ids[3:5]) {
		t.Fatalf("the actor's next bundle: %v, %v", next, err)
	}
	again, err := client.AcknowledgeOnBehalf(ctx, &adminv1.AcknowledgeOnBehalfRequest{
		Recipient: recipient, Domain: timeSeries, ContentType: "rsm-014", UpToNotificationId: ids[0], Reason: "ticket 4711, again",
	})
	if err != nil || again.GetNotifications() != 0 || len(again.GetBundleIds()) != 0 || again.GetMore() {
		t.Fatalf("acknowledging up to a dequeued notification: %v, %v; want nothing to do", again, err)
	}
	for _, tc := range []struct {
		what  string
		req   *adminv1.AcknowledgeOnBehalfRequest
		code  codes.Code
		words string
	}{
		{"an unknown notification", &adminv1.AcknowledgeOnBehalfRequest{UpToNotificationId: uuid.NewString()}, codes.NotFound, "not stored"},
		{"another cabinet", &adminv1.AcknowledgeOnBehalfRequest{UpToNotificationId: ids[4], ContentType: "rsm-015"}, codes.InvalidArgument, "DOMAIN_TIME_SERIES/rsm-014"},
	} {
		req := tc.req
		req.Recipient, req.Domain, req.Reason = recipient, timeSeries, "why"
		if req.ContentType == "" {
			req.ContentType = "rsm-014"
		}
		_, err := client.AcknowledgeOnBehalf(ctx, req)
		wantCode(t, tc.what, err, tc.code, tc.words)
	}
}

// Every field of a remedy is checked before anything changes: a request
// with a bad one is INVALID_ARGUMENT, saying which, and the bundle stays
// pending with its notifications waiting.
func TestRemediesRefuseBadRequestsAndChangeNothing(t *testing.T) {
	client, h := serve(t)
	ctx := ctxT(t)
	recipient := uuid.NewString()
	ids := save(t, h, recipient, 3)
	peeked, err := h.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || peeked == nil {
		t.Fatalf("peek: %v, %v", peeked, err)
	}
	release := func(mod func(*adminv1.ReleaseBundleRequest)) error {
		req := &adminv1.ReleaseBundleRequest{Recipient: recipient, BundleId: peeked.ID, Reason: "why"}
		mod(req)
		_, err := client.ReleaseBundle(ctx, req)
		return err
	}
	acknowledge := func(mod func(*adminv1.AcknowledgeOnBehalfRequest)) error {
		req := &adminv1.AcknowledgeOnBehalfRequest{Recipient: recipient, Domain: timeSeries, ContentType: "rsm-014", UpToNotificationId: ids[2], Reason: "why"}
		mod(req)
		_, err := client.AcknowledgeOnBehalf(ctx, req)
		return err
	}
	long := strings.Repeat("é", 501) // characters, not bytes
	for _, tc := range []struct {
		what  string
		err   error
		words string
	}{
		{"release: no recipient", release(func(r *adminv1.ReleaseBundleRequest) { r.Recipient = "" }), "recipient"},
		{"release: a bundle id that is no UUID", release(func(r *adminv1.ReleaseBundleRequest) { r.BundleId = "b-1" }), "bundle_id"},
		{"release: no reason", release(func(r *adminv1.ReleaseBundleRequest) { r.Reason = "" }), "reason is required"},
		{"release: a blank reason", release(func(r *adminv1.ReleaseBundleRequest) { r.Reason = " \t\n" }), "reason is required"},
		{"release: a reason of control characters", release(func(r *adminv1.ReleaseBundleRequest) { r.Reason = "\x00\x1b\x7f" }), "reason is required"},
		{"release: a reason of invisible characters", release(func(r *adminv1.ReleaseBundleRequest) { r.Reason = "\u200b\ufeff\u00a0" }), "reason is required"},
		{"release: a reason too long", release(func(r *adminv1.ReleaseBundleRequest) { r.Reason = long }), "got 501"},
		{"acknowledge: a recipient that is no UUID", acknowledge(func(r *adminv1.AcknowledgeOnBehalfRequest) { r.Recipient = "nobody" }), "recipient"},
		{"acknowledge: no domain", acknowledge(func(r *adminv1.AcknowledgeOnBehalfRequest) { r.Domain = 0 }), "domain must be"},
		{"acknowledge: an unknown domain", acknowledge(func(r *adminv1.AcknowledgeOnBehalfRequest) { r.Domain = 99 }), "domain must be"},
		{"acknowledge: no content type", acknowledge(func(r *adminv1.AcknowledgeOnBehalfRequest) { r.ContentType = "" }), "content_type"},
		{"acknowledge: a bad content type", acknowledge(func(r *adminv1.AcknowledgeOnBehalfRequest) { r.ContentType = "a b" }), "content_type"},
		{"acknowledge: no notification", acknowledge(func(r *adminv1.AcknowledgeOnBehalfRequest) { r.UpToNotificationId = "" }), "up_to_notification_id"},
		{"acknowledge: no reason", acknowledge(func(r *adminv1.AcknowledgeOnBehalfRequest) { r.Reason = "" }), "reason is required"},
		{"acknowledge: a reason of control characters", acknowledge(func(r *adminv1.AcknowledgeOnBehalfRequest) { r.Reason = "\x01 \x02" }), "reason is required"},
		{"acknowledge: a reason too long", acknowledge(func(r *adminv1.AcknowledgeOnBehalfRequest) { r.Reason = long }), "1..500"},
	} {
		wantCode(t, tc.what, tc.err, codes.InvalidArgument, tc.words)
	}
	// 500 characters is allowed (1,000 bytes here).
	if err := release(func(r *adminv1.ReleaseBundleRequest) { r.Reason = long[:1000] }); err != nil {
		t.Fatalf("a reason of 500 characters: %v", err)
	}
	b, err := h.Backlog(ctx, recipient)
	if err != nil || len(b.Pending) != 0 || len(b.Cabinets) != 1 || b.Cabinets[0].Waiting != 3 {
		t.Fatalf("backlog after the refusals and a release: %+v, %v", b, err)
	}
}

// The hub's messages name domains as the API does, so that an operator
// can pass a name from an error to --domain.
func TestDomainNamesAreTheAPIs(t *testing.T) {
	for _, o := range append([]domain.Origin{domain.OriginUnspecified}, domain.Origins...) {
		if got, want := o.Name(), messagehubv1.Domain(o).String(); got != want {
			t.Errorf("origin %d is named %s, the API says %s", o, got, want)
		}
	}
}

// stopAfterAcknowledge is the store of a hub whose caller goes away once the
// first bundle is acknowledged: acknowledged is closed then, and the
// store's next look at a recipient waits for the end of the call it serves
// (later looks pass).
type stopAfterAcknowledge struct {
	store.Store
	once         sync.Once
	acknowledged chan struct{}
	stopped      atomic.Bool
}

func (s *stopAfterAcknowledge) Acknowledge(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	err := s.Store.Acknowledge(ctx, recipient, rec, cursor)
	if err == nil {
		s.once.Do(func() { close(s.acknowledged) })
	}
	return err
}

// testsOwnRead marks a context of the test's own calls, whose loads
// stopAfterAcknowledge never holds: the remedy, once its caller has left,
// may end before it loads again, and the first load after the
// acknowledgement is then the test's.
type testsOwnRead struct{}

func (s *stopAfterAcknowledge) LoadRecipient(ctx context.Context, recipient string, opts ...store.LoadOption) (store.RecipientState, error) {
	select {
	case <-s.acknowledged:
		if ctx.Value(testsOwnRead{}) == nil && s.stopped.CompareAndSwap(false, true) {
			<-ctx.Done()
			return store.RecipientState{}, ctx.Err()
		}
	default:
	}
	return s.Store.LoadRecipient(ctx, recipient, opts...)
}

// Acknowledging a backlog of more bundles than a call's bound (notifications
// that do not support bundling: a bundle each) answers at most
// hub.DefaultMaxAcknowledgeBundles bundle ids a call and says more remain;
// the same call again goes on until none do. Each answer stays small
// (without the bound, one answer names every bundle, past a client's
// receive limit once the work is done: at 64 MiB, about 1.7 million
// bundles; here a limit of 8 KiB and 250 bundles), and the audit log
// records every bundle dequeued, once, and nothing of a call that found
// nothing to do.
func TestAcknowledgingALargeBacklogTakesBoundedCalls(t *testing.T) {
	st, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := hub.New(st, hub.Options{}, nil)
	t.Cleanup(func() { h.Close(); _ = st.Close() })
	log := audit.NewLog(h, audit.Options{})
	t.Cleanup(func() { _ = log.Close(context.Background()) })
	srv, _ := server.NewGRPCServer(h, slog.New(slog.DiscardHandler), server.WithAudit(log, func(context.Context) string { return "op" }))
	admin.Register(srv, h)
	// An answer of 100 ids is about 3.8 KiB; one of 250, about 9.5 KiB.
	client := adminv1.NewAdminClient(dial(t, srv, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<10))))
	recipient := uuid.NewString()
	const n = 2*hub.DefaultMaxAcknowledgeBundles + 50
	ns := make([]domain.Notification, n)
	for i := range ns {
		ns[i] = domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginTimeSeries,
			ContentType: "rsm-014", DocumentType: "doc", SupportsBundling: false, Weight: 1}
	}
	if _, err := h.Save(ctxT(t), ns); err != nil {
		t.Fatal(err)
	}
	req := &adminv1.AcknowledgeOnBehalfRequest{
		Recipient: recipient, Domain: timeSeries, ContentType: "rsm-014", UpToNotificationId: ns[n-1].ID, Reason: "ticket 4715",
	}
	answered := map[string]bool{}
	var notifications int64
	for call := 0; ; call++ {
		if call == 3 {
			t.Fatalf("3 calls answered %d bundles, and more remain; want %d in 3", len(answered), n)
		}
		resp, err := client.AcknowledgeOnBehalf(ctxT(t), req)
		if err != nil {
			t.Fatalf("call %d: %v", call, err)
		}
		if len(resp.GetBundleIds()) > hub.DefaultMaxAcknowledgeBundles || resp.GetNotifications() != int64(len(resp.GetBundleIds())) {
			t.Fatalf("call %d answered %d bundles, %d notifications; want at most %d, one each",
				call, len(resp.GetBundleIds()), resp.GetNotifications(), hub.DefaultMaxAcknowledgeBundles)
		}
		for _, id := range resp.GetBundleIds() {
			if answered[id] {
				t.Fatalf("call %d answered bundle %s again", call, id)
			}
			answered[id] = true
		}
		notifications += resp.GetNotifications()
		if !resp.GetMore() {
			break
		}
	}
	if len(answered) != n || notifications != n {
		t.Fatalf("answered %d bundles, %d notifications; want %d", len(answered), notifications, n)
	}
	// Once more, up to a notification dequeued: nothing to do, and nothing
	// recorded (the log records each bundle dequeued, and this call
	// dequeued none).
	if resp, err := client.AcknowledgeOnBehalf(ctxT(t), req); err != nil || len(resp.GetBundleIds()) != 0 || resp.GetMore() {
		t.Fatalf("once more: %v, %v; want nothing to do", resp, err)
	}
	page, err := client.ListAuditEvents(ctxT(t), &adminv1.ListAuditEventsRequest{Recipient: recipient, PageSize: 1000}, grpc.MaxCallRecvMsgSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]bool{}
	for _, e := range page.GetEvents() {
		if e.GetAction() == adminv1.AuditAction_AUDIT_ACTION_ACKNOWLEDGE_ON_BEHALF && answered[e.GetBundleId()] && !recorded[e.GetBundleId()] {
			recorded[e.GetBundleId()] = true
		}
	}
	if len(recorded) != n || len(page.GetEvents()) != n {
		t.Fatalf("%d audit events, %d of distinct answered bundles; want %d", len(page.GetEvents()), len(recorded), n)
	}
}

// An acknowledgement on the actor's behalf cut short keeps the bundles it
// dequeued (docs/operations.md), and those are in the audit log as any
// remedy's: a remedy that took effect is recorded, whether or not its
// caller waits for the answer.
func TestAnAcknowledgementCutShortRecordsWhatItDequeued(t *testing.T) {
	st, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	stopping := &stopAfterAcknowledge{Store: st, acknowledged: make(chan struct{})}
	h := hub.New(stopping, hub.Options{MaxBundleWeight: 2}, nil)
	t.Cleanup(func() { h.Close(); _ = st.Close() })
	log := audit.NewLog(h, audit.Options{})
	t.Cleanup(func() { _ = log.Close(context.Background()) })
	srv, _ := server.NewGRPCServer(h, slog.New(slog.DiscardHandler), server.WithAudit(log, func(context.Context) string { return "op" }))
	admin.Register(srv, h)
	client := dialAdmin(t, srv)
	recipient := uuid.NewString()
	ids := save(t, h, recipient, 6) // three bundles of two

	ctx, cancel := context.WithCancel(ctxT(t))
	go func() { <-stopping.acknowledged; cancel() }()
	_, err = client.AcknowledgeOnBehalf(ctx, &adminv1.AcknowledgeOnBehalfRequest{
		Recipient: recipient, Domain: timeSeries, ContentType: "rsm-014", UpToNotificationId: ids[5], Reason: "ticket 4713",
	})
	if status.Code(err) != codes.Canceled {
		t.Fatalf("an acknowledgement whose caller left: %v; want CANCELED", err)
	}
	trace, err := h.TraceNotification(context.WithValue(ctxT(t), testsOwnRead{}, true), recipient, ids[0])
	if err != nil || trace.State != hub.TraceDequeued {
		t.Fatalf("the first notification after the call: %+v, %v; want it dequeued", trace, err)
	}
	// The event is written before the call ends; the server may still be
	// finishing the call the client left.
	var events []*adminv1.AuditEvent
	deadline := time.Now().Add(20 * time.Second)
	for len(events) == 0 && time.Now().Before(deadline) {
		page, err := client.ListAuditEvents(ctxT(t), &adminv1.ListAuditEventsRequest{Recipient: recipient})
		if err != nil {
			t.Fatal(err)
		}
		events = page.GetEvents()
		time.Sleep(time.Millisecond)
	}
	if len(events) != 1 || events[0].GetAction() != adminv1.AuditAction_AUDIT_ACTION_ACKNOWLEDGE_ON_BEHALF ||
		events[0].GetBundleId() != trace.Bundle.ID || !strings.Contains(events[0].GetDetail(), "ticket 4713") {
		t.Fatalf("audit events %v; want the acknowledgement of bundle %s", events, trace.Bundle.ID)
	}
}

// closeAfterAcknowledge is the store of a hub that is closed (a shutdown)
// once the first bundle of a call is acknowledged: the acknowledge returns
// when the hub refuses new calls.
type closeAfterAcknowledge struct {
	store.Store
	once   sync.Once
	hub    *hub.Hub
	closed chan struct{}
}

func (s *closeAfterAcknowledge) Acknowledge(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	err := s.Store.Acknowledge(ctx, recipient, rec, cursor)
	if err == nil {
		s.once.Do(func() {
			go func() { s.hub.Close(); close(s.closed) }()
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if _, err := s.hub.Backlog(ctx, recipient); errors.Is(err, domain.ErrUnavailable) {
					return // Close has begun
				}
			}
		})
	}
	return err
}

// A remedy that took effect while the hub shuts down is in the audit log:
// the hub, which the audit log writes through, stays open for its record.
// An acknowledgement on the actor's behalf that a shutdown cuts short
// (Close stops it between bundles) kept what it dequeued, and its record,
// written once the hub refused every call, was refused too.
func TestARemedyCutShortByAShutdownIsRecorded(t *testing.T) {
	st, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	closing := &closeAfterAcknowledge{Store: st, closed: make(chan struct{})}
	h := hub.New(closing, hub.Options{MaxBundleWeight: 2}, nil)
	closing.hub = h
	t.Cleanup(func() { <-closing.closed; _ = st.Close() })
	log := audit.NewLog(h, audit.Options{})
	srv, _ := server.NewGRPCServer(h, slog.New(slog.DiscardHandler), server.WithAudit(log, func(context.Context) string { return "op" }))
	admin.Register(srv, h)
	client := dialAdmin(t, srv)
	recipient := uuid.NewString()
	ids := save(t, h, recipient, 6) // three bundles of two

	_, err = client.AcknowledgeOnBehalf(ctxT(t), &adminv1.AcknowledgeOnBehalfRequest{
		Recipient: recipient, Domain: timeSeries, ContentType: "rsm-014", UpToNotificationId: ids[5], Reason: "ticket 4714",
	})
	t.Logf("the call: %v", err)
	<-closing.closed
	// The hub is closed: the store tells what was dequeued and recorded.
	state, err := st.LoadRecipient(ctxT(t), recipient)
	if err != nil {
		t.Fatal(err)
	}
	var acked int64
	for _, c := range state.Cursors {
		acked = max(acked, c.Acked)
	}
	if acked == 0 {
		t.Fatal("nothing was dequeued: the test tested nothing")
	}
	page, err := st.AuditEvents(ctxT(t), audit.Range(recipient, time.Time{}, time.Time{}, "", 100))
	if err != nil {
		t.Fatal(err)
	}
	if want := int(acked / 2); len(page.Events) != want {
		t.Fatalf("%d audit events for %d notifications dequeued in bundles of two; want %d", len(page.Events), acked, want)
	}
	for _, e := range page.Events {
		if e.Action != audit.ActionAcknowledgeOnBehalf || !strings.Contains(e.Detail, "ticket 4714") {
			t.Fatalf("audit event %+v; want the acknowledgement", e)
		}
	}
}
