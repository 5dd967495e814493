package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/app"
	"github.com/energydatahub/messagehub/internal/audit"
	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// An actor's Peek, PeekContent and Dequeue, through gRPC and through the
// HTTP gateway, and an operator's looks at its queue each appear in the
// actor's audit log, with the subject of the token that made them; an empty
// Peek does not. The log reads the same through gRPC and HTTP.
func TestTheAuditLogRecordsActorsAndOperatorsByTheirTokens(t *testing.T) {
	cfg, is := jwtConfig(t)
	// Flushed often: the test waits for the events to appear.
	app.SetAuditOptions(&cfg, audit.Options{FlushInterval: 20 * time.Millisecond})
	r := start(t, cfg)

	actor, operator := uuid.NewString(), uuid.NewString()
	as := func(ctx context.Context, subject string, roles ...string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+is.RS256(t, is.Claims(subject, roles...)))
	}
	actorCtx := func() context.Context { return as(callContext(t), actor, "actor") }
	adminCtx := func() context.Context { return as(callContext(t), operator, "admin") }
	var ids []string
	for range 2 {
		n := notification(actor)
		n.SupportsBundling = false // a bundle each
		ids = append(ids, n.GetId())
		if _, err := r.client.Save(as(callContext(t), uuid.NewString(), "domain"),
			&messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{n}}); err != nil {
			t.Fatal(err)
		}
	}

	// Through gRPC: peek, peek its content, dequeue.
	peeked, err := r.client.Peek(actorCtx(), &messagehubv1.PeekRequest{})
	if err != nil || peeked.GetBundle() == nil {
		t.Fatalf("Peek: %v %v", peeked, err)
	}
	viaGRPC := peeked.GetBundle().GetId()
	stream, err := r.client.PeekContent(actorCtx(), &messagehubv1.PeekRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("PeekContent: %v", err)
		}
	}
	if _, err := r.client.Dequeue(actorCtx(), &messagehubv1.DequeueRequest{BundleId: viaGRPC}); err != nil {
		t.Fatal(err)
	}

	// Through HTTP: the same three.
	web := func(method, path, subject, role string) []byte {
		t.Helper()
		req, err := http.NewRequestWithContext(callContext(t), method, "http://"+r.app.HTTPAddr()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+is.RS256(t, is.Claims(subject, role)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %s %v", method, path, resp.StatusCode, body, err)
		}
		return body
	}
	var httpPeek struct { // the bundle
		ID string `json:"id"`
	}
	if err := json.Unmarshal(web(http.MethodGet, "/v1/peek", actor, "actor"), &httpPeek); err != nil || httpPeek.ID == "" {
		t.Fatalf("GET /v1/peek: %+v %v", httpPeek, err)
	}
	viaHTTP := httpPeek.ID
	web(http.MethodGet, "/v1/peek/content", actor, "actor")
	web(http.MethodDelete, "/v1/dequeue/"+viaHTTP, actor, "actor")

	// Nothing is left: this peek fetches nothing and is not recorded.
	if empty, err := r.client.Peek(actorCtx(), &messagehubv1.PeekRequest{}); err != nil || empty.GetBundle() != nil {
		t.Fatalf("the last Peek: %v %v; want no bundle", empty, err)
	}

	// An operator looks, through HTTP and gRPC.
	web(http.MethodGet, "/admin/v1/recipients/"+actor+"/backlog", operator, "admin")
	conn, err := grpc.NewClient(r.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	adm := adminv1.NewAdminClient(conn)
	if _, err := adm.TraceNotification(adminCtx(), &adminv1.TraceNotificationRequest{Recipient: actor, NotificationId: ids[0]}); err != nil {
		t.Fatal(err)
	}

	want := []string{
		"PEEK " + actor + " " + viaGRPC, "PEEK_CONTENT " + actor + " " + viaGRPC, "DEQUEUE " + actor + " " + viaGRPC,
		"PEEK " + actor + " " + viaHTTP, "PEEK_CONTENT " + actor + " " + viaHTTP, "DEQUEUE " + actor + " " + viaHTTP,
		"INSPECT " + operator + " ", "INSPECT " + operator + " " + viaGRPC,
	}
	slices.Sort(want)
	var got []string
	deadline := time.Now().Add(callTimeout)
	for time.Now().Before(deadline) {
		got = nil
		resp, err := adm.ListAuditEvents(adminCtx(), &adminv1.ListAuditEventsRequest{Recipient: actor})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range resp.GetEvents() {
			got = append(got, fmt.Sprintf("%s %s %s", strings.TrimPrefix(e.GetAction().String(), "AUDIT_ACTION_"), e.GetSubject(), e.GetBundleId()))
		}
		if len(got) >= len(want) {
			break
		}
		time.Sleep(10 * time.Millisecond) // the next flush
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("the audit log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The same log through HTTP; an actor may not read it.
	var listed struct {
		Events []struct {
			Action, Subject, BundleID string
		} `json:"events"`
	}
	if err := json.Unmarshal(web(http.MethodGet, "/admin/v1/recipients/"+actor+"/audit?pageSize=3", operator, "admin"), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed.Events) != 3 {
		t.Fatalf("GET …/audit?pageSize=3: %+v; want 3 events", listed)
	}
	if _, err := adm.ListAuditEvents(actorCtx(), &adminv1.ListAuditEventsRequest{Recipient: actor}); err == nil {
		t.Fatal("an actor's token read the audit log")
	}
}

// fetchOne saves a notification for the recipient, peeks it and dequeues
// it, and returns the bundle's id.
func fetchOne(t *testing.T, r *running, recipient string) string {
	t.Helper()
	if _, err := r.client.Save(callContext(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{notification(recipient)}}); err != nil {
		t.Fatal(err)
	}
	peeked, err := r.client.Peek(callContext(t), &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil || peeked.GetBundle() == nil {
		t.Fatalf("Peek: %v %v", peeked, err)
	}
	if _, err := r.client.Dequeue(callContext(t), &messagehubv1.DequeueRequest{Recipient: recipient, BundleId: peeked.GetBundle().GetId()}); err != nil {
		t.Fatal(err)
	}
	return peeked.GetBundle().GetId()
}

// auditSpy counts the audit writes that reach the store.
type auditSpy struct {
	store.Store
	writes chan []audit.Event
}

func (s *auditSpy) AppendAudit(ctx context.Context, events []audit.Event) error {
	if err := s.Store.AppendAudit(ctx, events); err != nil {
		return err
	}
	s.writes <- events
	return nil
}

// What is buffered when the hub shuts down is written before the store
// closes, by the subject "local" without authentication.
func TestTheAuditLogIsFlushedAtShutdown(t *testing.T) {
	cfg := testConfig(t)
	app.SetAuditOptions(&cfg, audit.Options{FlushInterval: time.Hour})
	spy := &auditSpy{writes: make(chan []audit.Event, 10)}
	app.WrapStore(&cfg, func(s store.Store) store.Store { spy.Store = s; return spy })
	r := start(t, cfg)
	recipient := uuid.NewString()
	b := fetchOne(t, r, recipient)
	select {
	case w := <-spy.writes:
		t.Fatalf("written before shutdown: %+v", w)
	default:
	}
	if err := r.closeWithin(t); err != nil {
		t.Fatal(err)
	}
	if n := len(spy.writes); n != 1 {
		t.Fatalf("%d writes at shutdown; want the one flush", n)
	}

	// Durable: the store, opened again, has both events.
	want := []string{fmt.Sprintf("%d local %s", audit.ActionPeek, b), fmt.Sprintf("%d local %s", audit.ActionDequeue, b)}
	if got := storedEvents(t, cfg.DataDir, recipient); !slices.Equal(got, want) {
		t.Fatalf("events after a restart: %v; want %v", got, want)
	}
}

// storedEvents opens the embedded store in dir (the App closed) and returns
// the recipient's audit events as "action subject bundle", sorted.
func storedEvents(t *testing.T, dir, recipient string) []string {
	t.Helper()
	s, err := pebble.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	page, err := s.AuditEvents(callContext(t), audit.Range(recipient, time.Time{}, time.Time{}, "", 10))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range page.Events {
		got = append(got, fmt.Sprintf("%d %s %s", e.Action, e.Subject, e.BundleID))
	}
	slices.Sort(got)
	return got
}

// stuckDequeue is the embedded store whose dequeues wait, whatever their
// context says, until the test lets them go, and are then made (as a
// write the store had taken before its call was cut off); the test is told
// of each dequeue and each audit write that reaches it.
type stuckDequeue struct {
	store.Store
	entered chan struct{}
	release chan struct{}
	audits  chan struct{}
}

func (s *stuckDequeue) Acknowledge(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	s.entered <- struct{}{}
	<-s.release
	return s.Store.Acknowledge(context.WithoutCancel(ctx), recipient, rec, cursor)
}

func (s *stuckDequeue) AppendAudit(ctx context.Context, events []audit.Event) error {
	select {
	case s.audits <- struct{}{}:
	default:
	}
	return s.Store.AppendAudit(ctx, events)
}

// A Dequeue still running when shutdown cuts the servers off, whose
// dequeue the store makes afterwards, is in the audit log: the log's last
// flush waits for the calls still running (within its bound) rather than
// dropping what they record once they end.
func TestACallCutOffAtShutdownIsRecordedWhenItEnds(t *testing.T) {
	cfg := testConfig(t)
	// The drain is forced after 12 s; the audit log then has 2 s for the
	// Dequeue to end once released (a write and its event): a margin a
	// busy machine does not use up.
	cfg.ShutdownTimeout = 16 * time.Second
	app.SetAuditOptions(&cfg, audit.Options{FlushInterval: time.Hour})
	stuck := &stuckDequeue{entered: make(chan struct{}, 1), release: make(chan struct{}), audits: make(chan struct{}, 1)}
	app.WrapStore(&cfg, func(s store.Store) store.Store { stuck.Store = s; return stuck })
	r := start(t, cfg)
	var once sync.Once
	letGo := func() { once.Do(func() { close(stuck.release) }) }
	t.Cleanup(letGo) // before the cleanup that closes the App again

	recipient := uuid.NewString()
	if _, err := r.client.Save(callContext(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{notification(recipient)}}); err != nil {
		t.Fatal(err)
	}
	peeked, err := r.client.Peek(callContext(t), &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil || peeked.GetBundle() == nil {
		t.Fatalf("Peek: %v %v", peeked, err)
	}
	b := peeked.GetBundle().GetId()
	dequeued := make(chan error, 1)
	go func() {
		_, err := r.client.Dequeue(context.Background(), &messagehubv1.DequeueRequest{Recipient: recipient, BundleId: b})
		dequeued <- err
	}()
	await := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(callTimeout):
			t.Fatal(what)
		}
	}
	await(stuck.entered, "the Dequeue's write did not reach the store")

	r.stop()
	closed := make(chan error, 1)
	go func() { closed <- r.app.Close() }()
	select {
	case err := <-dequeued:
		if err == nil {
			t.Fatal("the Dequeue cut off by shutdown answered success")
		}
	case <-time.After(callTimeout):
		t.Fatal("the Dequeue was not cut off")
	}
	// The audit log is writing its buffer (the Peek's event): only now does
	// the store make the dequeue, and the call end.
	await(stuck.audits, "the audit log's buffer was not written at shutdown")
	letGo()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(cfg.ShutdownTimeout + closeMargin):
		t.Fatal("Close did not return")
	}

	want := []string{fmt.Sprintf("%d local %s", audit.ActionPeek, b), fmt.Sprintf("%d local %s", audit.ActionDequeue, b)}
	if got := storedEvents(t, cfg.DataDir, recipient); !slices.Equal(got, want) {
		t.Fatalf("events after a restart: %v; want %v", got, want)
	}
}

// hangingAudit is a store whose audit writes never answer (until their
// context ends).
type hangingAudit struct{ store.Store }

func (hangingAudit) AppendAudit(ctx context.Context, _ []audit.Event) error {
	<-ctx.Done()
	return ctx.Err()
}

// A store that does not take the audit log neither holds up nor fails an
// actor's calls, and shutdown stays within its bound.
func TestActorsCallsDoNotWaitForTheAuditLog(t *testing.T) {
	cfg := testConfig(t)
	app.SetAuditOptions(&cfg, audit.Options{FlushInterval: time.Millisecond, MaxBuffered: 2})
	app.WrapStore(&cfg, func(s store.Store) store.Store { return hangingAudit{s} })
	r := start(t, cfg)
	recipient := uuid.NewString()
	for range 5 {
		fetchOne(t, r, recipient)
	}
	// The events beyond the buffer were dropped, and the metric says so.
	req, err := http.NewRequestWithContext(callContext(t), http.MethodGet, "http://"+r.app.HTTPAddr()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var dropped float64
	for _, line := range strings.Split(string(metrics), "\n") {
		if v, ok := strings.CutPrefix(line, "messagehub_audit_events_dropped_total "); ok {
			_, _ = fmt.Sscan(v, &dropped)
		}
	}
	if dropped == 0 {
		t.Fatalf("no drops counted in /metrics:\n%s", metrics)
	}
	if err := r.closeWithin(t); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// A remedy is in the audit log when it answers, with its reason, while the
// actor's events wait for their flush; acknowledging on the actor's behalf
// records each bundle it dequeued.
func TestARemedyIsInTheAuditLogWhenItAnswers(t *testing.T) {
	cfg := testConfig(t)
	app.SetAuditOptions(&cfg, audit.Options{FlushInterval: time.Hour})
	r := start(t, cfg)
	conn, err := grpc.NewClient(r.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	adm := adminv1.NewAdminClient(conn)
	recipient := uuid.NewString()
	var ns []*messagehubv1.DataAvailable
	for range 3 {
		n := notification(recipient)
		n.SupportsBundling = false
		ns = append(ns, n)
	}
	if _, err := r.client.Save(callContext(t), &messagehubv1.SaveRequest{Notifications: ns}); err != nil {
		t.Fatal(err)
	}
	peeked, err := r.client.Peek(callContext(t), &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil || peeked.GetBundle() == nil {
		t.Fatalf("Peek: %v %v", peeked, err)
	}
	released := peeked.GetBundle().GetId()
	if _, err := adm.ReleaseBundle(callContext(t), &adminv1.ReleaseBundleRequest{Recipient: recipient, BundleId: released, Reason: "the actor lost it"}); err != nil {
		t.Fatal(err)
	}
	acked, err := adm.AcknowledgeOnBehalf(callContext(t), &adminv1.AcknowledgeOnBehalfRequest{Recipient: recipient,
		Domain: ns[1].GetOrigin(), ContentType: ns[1].GetContentType(), UpToNotificationId: ns[1].GetId(), Reason: "confirmed by phone"})
	if err != nil || len(acked.GetBundleIds()) != 2 {
		t.Fatalf("AcknowledgeOnBehalf: %v %v; want two bundles of one", acked, err)
	}
	resp, err := adm.ListAuditEvents(callContext(t), &adminv1.ListAuditEventsRequest{Recipient: recipient})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range resp.GetEvents() {
		got = append(got, fmt.Sprintf("%s %s %s %s", strings.TrimPrefix(e.GetAction().String(), "AUDIT_ACTION_"), e.GetSubject(), e.GetBundleId(), e.GetDetail()))
	}
	slices.Sort(got)
	cabinet := fmt.Sprintf("(up to notification %s of %s/%s)", ns[1].GetId(), ns[1].GetOrigin(), ns[1].GetContentType())
	want := []string{
		"RELEASE_BUNDLE local " + released + " the actor lost it",
		"ACKNOWLEDGE_ON_BEHALF local " + acked.GetBundleIds()[0] + " confirmed by phone " + cabinet,
		"ACKNOWLEDGE_ON_BEHALF local " + acked.GetBundleIds()[1] + " confirmed by phone " + cabinet,
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("the audit log as the remedies answered:\n%s\nwant (the Peek still buffered):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
