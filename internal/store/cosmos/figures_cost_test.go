package cosmos_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/figures"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
)

// idleRecipients makes n recipients that each retain ten dequeued bundles
// of one notification and have one notification waiting.
func idleRecipients(t *testing.T, e *costEnv, n int) {
	t.Helper()
	ctx := context.Background()
	for range n {
		r := uuid.NewString()
		for range 10 {
			if _, err := e.repo.Save(ctx, notifications(1, r, 1)); err != nil {
				t.Fatal(err)
			}
			b, err := e.repo.Peek(ctx, r, domain.GroupAll, "")
			if err != nil || b == nil {
				t.Fatalf("peek: %v %v", b, err)
			}
			if err := e.repo.Dequeue(ctx, r, b.ID); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.repo.Save(ctx, notifications(1, r, 1)); err != nil {
			t.Fatal(err)
		}
	}
}

// The background work's cost, printed (the test server's charges; run with
// -v): the backlog figures' recount at two sizes, extrapolated linearly to
// 100,000 recipients (cost(N) = a + b·N from the two measurements), a
// gauge's read of the totals, a retention pass with nothing due, and a
// visit of an idle recipient whose ten bundles all came due. It fails only
// when a part that must not grow with the recipients does.
func TestBackgroundCostOfIdleRecipients(t *testing.T) {
	clock := &costClock{now: time.Now()}
	const retention = 7 * 24 * time.Hour
	e := newCostEnv(t, hub.Options{Now: clock.Now, Retention: retention, SweepInterval: time.Hour})
	ctx := context.Background()
	keeper := figures.New(e.store, figures.Options{Now: clock.Now})
	recount := func() float64 {
		_, total := e.measure(t, func() {
			if err := keeper.Recount(ctx); err != nil {
				t.Fatal(err)
			}
		})
		return total.RequestCharge
	}
	const n1, n2 = 10, 30
	idleRecipients(t, e, n1)
	c1 := recount()
	idleRecipients(t, e, n2-n1)
	c2 := recount()
	b := (c2 - c1) / (n2 - n1)
	a := c1 - b*n1

	_, gauge := e.measure(t, func() {
		if _, err := e.store.ReadFigures(ctx, store.FigureTotals); err != nil {
			t.Fatal(err)
		}
	})
	clock.advance(time.Hour) // every bundle dequeued over an hour ago
	now := clock.Now()
	_, pass := e.measure(t, func() {
		if err := e.store.DueRecipients(ctx, now.Add(-retention), now.Add(-10*time.Minute), func(r string) error {
			t.Fatalf("recipient %s is due or dequeued lately", r)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	clock.advance(retention)
	_, visits := e.measure(t, func() {
		if err := e.repo.SweepNow(ctx); err != nil {
			t.Fatal(err)
		}
	})
	visit := visits.RequestCharge / n2

	const recipients, every, budget, gaugeInterval = 100000.0, 300.0, figures.DefaultBudget, 15.0
	big := a + b*recipients
	pause := max(every, big/budget)                                                // seconds between recounts (Keeper.NextAfter)
	perInstance := 3600/gaugeInterval*gauge.RequestCharge + 60*gauge.RequestCharge // the gauges' reads and the keeper's check
	t.Logf("recount: %.1f RU at %d recipients, %.1f at %d: cost(N) = %.1f + %.2f·N RU", c1, n1, c2, n2, a, b)
	t.Logf("at %.0f recipients: a recount costs %.0f RU, runs every %.0f s: %.1f RU/s for the cluster; each instance adds %.2f RU/s of reads (%.2f RU per read of the totals)",
		recipients, big, pause, big/pause, perInstance/3600, gauge.RequestCharge)
	t.Logf("retention pass with nothing due: %d requests, %.1f RU, whatever the recipients (%d here)", pass.Requests, pass.RequestCharge, n2)
	t.Logf("a visit of a recipient whose ten retained bundles all came due: %.1f RU", visit)
	for _, size := range []float64{n2, recipients} {
		recounts := 3600 / max(every, (a+b*size)/budget)
		t.Logf("an idle recipient with ten retained bundles among %.0f: %.2f RU/h (%.2f for its share of %.1f recounts, %.2f for at most ten visits over the retention)",
			size, b*recounts+10*visit/retention.Hours(), b*recounts, recounts, 10*visit/retention.Hours())
	}
	if pass.Requests > 2 {
		t.Fatalf("a retention pass with nothing due made %d requests", pass.Requests)
	}
}
