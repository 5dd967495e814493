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
	"github.com/energydatahub/messagehub/internal/store/cosmos"
)

// idleRecipients makes n recipients that each retain ten dequeued bundles
// of one notification and have one notification waiting.
func idleRecipients(t *testing.T, e *costEnv, n int) {
	t.Helper()
	ctx := context.Background()
	for range n {
		r := uuid.NewString()
		for range 10 {
			dequeueOne(t, e, r)
		}
		if _, err := e.repo.Save(ctx, notifications(1, r, 1)); err != nil {
			t.Fatal(err)
		}
	}
}

// dequeueOne saves one notification for the recipient and dequeues it.
func dequeueOne(t *testing.T, e *costEnv, r string) {
	t.Helper()
	ctx := context.Background()
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

// The background work's cost, printed (the test server's charges; run with
// -v): the backlog figures' full recount at two sizes, extrapolated
// linearly to 100,000 recipients (cost(N) = a + b·N from the two
// measurements); an update when nothing changed and when one recipient
// did; a gauge's read of the totals; a retention pass with nothing due;
// and a visit of an idle recipient whose ten bundles all came due. It
// fails only when a part that must not grow with the recipients does.
func TestBackgroundCostOfIdleRecipients(t *testing.T) {
	clock := &costClock{now: time.Now()}
	const retention = 7 * 24 * time.Hour
	e := newCostEnv(t, hub.Options{Now: clock.Now, Retention: retention, SweepInterval: time.Hour})
	ctx := context.Background()
	keeper := figures.New(e.store, figures.Options{Now: clock.Now})
	charge := func(op func() error) float64 {
		_, total := e.measure(t, func() {
			if err := op(); err != nil {
				t.Fatal(err)
			}
		})
		return total.RequestCharge
	}
	scan := func() float64 {
		return charge(func() error {
			_, err := e.store.ScanBacklog(ctx, func(store.RecipientRecords) error { return nil })
			return err
		})
	}
	// takeover is the recount of a holder that takes the lease over, which
	// reads every recipient's head too; recount the daily one, whose holder
	// knows the heads from the recount before and the changes since.
	takeover := func() float64 {
		cosmos.ForgetHeads(e.store)
		return scan()
	}
	recount := func() float64 {
		takeover()
		return scan()
	}
	turn := func() float64 {
		clock.advance(figures.DefaultEvery)
		return charge(func() error {
			done, err := keeper.Turn(ctx)
			if err == nil && !done {
				t.Fatal("a turn a minute on did not update the figures")
			}
			return err
		})
	}
	// quietTurn is an update when nothing changed since the last: a recount
	// first, then one turn to read the changes the recount itself made.
	quietTurn := func() float64 {
		if err := keeper.Recount(ctx); err != nil {
			t.Fatal(err)
		}
		turn()
		return turn()
	}
	const n1, n2 = 10, 30
	idleRecipients(t, e, n1)
	c1, t1 := recount(), takeover()
	quiet1 := quietTurn()
	idleRecipients(t, e, n2-n1)
	c2, t2 := recount(), takeover()
	b := (c2 - c1) / (n2 - n1)
	a := c1 - b*n1
	bt := (t2 - t1) / (n2 - n1)
	at := t1 - bt*n1
	quiet := quietTurn()
	if _, err := e.repo.Save(ctx, notifications(1, uuid.NewString(), 1)); err != nil {
		t.Fatal(err)
	}
	one := turn()

	gauge := charge(func() error { _, err := e.store.ReadFigures(ctx, store.FigureTotals); return err })
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
	retained := retainedCost(t)

	const recipients, gaugeInterval = 100000.0, 15.0
	budget, every, full := figures.DefaultBudget, figures.DefaultEvery.Seconds(), figures.DefaultFullEvery.Seconds()
	big := a + b*recipients
	fullPause := max(full, big/budget)
	turnPause := max(every, quiet/budget)
	perInstance := (3600/gaugeInterval + 3600/every) * gauge // the gauges' reads and the keeper's look at the totals
	t.Logf("full recount: %.1f RU at %d recipients, %.1f at %d: cost(N) = %.1f + %.2f·N RU; at %.0f: %.0f RU once every %.0f s (%.2f RU/s)",
		c1, n1, c2, n2, a, b, recipients, big, fullPause, big/fullPause)
	t.Logf("recount on taking the lease over (the heads too): %.1f RU at %d recipients, %.1f at %d: cost(N) = %.1f + %.2f·N RU; at %.0f: %.0f RU",
		t1, n1, t2, n2, at, bt, recipients, at+bt*recipients)
	t.Logf("update with nothing changed: %.1f RU at %d recipients, %.1f at %d, every %.0f s: %.2f RU/s; with one recipient changed: %.1f RU",
		quiet1, n1, quiet, n2, turnPause, quiet/turnPause, one)
	t.Logf("each instance reads the totals %.0f times an hour at %.2f RU: %.3f RU/s", 3600/gaugeInterval+3600/every, gauge, perInstance/3600)
	for _, instances := range []float64{1, 10, 100} {
		t.Logf("figures of an idle cluster of %.0f instances, %.0f recipients: %.2f RU/s", instances, recipients,
			big/fullPause+quiet/turnPause+instances*perInstance/3600)
	}
	t.Logf("retention pass with nothing due: %d requests, %.1f RU, whatever the recipients (%d here)", pass.Requests, pass.RequestCharge, n2)
	t.Logf("retention of ten bundles dequeued an hour apart, over the retention: %.1f RU (ten visits)", retained)
	for _, size := range []float64{n2, recipients} {
		share := b * 3600 / max(full, (a+b*size)/budget)
		t.Logf("an idle recipient with ten retained bundles among %.0f: %.2f RU/h (%.3f for its share of the daily recount, %.2f for the ten visits that remove its bundles)",
			size, share+retained/retention.Hours(), share, retained/retention.Hours())
	}
	// A daily recount reads no head: the holder settles a save that died
	// in flight from what it knows of the heads.
	if bt-b < 0.5 {
		t.Fatalf("a daily recount costs %.2f RU per recipient, one on taking the lease over %.2f: it reads the heads", b, bt)
	}
	if pass.Requests > 2 {
		t.Fatalf("a retention pass with nothing due made %d requests", pass.Requests)
	}
	// A quiet turn's charge moves by a few RU with what the hub's last
	// writes (a head's finalize, a bell) left in the change feed when it
	// ran; one that reads every recipient grows by b per recipient, as a
	// recount does.
	if quiet-quiet1 > b*(n2-n1)/2 {
		t.Fatalf("an update with nothing changed cost %.1f RU at %d idle recipients, %.1f at %d: it grows with them", quiet, n2, quiet1, n1)
	}
}

// retainedCost is what retention costs one recipient that dequeued ten
// bundles an hour apart, over their retention: the passes that visit it
// (each bundle's own, when it comes due; SweepNow is such a pass when the
// recipient is the only one retaining bundles).
func retainedCost(t *testing.T) float64 {
	clock := &costClock{now: time.Now()}
	const retention = 7 * 24 * time.Hour
	e := newCostEnv(t, hub.Options{Now: clock.Now, Retention: retention, SweepInterval: time.Hour})
	ctx := context.Background()
	r := uuid.NewString()
	for range 10 {
		dequeueOne(t, e, r)
		clock.advance(time.Hour)
	}
	if _, err := e.repo.Save(ctx, notifications(1, r, 1)); err != nil {
		t.Fatal(err)
	}
	clock.advance(retention - 10*time.Hour)
	var total float64
	for range 10 {
		clock.advance(time.Hour)
		_, c := e.measure(t, func() {
			if err := e.repo.SweepNow(ctx); err != nil {
				t.Fatal(err)
			}
		})
		total += c.RequestCharge
	}
	return total
}
