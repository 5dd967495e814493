package console_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
)

// The audit log's next page goes on in the time range of the page shown:
// an edit of the range not yet asked for with Show does not change what
// the page token continues, which would skip the events between.
func TestTheAuditLogPagesTheRangeShown(t *testing.T) {
	b := inspectedAuditLog(t, hubAddress)
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

// inspected is a new actor with more inspections in the audit log than a
// page of it (100) holds, once they are written.
func (h *hub) inspected(ctx context.Context, t *testing.T) string {
	t.Helper()
	actor := uuid.NewString()
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
	return actor
}

// browserContext bounds a browser test by browserDeadline.
func browserContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), browserDeadline)
	t.Cleanup(cancel)
	return ctx
}

// inspectedAuditLog is a browser on the page of an actor with more
// inspections than a page of its audit log holds, loaded from the address
// base gives for a new hub (its own, or a proxy's).
func inspectedAuditLog(t *testing.T, base func(*hub) string) *browser {
	t.Helper()
	h := startHub(t)
	ctx := browserContext(t)
	actor := h.inspected(ctx, t)
	b := startBrowser(ctx, t)
	b.do("load the actor's page", chromedp.Navigate(base(h)+"/console/#/actor/"+actor))
	b.waitText("#audit-table", "inspect")
	return b
}

// hubAddress is the base address of the hub's own HTTP port.
func hubAddress(h *hub) string { return "http://" + h.app.HTTPAddr() }

// A second click on Next page before the next page is shown asks for that
// same page again, not for one further: Previous page then goes back to
// the first page.
func TestADoubleClickOnNextPageGoesOnePage(t *testing.T) {
	b := inspectedAuditLog(t, hubAddress)
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

// A page of a list the hub refuses shows the refusal with the buttons to
// go back to the page before or try again: the list stays usable.
func TestARefusedPageKeepsTheListUsable(t *testing.T) {
	// While spoil is set, the page token the console sends is one the hub
	// never made, which it refuses.
	var spoil atomic.Bool
	b := inspectedAuditLog(t, func(h *hub) string {
		return startProxy(t, h, func(r *http.Request) bool {
			if q := r.URL.Query(); spoil.Load() && q.Get("page_token") != "" {
				q.Set("page_token", "not-a-page-token")
				r.URL.RawQuery = q.Encode()
			}
			return false
		}).url
	})
	spoil.Store(true)
	b.do("ask for the next page", chromedp.Click(chromedp.CSS("#audit p.toolbar button:nth-of-type(2)")),
		chromedp.WaitVisible(chromedp.CSS("#audit .error")))
	buttons, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('#audit button:enabled')].map((b) => b.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the refused page: %s; buttons %q", b.text("#audit .error"), buttons)
	if len(buttons) != 2 || buttons[0] != "Previous page" || buttons[1] != "Try again" {
		t.Fatalf("the refused page offers the buttons %q; want Previous page and Try again", buttons)
	}
	spoil.Store(false)
	b.do("try again", chromedp.Click(chromedp.CSS("#audit p.toolbar button:nth-of-type(2)")))
	b.do("wait for the second page", chromedp.Poll[chromedp.Void](
		`!!document.querySelector('#audit-table') && !document.querySelector('#audit p.toolbar button:nth-of-type(1)').disabled`,
		chromedp.WithPollingTimeout(0)))
	b.do("go back", chromedp.Click(chromedp.CSS("#audit p.toolbar button:nth-of-type(1)")),
		chromedp.Poll[chromedp.Void](`!!document.querySelector('#audit-table') && document.querySelector('#audit p.toolbar button:nth-of-type(1)').disabled`,
			chromedp.WithPollingTimeout(0)))
}
