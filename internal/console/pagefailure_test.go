package console_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
)

// A page of a list the hub refuses shows the refusal with the buttons to
// go back to the page before or try again: the list stays usable.
func TestARefusedPageKeepsTheListUsable(t *testing.T) {
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
	// While spoil is set, the page token the console sends is one the hub
	// never made, which it refuses.
	var spoil atomic.Bool
	p := startProxy(t, h, func(r *http.Request) bool {
		if q := r.URL.Query(); spoil.Load() && q.Get("page_token") != "" {
			q.Set("page_token", "not-a-page-token")
			r.URL.RawQuery = q.Encode()
		}
		return false
	})
	b := startBrowser(ctx, t)
	b.do("load the actor's page", chromedp.Navigate(p.url+"/console/#/actor/"+actor))
	b.waitText("#audit-table", "inspect")
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
