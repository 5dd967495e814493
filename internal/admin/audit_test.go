package admin_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	"github.com/energydatahub/messagehub/internal/audit"
)

// ListAuditEvents pages through one recipient's events of a time range,
// oldest first, with the fields as recorded.
func TestListAuditEventsPagesThroughATimeRange(t *testing.T) {
	client, h := serve(t)
	r, operator := uuid.NewString(), uuid.NewString()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var events []audit.Event
	for i := range 7 {
		at := base.Add(time.Duration(i) * time.Minute)
		events = append(events, audit.Event{Key: audit.NewKey(at), At: at, Action: audit.ActionReleaseBundle,
			Subject: operator, Recipient: r, BundleID: uuid.NewString(), Detail: "reason"})
	}
	if err := h.AppendAudit(ctxT(t), events); err != nil {
		t.Fatal(err)
	}
	req := &adminv1.ListAuditEventsRequest{Recipient: r, FromMs: base.Add(time.Minute).UnixMilli(), ToMs: base.Add(6 * time.Minute).UnixMilli(), PageSize: 2}
	var got []*adminv1.AuditEvent
	pages := 0
	for {
		resp, err := client.ListAuditEvents(ctxT(t), req)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		got = append(got, resp.GetEvents()...)
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	if pages != 3 || len(got) != 5 {
		t.Fatalf("%d events in %d pages; want the 5 of [1 min, 6 min) in 3", len(got), pages)
	}
	for i, e := range got {
		w := events[i+1]
		if e.GetAtMs() != w.At.UnixMilli() || e.GetAction() != adminv1.AuditAction_AUDIT_ACTION_RELEASE_BUNDLE ||
			e.GetSubject() != operator || e.GetRecipient() != r || e.GetBundleId() != w.BundleID || e.GetDetail() != "reason" {
			t.Fatalf("event %d: %v; want %+v", i, e, w)
		}
	}
}

// A request the log cannot answer as asked is INVALID_ARGUMENT.
func TestListAuditEventsRefusesBadRequests(t *testing.T) {
	client, _ := serve(t)
	r := uuid.NewString()
	for name, req := range map[string]*adminv1.ListAuditEventsRequest{
		"no recipient":           {},
		"a recipient not a UUID": {Recipient: "actor-1"},
		"a negative time":        {Recipient: r, FromMs: -1},
		"to before from":         {Recipient: r, FromMs: 2000, ToMs: 1000},
		"a negative page size":   {Recipient: r, PageSize: -1},
		"a page too large":       {Recipient: r, PageSize: 1001},
		"a made-up page token":   {Recipient: r, PageToken: "next"},
		// Tokens of a key's length and form that no key has: a time with a
		// sign sorts before every key (the first page again), a tail in
		// upper case between a millisecond's keys.
		"a page token whose time has a sign":       {Recipient: r, PageToken: "+764158000000-0123456789abcdef"},
		"a page token whose tail is in upper case": {Recipient: r, PageToken: "1764158000000-0123456789ABCDEF"},
	} {
		if _, err := client.ListAuditEvents(ctxT(t), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v; want INVALID_ARGUMENT", name, err)
		}
	}
}

// Times are any non-negative unix milliseconds: one past the keys' 13
// digits (from the year 2286) still bounds the range as a time does, so a
// far end holds today's events and a far start none of them.
func TestListAuditEventsTakesTimesPastTheKeysDigits(t *testing.T) {
	client, h := serve(t)
	r := uuid.NewString()
	at := time.Now().Truncate(time.Millisecond)
	if err := h.AppendAudit(ctxT(t), []audit.Event{{Key: audit.NewKey(at), At: at, Action: audit.ActionReleaseBundle,
		Subject: uuid.NewString(), Recipient: r, BundleID: uuid.NewString(), Detail: "reason"}}); err != nil {
		t.Fatal(err)
	}
	const far = 10_000_000_000_000 // 2286-11-20, the first time of 14 digits
	for name, tc := range map[string]struct {
		req  *adminv1.ListAuditEventsRequest
		want int
	}{
		"to far ahead":   {&adminv1.ListAuditEventsRequest{Recipient: r, ToMs: far}, 1},
		"from far ahead": {&adminv1.ListAuditEventsRequest{Recipient: r, FromMs: far}, 0},
		"both far ahead": {&adminv1.ListAuditEventsRequest{Recipient: r, FromMs: far, ToMs: 2 * far}, 0},
		"to at the end":  {&adminv1.ListAuditEventsRequest{Recipient: r, ToMs: 1<<63 - 1}, 1},
	} {
		resp, err := client.ListAuditEvents(ctxT(t), tc.req)
		if err != nil || len(resp.GetEvents()) != tc.want {
			t.Errorf("%s: %d events, %v; want %d", name, len(resp.GetEvents()), err, tc.want)
		}
	}
}
