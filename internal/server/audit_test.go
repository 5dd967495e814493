package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"google.golang.org/grpc"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/audit"
	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
)

// Each recorded call makes its event from its request and answer: the
// recipient, the bundle (or bundles) and the reason, in lower case where
// they are ids.
func TestAuditEventsOfEachCall(t *testing.T) {
	r, b, b2, n := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	at := time.Now()
	type want struct {
		action audit.Action
		bundle string
		detail string
		remedy bool
	}
	for _, tc := range []struct {
		name      string
		method    string
		req, resp any
		want      []want
	}{
		{"a peek that returned a bundle", messagehubv1.MessageHub_Peek_FullMethodName,
			&messagehubv1.PeekRequest{Recipient: strings.ToUpper(r)}, &messagehubv1.PeekResponse{Bundle: &messagehubv1.Bundle{Id: b, Recipient: r}},
			[]want{{action: audit.ActionPeek, bundle: b}}},
		{"an empty peek fetched nothing", messagehubv1.MessageHub_Peek_FullMethodName,
			&messagehubv1.PeekRequest{Recipient: r}, &messagehubv1.PeekResponse{}, nil},
		{"a content peek", messagehubv1.MessageHub_PeekContent_FullMethodName,
			&messagehubv1.PeekRequest{Recipient: r}, &messagehubv1.Bundle{Id: b, Recipient: r},
			[]want{{action: audit.ActionPeekContent, bundle: b}}},
		{"a dequeue", messagehubv1.MessageHub_Dequeue_FullMethodName,
			&messagehubv1.DequeueRequest{Recipient: strings.ToUpper(r), BundleId: strings.ToUpper(b)}, &messagehubv1.DequeueResponse{},
			[]want{{action: audit.ActionDequeue, bundle: b}}},
		{"a release", adminv1.Admin_ReleaseBundle_FullMethodName,
			&adminv1.ReleaseBundleRequest{Recipient: r, BundleId: b, Reason: "stuck since Friday"},
			&adminv1.ReleaseBundleResponse{Released: &adminv1.PendingBundle{BundleId: b}},
			[]want{{action: audit.ActionReleaseBundle, bundle: b, detail: "stuck since Friday", remedy: true}}},
		{"an acknowledgement on the actor's behalf: one event per bundle", adminv1.Admin_AcknowledgeOnBehalf_FullMethodName,
			&adminv1.AcknowledgeOnBehalfRequest{Recipient: r, Domain: messagehubv1.Domain_DOMAIN_CHARGES, ContentType: "ct",
				UpToNotificationId: n, Reason: "actor confirmed by phone"},
			&adminv1.AcknowledgeOnBehalfResponse{BundleIds: []string{b, b2}, Notifications: 7},
			[]want{
				{action: audit.ActionAcknowledgeOnBehalf, bundle: b, remedy: true,
					detail: "actor confirmed by phone (up to notification " + n + " of DOMAIN_CHARGES/ct)"},
				{action: audit.ActionAcknowledgeOnBehalf, bundle: b2, remedy: true,
					detail: "actor confirmed by phone (up to notification " + n + " of DOMAIN_CHARGES/ct)"},
			}},
		{"a look at the backlog", adminv1.Admin_GetBacklog_FullMethodName,
			&adminv1.GetBacklogRequest{Recipient: r}, &adminv1.GetBacklogResponse{},
			[]want{{action: audit.ActionInspect, detail: "backlog"}}},
		{"a preview", adminv1.Admin_PreviewNextBundle_FullMethodName,
			&adminv1.PreviewNextBundleRequest{Recipient: r, Group: messagehubv1.PeekGroup_PEEK_GROUP_MASTER_DATA},
			&adminv1.PreviewNextBundleResponse{Bundle: &adminv1.BundlePreview{Pending: true, BundleId: b}},
			[]want{{action: audit.ActionInspect, bundle: b, detail: "next bundle of PEEK_GROUP_MASTER_DATA"}}},
		{"a trace", adminv1.Admin_TraceNotification_FullMethodName,
			&adminv1.TraceNotificationRequest{Recipient: r, NotificationId: strings.ToUpper(n)},
			&adminv1.TraceNotificationResponse{BundleId: b},
			[]want{{action: audit.ActionInspect, bundle: b, detail: "notification " + n}}},
		{"a save is no actor's fetch", messagehubv1.MessageHub_Save_FullMethodName,
			&messagehubv1.SaveRequest{}, &messagehubv1.SaveResponse{}, nil},
		{"the audit log's own reading", adminv1.Admin_ListAuditEvents_FullMethodName,
			&adminv1.ListAuditEventsRequest{Recipient: r}, &adminv1.ListAuditEventsResponse{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := auditEvents(tc.method, tc.req, tc.resp, "the-subject", at)
			if len(got) != len(tc.want) {
				t.Fatalf("%d events %+v; want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				e := got[i]
				if e.Action != w.action || e.Recipient != r || e.BundleID != w.bundle || e.Detail != w.detail ||
					e.Subject != "the-subject" || !e.At.Equal(at) || e.Action.Remedy() != w.remedy {
					t.Errorf("event %d: %+v; want %+v for recipient %s", i, e, w, r)
				}
			}
		})
	}
}

// auditor keeps what is recorded and written, and fails writes when told.
type auditor struct {
	recorded, written []audit.Event
	fail              error
}

func (a *auditor) Record(e audit.Event) { a.recorded = append(a.recorded, e) }

func (a *auditor) Hold(ctx context.Context) (context.Context, func(), error) {
	return ctx, func() {}, nil
}

func (a *auditor) Begin() func() { return func() {} }

func (a *auditor) Write(_ context.Context, events ...audit.Event) error {
	if a.fail != nil {
		return a.fail
	}
	a.written = append(a.written, events...)
	return nil
}

// A remedy is written before the call answers, and a failure to write it
// fails the call, saying that the remedy took effect; an actor's call is
// only buffered.
func TestRemediesAreWrittenAndActorsCallsBuffered(t *testing.T) {
	a := &auditor{}
	o := &options{auditor: a, subject: func(context.Context) string { return "op" }}
	r, b := uuid.NewString(), uuid.NewString()
	release := &adminv1.ReleaseBundleRequest{Recipient: r, BundleId: b, Reason: "why"}
	if err := o.record(context.Background(), adminv1.Admin_ReleaseBundle_FullMethodName, release, &adminv1.ReleaseBundleResponse{}); err != nil {
		t.Fatal(err)
	}
	dequeue := &messagehubv1.DequeueRequest{Recipient: r, BundleId: b}
	if err := o.record(context.Background(), messagehubv1.MessageHub_Dequeue_FullMethodName, dequeue, &messagehubv1.DequeueResponse{}); err != nil {
		t.Fatal(err)
	}
	if len(a.written) != 1 || a.written[0].Action != audit.ActionReleaseBundle || len(a.recorded) != 1 || a.recorded[0].Action != audit.ActionDequeue {
		t.Fatalf("written %+v, recorded %+v; want the release written, the dequeue recorded", a.written, a.recorded)
	}
	a.fail = errors.New("store down")
	err := o.record(context.Background(), adminv1.Admin_ReleaseBundle_FullMethodName, release, &adminv1.ReleaseBundleResponse{})
	if !errors.Is(err, domain.ErrUnavailable) || !strings.Contains(err.Error(), "ReleaseBundle took effect") {
		t.Fatalf("a remedy whose record failed: %v; want UNAVAILABLE saying it took effect", err)
	}
}

// A remedy whose outcome is unknown and whose record cannot be written
// fails saying that it may have taken effect, not that it did.
func TestARemedyOfUnknownOutcomeWhoseRecordFailsSaysItMayHaveTakenEffect(t *testing.T) {
	o := &options{auditor: &auditor{fail: errors.New("store down")}, subject: func(context.Context) string { return "op" }}
	r, b := uuid.NewString(), uuid.NewString()
	release := &adminv1.ReleaseBundleRequest{Recipient: r, BundleId: b, Reason: "why"}
	lost := &hub.OutcomeUnknown{Change: "release", Bundle: bundle.Record{ID: b}, Err: errors.New("answer lost")}
	intercept := unaryAuditInterceptor(o)
	_, err := intercept(context.Background(), release, &grpc.UnaryServerInfo{FullMethod: adminv1.Admin_ReleaseBundle_FullMethodName},
		func(context.Context, any) (any, error) { return nil, lost })
	if err == nil || strings.Contains(err.Error(), "took effect") || !strings.Contains(err.Error(), "may have taken effect") {
		t.Fatalf("a remedy of unknown outcome whose record failed: %v; want it to say the remedy may have taken effect", err)
	}
}

// lockedAuditor is auditor for calls served by a running server: the
// server records from its goroutines.
type lockedAuditor struct {
	mu sync.Mutex
	auditor
}

func (a *lockedAuditor) Record(e audit.Event) { a.mu.Lock(); defer a.mu.Unlock(); a.auditor.Record(e) }

func (a *lockedAuditor) Write(ctx context.Context, events ...audit.Event) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.auditor.Write(ctx, events...)
}

func (a *lockedAuditor) events() []audit.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Concat(a.recorded, a.written)
}

// A PeekContent is recorded whether its bundle comes with a document or
// without one: the stream's messages that carry the bundle reach the
// audit's stream held for the answers' budget (answers.go), and must still
// be seen as the bundle sent.
func TestAPeekContentIsAuditedWithAndWithoutADocument(t *testing.T) {
	for name, origin := range map[string]domain.Origin{
		"a document of its domain":    domain.OriginTimeSeries,
		"a domain without a provider": domain.OriginCharges,
	} {
		t.Run(name, func(t *testing.T) {
			b := timeSeriesBundle(3)
			b.Origin = origin
			a := &lockedAuditor{}
			provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
				return contenttest.Document("application/xml", []byte("<doc/>"), 1024)
			})
			conn, _ := testConn(t, &recordingHub{bundle: b}, WithDocuments(provider.Documents(t), time.Minute),
				WithAudit(a, func(context.Context) string { return "the-actor" }))
			msgs, err := receiveAll(t, messagehubv1.NewMessageHubClient(conn), &messagehubv1.PeekRequest{Recipient: recipient})
			if err != nil || len(msgs) == 0 || msgs[0].GetBundle().GetId() != bundleID {
				t.Fatalf("PeekContent: %d messages, %v; want the bundle", len(msgs), err)
			}
			got := a.events()
			if len(got) != 1 || got[0].Action != audit.ActionPeekContent || got[0].BundleID != bundleID ||
				got[0].Recipient != recipient || got[0].Subject != "the-actor" {
				t.Fatalf("audit events %+v; want one PEEK_CONTENT of bundle %s by the-actor", got, bundleID)
			}
		})
	}
}

// The longest reason a remedy takes (500 characters of four bytes each)
// fills audit.MaxDetail by itself: an acknowledgement's event still says up
// to which notification of which cabinet it acknowledged, and the reason
// gives way.
func TestALongReasonKeepsWhatAnAcknowledgementDid(t *testing.T) {
	r, b, n := uuid.NewString(), uuid.NewString(), uuid.NewString()
	ct := strings.Repeat("c", domain.MaxContentTypeLength)
	reason := strings.Repeat("😀", 500)
	got := auditEvents(adminv1.Admin_AcknowledgeOnBehalf_FullMethodName,
		&adminv1.AcknowledgeOnBehalfRequest{Recipient: r, Domain: messagehubv1.Domain_DOMAIN_CHARGES, ContentType: ct,
			UpToNotificationId: n, Reason: reason},
		&adminv1.AcknowledgeOnBehalfResponse{BundleIds: []string{b}, Notifications: 1}, "the-subject", time.Now())
	if len(got) != 1 {
		t.Fatalf("%d events, want 1", len(got))
	}
	d := got[0].Detail
	if len(d) > audit.MaxDetail || !utf8.ValidString(d) {
		t.Fatalf("a detail of %d bytes (valid UTF-8: %v); want at most %d", len(d), utf8.ValidString(d), audit.MaxDetail)
	}
	if want := " (up to notification " + n + " of DOMAIN_CHARGES/" + ct + ")"; !strings.HasSuffix(d, want) {
		t.Fatalf("detail ends %q; want it to end with %q", d[max(len(d)-len(want), 0):], want)
	}
	if !strings.HasPrefix(d, "😀😀😀") {
		t.Fatalf("detail starts %q; want the reason's start", d[:min(len(d), 20)])
	}
}

// A PeekContent whose document breaks off after its first message has
// handed the actor the bundle (and the start of its document), which it can
// go on to Dequeue: it is recorded, though the call ends in an error.
func TestAPeekContentThatBrokeOffAfterSendingTheBundleIsAudited(t *testing.T) {
	docs, _ := brokenDownloads(t)
	a := &lockedAuditor{}
	conn, _ := testConn(t, &recordingHub{bundle: timeSeriesBundle(1)}, WithDocuments(docs, time.Minute),
		WithAudit(a, func(context.Context) string { return "the-actor" }))
	msgs, err := receiveAll(t, messagehubv1.NewMessageHubClient(conn), &messagehubv1.PeekRequest{Recipient: recipient})
	if err == nil || len(msgs) == 0 || msgs[0].GetBundle().GetId() != bundleID {
		t.Fatalf("PeekContent: %d messages, %v; want the bundle, then an error", len(msgs), err)
	}
	got := a.events()
	if len(got) != 1 || got[0].Action != audit.ActionPeekContent || got[0].BundleID != bundleID ||
		got[0].Recipient != recipient || got[0].Subject != "the-actor" {
		t.Fatalf("audit events %+v; want one PEEK_CONTENT of bundle %s by the-actor", got, bundleID)
	}
}
