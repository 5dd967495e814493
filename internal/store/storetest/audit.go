package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/audit"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
)

// RunAudit checks the audit log's part of a Store (store.AuditLog): each
// recipient's events in key order, time ranges, paging, writes that are
// repeated, and retention.
func RunAudit(t *testing.T, newStore Factory) {
	run := func(name string, test func(*testing.T, store.Store)) {
		t.Run(name, func(t *testing.T) { test(t, open(t, newStore)) })
	}
	run("EventsComeBackPerRecipientInKeyOrder", auditOrder)
	run("AQueryHoldsItsTimeRangeOnly", auditTimeRange)
	run("PagesFollowEachOtherToTheEnd", auditPaging)
	run("EventsOfOverlappingWritesComeBackMerged", auditOverlappingWrites)
	run("AnEventWrittenAgainIsStoredOnce", auditWrittenTwice)
	run("ManyLargeEventsOfOneRecipientInOneWrite", auditLargeWrite)
	run("PruneRemovesWhatIsOlder", auditPrune)
	run("TheSweepRemovesEventsOlderThanTheRetention", auditSwept)
}

// auditBase is a time the tests' events are near: recent, so that a store
// that expires events by itself keeps them.
func auditBase() time.Time { return time.Now().Add(-time.Hour).Truncate(time.Millisecond) }

func auditEvent(recipient string, at time.Time, i int) audit.Event {
	return audit.Event{
		Key: audit.NewKey(at), At: at, Action: audit.Action(1 + i%6), Subject: newRecipient(), Recipient: recipient,
		BundleID: newRecipient(), Detail: fmt.Sprintf("event %d", i),
	}
}

// auditSeries is n events of the recipient, step apart from base.
func auditSeries(recipient string, base time.Time, n int, step time.Duration) []audit.Event {
	events := make([]audit.Event, n)
	for i := range events {
		events[i] = auditEvent(recipient, base.Add(time.Duration(i)*step), i)
	}
	return events
}

func appendAudit(t *testing.T, s store.Store, events []audit.Event) {
	t.Helper()
	// Stores are handed a recipient's events side by side (audit.Log).
	sorted := slices.Clone(events)
	slices.SortStableFunc(sorted, func(a, b audit.Event) int { return strings.Compare(a.Recipient, b.Recipient) })
	if err := s.AppendAudit(ctx(t), sorted); err != nil {
		t.Fatalf("append %d audit events: %v", len(events), err)
	}
}

// readAll pages through the query with pages of limit and returns every
// event, checking that each page but the last is full.
func readAll(t *testing.T, s store.Store, q audit.Query) []audit.Event {
	t.Helper()
	var all []audit.Event
	for range 1000 {
		page, err := s.AuditEvents(ctx(t), q)
		if err != nil {
			t.Fatalf("audit events %+v: %v", q, err)
		}
		all = append(all, page.Events...)
		if page.Next == "" {
			return all
		}
		if len(page.Events) != q.Limit {
			t.Fatalf("a page of %d events (limit %d) with more to come", len(page.Events), q.Limit)
		}
		q.After = page.Next
	}
	t.Fatal("paging did not end")
	return nil
}

func wantEvents(t *testing.T, got, want []audit.Event) {
	t.Helper()
	want = slices.Clone(want)
	slices.SortFunc(want, func(a, b audit.Event) int { return strings.Compare(a.Key, b.Key) })
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d:\ngot  %v\nwant %v", len(got), len(want), keys(got), keys(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Key != w.Key || !g.At.Equal(w.At) || g.Action != w.Action || g.Subject != w.Subject ||
			g.Recipient != w.Recipient || g.BundleID != w.BundleID || g.Detail != w.Detail {
			t.Fatalf("event %d is %+v, want %+v", i, g, w)
		}
	}
}

func keys(events []audit.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Key
	}
	return out
}

func auditOrder(t *testing.T, s store.Store) {
	a, b := newRecipient(), newRecipient()
	base := auditBase()
	var events []audit.Event
	for i := range 12 {
		r := a
		if i%3 == 0 {
			r = b
		}
		// Out of time order, and two at the same millisecond.
		events = append(events, auditEvent(r, base.Add(time.Duration((i*7)%12/2)*time.Second), i))
	}
	appendAudit(t, s, events)
	for _, r := range []string{a, b, newRecipient()} {
		mine := slices.DeleteFunc(slices.Clone(events), func(e audit.Event) bool { return e.Recipient != r })
		wantEvents(t, readAll(t, s, audit.Range(r, time.Time{}, time.Time{}, "", 100)), mine)
	}
}

func auditTimeRange(t *testing.T, s store.Store) {
	r := newRecipient()
	base := auditBase()
	events := auditSeries(r, base, 5, time.Minute)
	appendAudit(t, s, events)
	from, to := base.Add(time.Minute), base.Add(3*time.Minute)
	// From is inclusive, to exclusive.
	wantEvents(t, readAll(t, s, audit.Range(r, from, to, "", 10)), events[1:3])
	wantEvents(t, readAll(t, s, audit.Range(r, from, time.Time{}, "", 10)), events[1:])
	wantEvents(t, readAll(t, s, audit.Range(r, time.Time{}, to, "", 10)), events[:3])
	wantEvents(t, readAll(t, s, audit.Range(r, to, from, "", 10)), nil)
	// A cursor within the range goes on after it.
	wantEvents(t, readAll(t, s, audit.Range(r, from, time.Time{}, events[2].Key, 10)), events[3:])
}

func auditPaging(t *testing.T, s store.Store) {
	r := newRecipient()
	base := auditBase()
	events := auditSeries(r, base, 25, time.Second)
	appendAudit(t, s, events)
	q := audit.Range(r, time.Time{}, time.Time{}, "", 10)
	var sizes []int
	var all []audit.Event
	for {
		page, err := s.AuditEvents(ctx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(page.Events))
		all = append(all, page.Events...)
		if page.Next == "" {
			break
		}
		q.After = page.Next
	}
	if !slices.Equal(sizes, []int{10, 10, 5}) {
		t.Fatalf("pages of %v events, want 10, 10, 5", sizes)
	}
	wantEvents(t, all, events)
	// A page that ends exactly at the last event says so.
	page, err := s.AuditEvents(ctx(t), audit.Range(r, time.Time{}, time.Time{}, events[14].Key, 10))
	if err != nil || len(page.Events) != 10 || page.Next != "" {
		t.Fatalf("the last full page: %d events, next %q (%v); want 10 and no next", len(page.Events), page.Next, err)
	}
}

// Several instances flush the same recipient's events over the same
// seconds: their writes overlap in time, and a page still comes back in key
// order.
func auditOverlappingWrites(t *testing.T, s store.Store) {
	r := newRecipient()
	base := auditBase()
	all := auditSeries(r, base, 12, time.Second)
	var first, second []audit.Event
	for i, e := range all {
		if i%2 == 0 {
			first = append(first, e)
		} else {
			second = append(second, e)
		}
	}
	appendAudit(t, s, first)
	appendAudit(t, s, second)
	for _, limit := range []int{1, 2, 5, 100} {
		wantEvents(t, readAll(t, s, audit.Range(r, time.Time{}, time.Time{}, "", limit)), all)
	}
}

// A flush whose answer was lost is written again as it was, then with more
// events after its own: every event comes back once.
func auditWrittenTwice(t *testing.T, s store.Store) {
	r := newRecipient()
	base := auditBase()
	events := auditSeries(r, base, 6, time.Second)
	appendAudit(t, s, events[:3])
	appendAudit(t, s, events[:3])
	appendAudit(t, s, events)
	wantEvents(t, readAll(t, s, audit.Range(r, time.Time{}, time.Time{}, "", 4)), events)
}

// A recipient with more events in one flush than one record of the store
// takes: all are stored, in order.
func auditLargeWrite(t *testing.T, s store.Store) {
	r := newRecipient()
	base := auditBase()
	events := auditSeries(r, base, 300, time.Millisecond)
	for i := range events {
		events[i].Detail = strings.Repeat("ü", audit.MaxDetail/2)
	}
	appendAudit(t, s, events)
	wantEvents(t, readAll(t, s, audit.Range(r, time.Time{}, time.Time{}, "", 300)), events)
}

func auditPrune(t *testing.T, s store.Store) {
	a, b := newRecipient(), newRecipient()
	base := auditBase()
	events := auditSeries(a, base, 8, time.Minute)
	for i := 1; i < len(events); i += 2 {
		events[i].Recipient = b
	}
	appendAudit(t, s, events)
	cutoff := base.Add(5 * time.Minute)
	if err := s.PruneAudit(ctx(t), cutoff); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{a, b} {
		kept := slices.DeleteFunc(slices.Clone(events), func(e audit.Event) bool { return e.Recipient != r || e.At.Before(cutoff) })
		wantEvents(t, readAll(t, s, audit.Range(r, time.Time{}, time.Time{}, "", 3)), kept)
	}
	// Pruning again, with nothing older, changes nothing.
	if err := s.PruneAudit(ctx(t), cutoff); err != nil {
		t.Fatal(err)
	}
	later := auditEvent(a, base.Add(10*time.Minute), 99)
	appendAudit(t, s, []audit.Event{later})
	got := readAll(t, s, audit.Range(a, cutoff, time.Time{}, "", 10))
	if len(got) != 2 || got[1].Key != later.Key {
		t.Fatalf("after pruning, events %v; want the kept one and the new one", keys(got))
	}
}

// The hub's retention sweep prunes the audit log at its retention.
func auditSwept(t *testing.T, s store.Store) {
	r := newRecipient()
	now := time.Now().Truncate(time.Millisecond)
	h := hub.New(s, hub.Options{Retention: time.Hour, SweepInterval: time.Hour, Now: func() time.Time { return now }}, nil)
	t.Cleanup(h.Close)
	old := auditEvent(r, now.Add(-2*time.Hour), 0)
	recent := auditEvent(r, now.Add(-30*time.Minute), 1)
	if err := h.AppendAudit(ctx(t), []audit.Event{old, recent}); err != nil {
		t.Fatal(err)
	}
	if err := h.SweepNow(ctx(t)); err != nil {
		t.Fatal(err)
	}
	page, err := h.AuditEvents(ctx(t), audit.Range(r, time.Time{}, time.Time{}, "", 10))
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, page.Events, []audit.Event{recent})
}
