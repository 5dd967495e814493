package console_test

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// A remedy's confirmation belongs to the page it was asked from: when the
// operator goes to another actor's page (Back, a link, the header's
// field) with the dialog open, the dialog closes, rather than staying over
// the other actor's name, ready to act on the first one.
func TestLeavingThePageClosesTheRemedy(t *testing.T) {
	h := startHub(t)
	ctx, cancel := context.WithTimeout(t.Context(), browserDeadline)
	defer cancel()
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
