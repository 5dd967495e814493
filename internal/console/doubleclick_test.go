package console_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
)

// A second click on Next page before the next page is shown asks for that
// same page again, not for one further: Previous page then goes back to
// the first page.
func TestADoubleClickOnNextPageGoesOnePage(t *testing.T) {
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
	// clickAndWait clicks the button of the audit log's toolbar (1:
	// Previous, 2: Next) clicks times, waits until the audit log is drawn
	// anew, and says whether its Previous page button is enabled.
	clickAndWait := func(button, clicks int) bool {
		t.Helper()
		b.do("click", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
			window.shownAudit = document.querySelector('#audit-table');
			const button = document.querySelector('#audit p.toolbar button:nth-of-type(%d)');
			for (let i = 0; i < %d; i++) {
				button.click();
			}
		})()`, button, clicks)))
		b.do("wait for the audit log drawn anew", chromedp.Poll[chromedp.Void](
			`(() => { const t = document.querySelector('#audit-table'); return t && t !== window.shownAudit; })()`,
			chromedp.WithPollingTimeout(0)))
		disabled, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.querySelector('#audit p.toolbar button:nth-of-type(1)').disabled`))
		if err != nil {
			t.Fatal(err)
		}
		return !disabled
	}
	if !clickAndWait(2, 2) {
		t.Fatal("after Next page, the audit log offers no Previous page")
	}
	if clickAndWait(1, 1) {
		t.Error("after a double click on Next page and one on Previous page, the audit log is not on its first page")
	}
}
