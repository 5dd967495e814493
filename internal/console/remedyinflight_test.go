package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// A remedy the hub refuses after the operator left its confirmation (went
// to another page while the call was on its way) says so on the page the
// operator is on: the closed dialog is not where anyone reads it.
func TestARemedyRefusedAfterLeavingItsPageSaysSo(t *testing.T) {
	h := startHub(t)
	ctx, cancel := context.WithTimeout(t.Context(), browserDeadline)
	defer cancel()
	actor, other := uuid.NewString(), uuid.NewString()
	if _, err := h.client.Save(ctx, notification(actor, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries")); err != nil {
		t.Fatal(err)
	}
	pending, err := h.client.Peek(ctx, actor, messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES, "")
	if err != nil || pending == nil {
		t.Fatalf("peek: %v, %v", pending, err)
	}
	p := startProxy(t, h, func(r *http.Request) bool {
		return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, ":release")
	})
	b := startBrowser(ctx, t)
	page := p.url + "/console/#/actor/"
	b.do("open the other actor", chromedp.Navigate(page+other))
	b.waitText("#actor-recipient", other)
	b.do("open the actor", chromedp.Navigate(page+actor))
	b.waitText("#pending-bundles", pending.GetId())
	b.do("release its bundle", chromedp.Click(chromedp.CSS("#pending-bundles button.danger")),
		chromedp.WaitVisible(chromedp.CSS("#confirm[open]")),
		chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "the actor asked for it"),
		chromedp.WaitEnabled(chromedp.CSS("#confirm-ok")), chromedp.Click(chromedp.CSS("#confirm-ok")))
	goOn := p.hold(ctx, t)
	b.do("go back to the other actor", chromedp.NavigateBack())
	b.waitText("#actor-recipient", other)
	// Meanwhile someone else released the bundle: the hub refuses the
	// console's release.
	if _, err := h.admin.ReleaseBundle(ctx, &adminv1.ReleaseBundleRequest{
		Recipient: actor, BundleId: pending.GetId(), Reason: "released from another console",
	}); err != nil {
		t.Fatal(err)
	}
	close(goOn)
	b.do("wait for the refusal", chromedp.Poll[chromedp.Void](
		`!document.querySelector('#notice').hidden || !document.querySelector('#confirm-error').hidden`,
		chromedp.WithPollingTimeout(0)))
	notice, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](
		`document.querySelector('#notice').hidden ? '(no notice)' : document.querySelector('#notice').textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(notice, "ReleaseBundle failed (") {
		t.Errorf("the page says %q; want the hub's refusal of the release", notice)
	}
}
