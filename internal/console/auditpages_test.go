package console_test

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
)

// The audit log's next page goes on in the time range of the page shown:
// an edit of the range not yet asked for with Show does not change what
// the page token continues, which would skip the events between.
func TestTheAuditLogPagesTheRangeShown(t *testing.T) {
	h := startHub(t)
	ctx, cancel := context.WithTimeout(t.Context(), browserDeadline)
	defer cancel()
	actor := uuid.NewString()
	// More inspections than a page (100) holds.
	const inspections = 120
	for range inspections {
		if _, err := h.admin.GetBacklog(ctx, &adminv1.GetBacklogRequest{Recipient: actor}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(ctx, t, "the audit log holds the inspections", func() (bool, error) {
		resp, err := h.admin.ListAuditEvents(ctx, &adminv1.ListAuditEventsRequest{Recipient: actor, PageSize: 1000})
		return len(resp.GetEvents()) >= inspections, err
	})

	b := startBrowser(ctx, t)
	b.do("load the actor's page", chromedp.Navigate("http://"+h.app.HTTPAddr()+"/console/#/actor/"+actor))
	b.waitText("#audit-table", "inspect")
	// The operator starts editing the range, then pages on instead.
	b.do("edit the range without showing it", chromedp.SetValue(chromedp.CSS("#audit-from"), "2099-01-01T00:00"),
		chromedp.Click(chromedp.CSS("#audit p.toolbar button:nth-of-type(2)")))
	b.waitText("#audit", "Previous page")
	b.do("wait for the second page", chromedp.Poll[chromedp.Void](
		`!document.querySelector('#audit p.toolbar button:nth-of-type(1)')?.disabled`, chromedp.WithPollingTimeout(0)))
	if got := b.text("#audit"); strings.Contains(got, "No event in this time range.") || !strings.Contains(got, "inspect") {
		t.Fatalf("the second page of the range shown: %q; want the inspections after the first page", got)
	}
}
