package cosmos_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/hub"
)

// A recipient that saves and drains a bundle of 10 every sweep interval
// for six hours, under 7-day retention, is visited by every pass (it dequeued
// since the last) and by every pass once its bundles come due: each visit
// reads what is due or new, not the bundles it retains, so a pass costs the
// same on the first day and the last, and retention removes everything in
// the end. Printed: what a pass costs while bundles pile up and once they
// come due (run with -v).
func TestRetentionOfAnActiveRecipientCostsWhatIsDueOrNew(t *testing.T) {
	const retention, interval, rounds = 7 * 24 * time.Hour, 10 * time.Minute, 36
	clock := &costClock{now: time.Now()}
	e := newCostEnv(t, hub.Options{Now: clock.Now, Retention: retention, SweepInterval: time.Hour})
	ctx := context.Background()
	r := uuid.NewString()
	lastPass := clock.Now()
	pass := func() float64 {
		start := clock.Now()
		_, c := e.measure(t, func() {
			if err := e.repo.SweepSince(ctx, lastPass.Add(-time.Minute)); err != nil {
				t.Fatal(err)
			}
		})
		lastPass = start
		return c.RequestCharge
	}
	round := func() {
		if _, err := e.repo.Save(ctx, notifications(10, r, 1)); err != nil {
			t.Fatal(err)
		}
		if n := drainRecipient(t, e.repo, r); n != 1 {
			t.Fatalf("%d bundles, want 1", n)
		}
		clock.advance(interval)
	}
	var piling []float64
	var first string // the first round's drawer
	for i := range rounds {
		round()
		if i == 0 {
			first = onlyDrawer(t, e, r)
		}
		piling = append(piling, pass())
	}
	// Every round appended to the first round's drawer, which the drained
	// cabinet keeps while it is younger than the retention. The bundles of
	// the first rounds come due one per pass.
	if d := onlyDrawer(t, e, r); d != first {
		t.Fatalf("the rounds wrote to drawer %s, not to the first round's %s", d, first)
	}
	clock.advance(retention - rounds*interval)
	var due []float64
	for range rounds {
		round()
		due = append(due, pass())
	}
	// Older than the retention now: the pass after the last drain took the
	// cabinet out of the catalog (the drawer kept for the bundles that read
	// it), so the next Save starts another drawer.
	clock.advance(interval)
	round()
	pass()
	if d := onlyDrawer(t, e, r); d == first {
		t.Fatalf("a Save appended to drawer %s, older than the retention", first)
	}
	t.Logf("COST retention pass of a recipient draining 10 a pass: %.1f RU at the first pass, %.1f at the %dth (%d bundles retained); once they come due: %.1f and %.1f RU",
		piling[1], piling[rounds-1], rounds, rounds, due[1], due[rounds-1])
	if piling[rounds-1] > piling[1]+5 || due[rounds-1] > due[1]+5 {
		t.Fatalf("a pass costs %.1f RU with 1 bundle retained and %.1f with %d; %.1f and %.1f once due: it grows with what is retained",
			piling[1], piling[rounds-1], rounds, due[1], due[rounds-1])
	}
	// Past everyone's retention, a pass removes the rest.
	clock.advance(retention + time.Hour)
	if err := e.repo.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	if left, err := e.store.DequeuedBundles(ctx, r); err != nil || len(left) != 0 {
		t.Fatalf("%d bundles left (%v)", len(left), err)
	}
	state, err := e.store.LoadRecipient(ctx, r)
	if err != nil || len(state.Entries) != 0 {
		t.Fatalf("entries left: %+v (%v)", state.Entries, err)
	}
	if items, err := e.store.ReadDrawer(ctx, first, 0, 1<<40, 100); err != nil || len(items) != 0 {
		t.Fatalf("the first round's drawer holds %d items past its retention (%v)", len(items), err)
	}
}

// onlyDrawer is the id of the recipient's one drawer.
func onlyDrawer(t *testing.T, e *costEnv, r string) string {
	t.Helper()
	state, err := e.store.LoadRecipient(context.Background(), r)
	if err != nil || len(state.Entries) != 1 || len(state.Entries[0].Drawers) != 1 {
		t.Fatalf("state %+v, %v; want one entry of one drawer", state.Entries, err)
	}
	return state.Entries[0].Drawers[0].ID
}
