package console_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// A remedy's confirmation belongs to the page it was asked from: when the
// operator goes to another actor's page (Back, a link, the header's
// field) with the dialog open, the dialog closes, rather than staying over
// the other actor's name, ready to act on the first one.
func TestLeavingThePageClosesTheRemedy(t *testing.T) {
	h := startHub(t)
	ctx := browserContext(t)
	b := startBrowser(ctx, t)
	first, second := uuid.NewString(), uuid.NewString()
	if _, err := h.client.Save(ctx, notification(first, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries")); err != nil {
		t.Fatal(err)
	}
	page := "http://" + h.app.HTTPAddr() + "/console/#/actor/"
	b.do("open the second actor", chromedp.Navigate(page+second))
	b.waitText("#actor-recipient", second)
	b.do("open the first actor", chromedp.Navigate(page+first))
	b.waitText("#cabinets", "TimeSeries")
	b.do("ask to acknowledge its cabinet", chromedp.Click(chromedp.CSS("#cabinets button.danger")),
		chromedp.WaitVisible(chromedp.CSS("#confirm[open]")))
	b.do("go back to the second actor", chromedp.NavigateBack())
	b.waitText("#actor-recipient", second)
	open, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.querySelector('#confirm').open`))
	if err != nil {
		t.Fatal(err)
	}
	if open {
		t.Errorf("on the second actor's page, the confirmation to acknowledge the first actor's cabinet is still open")
	}
}

// A remedy the hub refuses after the operator left its confirmation (went
// to another page while the call was on its way) says so on the page the
// operator is on: the closed dialog is not where anyone reads it.
func TestARemedyRefusedAfterLeavingItsPageSaysSo(t *testing.T) {
	h := startHub(t)
	ctx := browserContext(t)
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
	p.hold(ctx, t)
	b.do("go back to the other actor", chromedp.NavigateBack())
	b.waitText("#actor-recipient", other)
	// Meanwhile someone else released the bundle: the hub refuses the
	// console's release.
	if _, err := h.admin.ReleaseBundle(ctx, &adminv1.ReleaseBundleRequest{
		Recipient: actor, BundleId: pending.GetId(), Reason: "released from another console",
	}); err != nil {
		t.Fatal(err)
	}
	p.release()
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

// While a part of the page waits for the hub, it says so: the next bundle
// of the peek group chosen before is not left on show under the group
// chosen since.
func TestAPartWaitingForTheHubShowsNothingStale(t *testing.T) {
	h := startHub(t)
	ctx := browserContext(t)
	actor := uuid.NewString()
	if _, err := h.client.Save(ctx, notification(actor, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries")); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, h, func(r *http.Request) bool {
		return r.URL.Query().Get("group") == "PEEK_GROUP_MASTER_DATA"
	})
	b := startBrowser(ctx, t)
	b.do("open the actor", chromedp.Navigate(p.url+"/console/#/actor/"+actor))
	b.waitText("#preview-result", "the next Peek would cut this one now")
	b.choose("#preview-group", "PEEK_GROUP_MASTER_DATA")
	p.hold(ctx, t)
	shown, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector('#preview').textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if shown != "Loading…" {
		t.Errorf("while the master data preview is on its way, the preview shows %q; want Loading…", shown)
	}
	p.release()
	b.waitText("#preview-result", "The next Peek of this group would find nothing.")
}

// A remedy's reason is bounded at 500 characters, counted as the hub
// counts them (code points): a reason of 300 characters outside the Basic
// Multilingual Plane (two UTF-16 units each) can be given, and the hub
// takes it.
func TestAReasonIsCountedInCharacters(t *testing.T) {
	h := startHub(t)
	ctx := browserContext(t)
	actor := uuid.NewString()
	n := notification(actor, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries")
	if _, err := h.client.Save(ctx, n); err != nil {
		t.Fatal(err)
	}
	b := startBrowser(ctx, t)
	b.do("open the actor", chromedp.Navigate("http://"+h.app.HTTPAddr()+"/console/#/actor/"+actor))
	b.waitText("#cabinets", "TimeSeries")
	b.do("ask to acknowledge its cabinet", chromedp.Click(chromedp.CSS("#cabinets button.danger")),
		chromedp.WaitVisible(chromedp.CSS("#confirm[open]")))
	reason := strings.Repeat("𝔘", 300)
	enabled, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => {
		document.querySelector('#confirm-up-to').value = %q;
		const reason = document.querySelector('#confirm-reason');
		reason.value = %q;
		reason.dispatchEvent(new Event('input'));
		return reason.value.length === 600 && reason.value.length <= reason.maxLength && !document.querySelector('#confirm-ok').disabled;
	})()`, n.GetId(), reason)))
	if err != nil {
		t.Fatal(err)
	}
	if !enabled {
		t.Fatal("a reason of 300 characters (600 UTF-16 units) cannot be given")
	}
	b.do("acknowledge", chromedp.Click(chromedp.CSS("#confirm-ok")))
	b.waitText("#notice", "Acknowledged 1 notification")
}

// acknowledgementUnderWay opens an actor's page, after another actor's
// (for Back), and confirms acknowledging its cabinet through a proxy that
// holds the call: it returns when the hub has not answered yet, with the
// browser, the proxy (release lets the call go on), the actor and the
// other actor.
func acknowledgementUnderWay(t *testing.T) (b *browser, p *proxy, actor, other string) {
	t.Helper()
	h := startHub(t)
	ctx := browserContext(t)
	actor, other = uuid.NewString(), uuid.NewString()
	n := notification(actor, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries")
	if _, err := h.client.Save(ctx, n); err != nil {
		t.Fatal(err)
	}
	p = startProxy(t, h, func(r *http.Request) bool {
		return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, ":acknowledge")
	})
	b = startBrowser(ctx, t)
	page := p.url + "/console/#/actor/"
	b.do("open the other actor", chromedp.Navigate(page+other))
	b.waitText("#actor-recipient", other)
	b.do("open the actor", chromedp.Navigate(page+actor))
	b.waitText("#cabinets", "TimeSeries")
	b.do("acknowledge its cabinet", chromedp.Click(chromedp.CSS("#cabinets button.danger")),
		chromedp.WaitVisible(chromedp.CSS("#confirm[open]")),
		chromedp.SendKeys(chromedp.CSS("#confirm-up-to"), n.GetId()),
		chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "the actor asked for it"),
		chromedp.WaitEnabled(chromedp.CSS("#confirm-ok")), chromedp.Click(chromedp.CSS("#confirm-ok")))
	p.hold(ctx, t)
	return b, p, actor, other
}

// An acknowledgement that ends after the operator went to another actor's
// page (its calls go on against the actor it was confirmed for) says so
// on the page the operator is on, naming that actor: "Acknowledged 1
// notification ... on the actor's behalf" alone, above the other actor's
// page, reads as done to the other actor.
func TestARemedyEndingAfterLeavingItsPageNamesItsActor(t *testing.T) {
	b, p, actor, other := acknowledgementUnderWay(t)
	b.do("go back to the other actor", chromedp.NavigateBack())
	b.waitText("#actor-recipient", other)
	p.release()
	b.waitText("#notice", "Acknowledged 1 notification")
	if notice := b.text("#notice"); !strings.Contains(notice, actor) {
		t.Errorf("on the other actor's page, the notice says %q; want it to name the actor acknowledged for, %s", notice, actor)
	}
}

// While a remedy's calls are on their way (an acknowledgement repeats its
// call while the hub says more remain), its button stays disabled, even
// when the operator edits the reason: a second press would run the remedy
// a second time alongside the first.
func TestARemedyUnderWayCannotBeConfirmedAgain(t *testing.T) {
	b, p, _, _ := acknowledgementUnderWay(t)
	b.do("edit the reason", chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "."))
	disabled, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.querySelector('#confirm-ok').disabled`))
	if err != nil {
		t.Fatal(err)
	}
	if !disabled {
		t.Errorf("while the acknowledgement is on its way, editing the reason enables its button again")
	}
	p.release()
	b.waitText("#notice", "Acknowledged 1 notification")
}

// An acknowledgement that ends after the operator went to another page
// leaves that page as the operator set it: the refresh it makes of its own
// actor's page is not made of the other page (which would go back to its
// first peek group, audit range and page).
func TestARemedyEndingAfterLeavingItsPageLeavesTheOtherPageAlone(t *testing.T) {
	b, p, _, other := acknowledgementUnderWay(t)
	b.do("go back to the other actor", chromedp.NavigateBack())
	b.waitText("#actor-recipient", other)
	b.waitText("#preview-result", "The next Peek of this group would find nothing.")
	b.choose("#preview-group", "PEEK_GROUP_MASTER_DATA")
	p.release()
	b.waitText("#notice", "Acknowledged 1 notification")
	group, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.querySelector('#preview-group').value`))
	if err != nil {
		t.Fatal(err)
	}
	if group != "PEEK_GROUP_MASTER_DATA" {
		t.Errorf("after the acknowledgement of the first actor ended, the other actor's page shows peek group %q; want the one chosen, master data", group)
	}
}
