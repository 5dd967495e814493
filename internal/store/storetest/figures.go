package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/figures"
	"github.com/energydatahub/messagehub/internal/store"
)

// RunFigures checks the promises of store.Retention and store.Figures:
// retention's index of dequeue times, the recount of every recipient's
// backlog and the figures stored from it. Every backend's tests call it.
func RunFigures(t *testing.T, newStore Factory) {
	run := func(name string, test func(*testing.T, *storeEnv)) {
		t.Run(name, func(t *testing.T) {
			test(t, &storeEnv{t: t, store: open(t, newStore), clock: newClock()})
		})
	}
	run("DueRecipientsNamesOnlyWhatIsDueOrDequeuedSince", dueRecipients)
	run("ScanBacklogReadsEveryRecipientWithABacklog", scanBacklog)
	run("FiguresAreReadBackInTheirParts", figuresRoundTrip)
	run("ChangedBacklogNamesTheRecipientsThatChanged", changedBacklog)
	run("FiguresLeaseIsHeldAndGivenUp", figuresLease)
	run("ARecountListsRecipientsByAgeAndBySize", recountLists)
}

func (s *storeEnv) due(dueBefore, since time.Time) []string {
	s.t.Helper()
	var got []string
	if err := s.store.DueRecipients(ctx(s.t), dueBefore, since, func(r string) error {
		got = append(got, r)
		return nil
	}); err != nil {
		s.t.Fatal(err)
	}
	slices.Sort(got)
	return got
}

func dueRecipients(t *testing.T, s *storeEnv) {
	early, late, saved, pending := newRecipient(), newRecipient(), newRecipient(), newRecipient()
	for _, r := range []string{early, late, saved, pending} {
		s.commit(notes(2, r, domain.OriginCharges, "c")...)
	}
	start := s.clock.Now()
	s.acknowledge(early, s.create(early, s.record(domain.OriginCharges, "c", 0, 1)))
	s.acknowledge(early, s.create(early, s.record(domain.OriginCharges, "c", 1, 2)))
	s.clock.Advance(time.Hour)
	between := s.clock.Now()
	s.clock.Advance(time.Hour)
	s.acknowledge(late, s.create(late, s.record(domain.OriginCharges, "c", 0, 1)))
	s.create(pending, s.record(domain.OriginCharges, "c", 0, 1))
	end := s.clock.Now().Add(time.Minute)

	if got := s.due(start, time.Time{}); len(got) != 0 {
		t.Fatalf("nothing is due before the first dequeue, got %v", got)
	}
	expectIDs(t, "due before the second hour", s.due(between, time.Time{}), []string{early})
	expectIDs(t, "due, or dequeued since the second hour", s.due(between, between), slices.Sorted(slices.Values([]string{early, late})))
	expectIDs(t, "dequeued since the second hour only", s.due(start, between), []string{late})
	expectIDs(t, "every retained bundle", s.due(end, time.Time{}), slices.Sorted(slices.Values([]string{early, late})))
}

func scanBacklog(t *testing.T, s *storeEnv) {
	a, b, acked := newRecipient(), newRecipient(), newRecipient()
	s.commit(notes(4, a, domain.OriginCharges, "c")...)
	s.commit(notes(2, a, domain.OriginTimeSeries, "t")...)
	s.commit(notes(3, b, domain.OriginCharges, "c")...)
	s.commit(notes(1, acked, domain.OriginCharges, "c")...)
	s.acknowledge(a, s.create(a, s.record(domain.OriginCharges, "c", 0, 3)))
	s.create(a, s.record(domain.OriginTimeSeries, "t", 0, 2))
	s.acknowledge(acked, s.create(acked, s.record(domain.OriginCharges, "c", 0, 1)))

	got := map[string]store.RecipientRecords{}
	if _, err := s.store.ScanBacklog(ctx(t), func(r store.RecipientRecords) error {
		if _, twice := got[r.Recipient]; twice {
			t.Fatalf("recipient %s read twice", r.Recipient)
		}
		got[r.Recipient] = r
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{a, b, acked} {
		st := s.load(r)
		rec, ok := got[r]
		if !ok {
			t.Fatalf("recipient %s not read", r)
		}
		if len(rec.Entries) != len(st.Entries) || len(rec.Cursors) != len(st.Cursors) || len(rec.Pending) != len(st.Pending) {
			t.Fatalf("%s: read %d entries, %d cursors, %d pending; it has %d, %d, %d",
				r, len(rec.Entries), len(rec.Cursors), len(rec.Pending), len(st.Entries), len(st.Cursors), len(st.Pending))
		}
	}
	sum, err := sumBacklog(ctx(t), s.store)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Recipients != 2 || sum.ByOrigin[domain.OriginCharges].Notifications != 1+3 || sum.ByOrigin[domain.OriginTimeSeries].Notifications != 2 {
		t.Fatalf("backlog %+v; want 2 recipients, 1+3 charges, 2 time series", sum)
	}
}

func figuresRoundTrip(t *testing.T, s *storeEnv) {
	none, err := s.store.ReadFigures(ctx(t), store.FigureLists|store.FigureHistory)
	if err != nil || !none.ComputedAt.IsZero() || len(none.Oldest) != 0 || len(none.History) != 0 {
		t.Fatalf("figures never written read %+v (%v), want zero", none, err)
	}
	at := time.UnixMilli(s.clock.Now().UnixMilli()).UTC()
	line := store.RecipientBacklog{Recipient: newRecipient(), Waiting: 7, Oldest: at.Add(-time.Hour), Pending: 1}
	want := store.BacklogFigures{
		ComputedAt: at, Cost: 12.5, Notices: 3, OldestNotice: at.Add(-time.Minute),
		Backlog: store.Backlog{Recipients: 1, ByOrigin: map[domain.Origin]store.OriginBacklog{
			domain.OriginCharges: {Notifications: 7, Oldest: at.Add(-time.Hour)},
		}},
		Oldest: []store.RecipientBacklog{line}, Largest: []store.RecipientBacklog{line},
		History: []store.BacklogSample{{At: at, ByOrigin: map[domain.Origin]store.OriginBacklog{domain.OriginCharges: {Notifications: 7}}}},
	}
	// Only the lease's holder writes the figures.
	const holder = "writer"
	if held, err := s.store.HoldFiguresLease(ctx(t), holder, time.Minute); err != nil || !held {
		t.Fatalf("the figures lease: %v (%v)", held, err)
	}
	if err := s.store.WriteFigures(ctx(t), holder, want, store.FigureLists|store.FigureHistory); err != nil {
		t.Fatal(err)
	}
	totals, err := s.store.ReadFigures(ctx(t), store.FigureTotals)
	if err != nil {
		t.Fatal(err)
	}
	if !totals.ComputedAt.Equal(at) || totals.Cost != want.Cost || totals.Notices != 3 || !totals.OldestNotice.Equal(want.OldestNotice) ||
		totals.Backlog.Recipients != 1 || totals.Backlog.ByOrigin[domain.OriginCharges].Notifications != 7 {
		t.Fatalf("totals read %+v, wrote %+v", totals, want)
	}
	if len(totals.Oldest) != 0 || len(totals.Largest) != 0 || len(totals.History) != 0 {
		t.Fatalf("the totals came with the lists or the history: %+v", totals)
	}
	all, err := s.store.ReadFigures(ctx(t), store.FigureLists|store.FigureHistory)
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Oldest) != 1 || all.Oldest[0].Recipient != line.Recipient || !all.Oldest[0].Oldest.Equal(line.Oldest) ||
		len(all.Largest) != 1 || all.Largest[0].Waiting != 7 || len(all.History) != 1 || !all.History[0].At.Equal(at) {
		t.Fatalf("lists and history read %+v, wrote %+v", all, want)
	}
	// A write of the totals alone leaves the other parts as they were.
	later := store.BacklogFigures{ComputedAt: at.Add(time.Minute), Notices: 1}
	if err := s.store.WriteFigures(ctx(t), holder, later, store.FigureTotals); err != nil {
		t.Fatal(err)
	}
	kept, err := s.store.ReadFigures(ctx(t), store.FigureLists|store.FigureHistory)
	if err != nil || !kept.ComputedAt.Equal(later.ComputedAt) || kept.Notices != 1 || len(kept.Oldest) != 1 || len(kept.History) != 1 {
		t.Fatalf("after a write of the totals alone: %+v (%v); want the new totals and the old lists and history", kept, err)
	}
}

// changedBacklog follows a tally from a recount through ChangedBacklog and
// checks it against a fresh recount.
func changedBacklog(t *testing.T, s *storeEnv) {
	idle, busy, done := newRecipient(), newRecipient(), newRecipient()
	s.commit(notes(2, idle, domain.OriginCharges, "c")...)
	s.commit(notes(2, done, domain.OriginCharges, "c")...)
	start, err := s.store.ChangedBacklog(ctx(t), "")
	if err != nil || start.Cursor == "" || len(start.Recipients) != 0 {
		t.Fatalf("the present: %+v (%v); want a cursor and nothing else", start, err)
	}
	var tally store.Tally
	if _, err := s.store.ScanBacklog(ctx(t), func(r store.RecipientRecords) error { tally.Set(r); return nil }); err != nil {
		t.Fatal(err)
	}
	s.commit(notes(3, busy, domain.OriginTimeSeries, "t")...)
	s.acknowledge(done, s.create(done, s.record(domain.OriginCharges, "c", 0, 2)))
	changes, err := s.store.ChangedBacklog(ctx(t), start.Cursor)
	if err != nil || changes.Cursor == "" {
		t.Fatalf("changes: %+v (%v)", changes, err)
	}
	named := map[string]bool{}
	for _, r := range changes.Recipients {
		named[r.Recipient] = true
	}
	if !named[busy] || (!named[done] && !changes.All) {
		t.Fatalf("changes name %v (all: %v); want %s and %s", named, changes.All, busy, done)
	}
	if changes.All {
		tally.Reset()
	}
	for _, r := range changes.Recipients {
		tally.Set(r)
	}
	got := tally.Figures(s.clock.Now(), nil)
	want, err := sumBacklog(ctx(t), s.store)
	if err != nil {
		t.Fatal(err)
	}
	if got.Backlog.Recipients != 2 || want.Recipients != 2 ||
		got.Backlog.ByOrigin[domain.OriginCharges].Notifications != 2 || got.Backlog.ByOrigin[domain.OriginTimeSeries].Notifications != 3 {
		t.Fatalf("followed %+v, recounted %+v; want 2 recipients, 2 charges (idle), 3 time series (busy)", got.Backlog, want)
	}
	// With nothing changed the changes come to rest: a store may name a
	// recipient again (a read served by a replica behind the one before
	// it), but not on every read; a store that names every recipient each
	// time (All: its reads are local) is at rest already.
	cursor := changes.Cursor
	for read := 1; ; read++ {
		again, err := s.store.ChangedBacklog(ctx(t), cursor)
		if err != nil {
			t.Fatal(err)
		}
		if again.All || !slices.ContainsFunc(again.Recipients, func(r store.RecipientRecords) bool { return r.Recipient == idle }) {
			break
		}
		if read == 3 {
			t.Fatalf("nothing changed, yet the idle recipient was read again %d times: %+v", read, again)
		}
		cursor = again.Cursor
	}
}

func figuresLease(t *testing.T, s *storeEnv) {
	c := context.Background()
	for _, step := range []struct {
		holder string
		want   bool
	}{{"a", true}, {"a", true}} {
		held, err := s.store.HoldFiguresLease(c, step.holder, time.Minute)
		if err != nil || held != step.want {
			t.Fatalf("%s holds the figures lease: %v (%v), want %v", step.holder, held, err, step.want)
		}
	}
	if err := s.store.ReleaseFiguresLease(c, "a"); err != nil {
		t.Fatal(err)
	}
	if held, err := s.store.HoldFiguresLease(c, "b", time.Minute); err != nil || !held {
		t.Fatalf("after a gave the lease up, b holds it: %v (%v)", held, err)
	}
	if err := s.store.ReleaseFiguresLease(c, "a"); err != nil {
		t.Fatalf("giving up a lease another holds: %v", err)
	}
}

func recountLists(t *testing.T, s *storeEnv) {
	old, big, none := newRecipient(), newRecipient(), newRecipient()
	s.commit(notes(1, old, domain.OriginCharges, "c")...)
	s.clock.Advance(time.Hour)
	s.commit(notes(5, big, domain.OriginCharges, "c")...)
	s.commit(notes(1, none, domain.OriginCharges, "c")...)
	s.acknowledge(none, s.create(none, s.record(domain.OriginCharges, "c", 0, 1)))
	k := figures.New(s.store, figures.Options{Now: s.clock.Now})
	if err := k.Recount(ctx(t)); err != nil {
		t.Fatal(err)
	}
	f, err := s.store.ReadFigures(ctx(t), store.FigureLists|store.FigureHistory)
	if err != nil {
		t.Fatal(err)
	}
	names := func(l []store.RecipientBacklog) []string {
		var out []string
		for _, r := range l {
			out = append(out, r.Recipient)
		}
		return out
	}
	expectIDs(t, "oldest first", names(f.Oldest), []string{old, big})
	expectIDs(t, "largest first", names(f.Largest), []string{big, old})
	if f.Largest[0].Waiting != 5 || len(f.History) != 1 || f.History[0].ByOrigin[domain.OriginCharges].Notifications != 6 {
		t.Fatalf("figures %+v: want 5 waiting for the largest and one sample of 6 charges", f)
	}
	// Due again only after Every; an update a history step on adds a
	// sample, and follows what changed.
	if done, err := k.Turn(ctx(t)); err != nil || done {
		t.Fatalf("a turn right after a recount updated the figures: %v (%v)", done, err)
	}
	s.commit(notes(2, none, domain.OriginCharges, "c")...)
	s.clock.Advance(store.HistoryStep)
	if done, err := k.Turn(ctx(t)); err != nil || !done {
		t.Fatalf("a turn a history step on did not update the figures: %v (%v)", done, err)
	}
	if f, err = s.store.ReadFigures(ctx(t), store.FigureLists|store.FigureHistory); err != nil || len(f.History) != 2 || len(f.Oldest) != 3 {
		t.Fatalf("after an update a step on: %d samples, %d listed (%v); want 2 samples, 3 listed", len(f.History), len(f.Oldest), err)
	}
}

// sumBacklog recounts the backlog of every recipient of s at once.
func sumBacklog(ctx context.Context, s store.Figures) (store.Backlog, error) {
	var b store.Backlog
	_, err := s.ScanBacklog(ctx, func(r store.RecipientRecords) error {
		b.Add(r.Entries, r.Cursors)
		for _, p := range r.Pending {
			b.AddPending(p.Origin, p.Created)
		}
		return nil
	})
	return b, err
}
