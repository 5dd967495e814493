package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/store"
)

// acknowledgeNaming dequeues a pending bundle the way the hub does when its
// record names the drawers it reads from: those of the entry.
func (s *storeEnv) acknowledgeNaming(recipient string, rec bundle.Record) bundle.Record {
	s.t.Helper()
	rec, cur := s.dequeued(recipient, rec)
	rec.Drawers = s.entry(recipient, rec.Origin, rec.ContentType).Drawers
	if err := s.store.Acknowledge(ctx(s.t), recipient, rec, cur); err != nil {
		s.t.Fatalf("acknowledge %s: %v", rec.ID, err)
	}
	return rec
}

// LoadRetention reads the catalog and the bundles dequeued before the
// cutoff or since the last pass, never those in between.
func loadRetentionReadsOnlyWhatIsDueOrNew(t *testing.T, s *storeEnv) {
	r := newRecipient()
	var recs []bundle.Record
	for _, contentType := range []string{"old", "mid", "new"} {
		s.commit(note(r, domain.OriginCharges, contentType))
		recs = append(recs, s.acknowledge(r, s.create(r, s.record(domain.OriginCharges, contentType, 0, 1))))
		s.clock.Advance(time.Hour)
	}
	dueBefore := recs[0].DequeuedAt.Add(time.Minute)
	since := recs[2].DequeuedAt.Add(-time.Minute)
	st, err := s.store.LoadRetention(ctx(t), r, dueBefore, since)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rec := range st.Bundles {
		got = append(got, rec.ID)
	}
	expectIDs(t, "bundles read", slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values([]string{recs[0].ID, recs[2].ID})))
	if len(st.Entries) != 3 || len(st.Cursors) != 3 {
		t.Fatalf("%d entries and %d cursors read, want 3 of each", len(st.Entries), len(st.Cursors))
	}
	if st, err = s.store.LoadRetention(ctx(t), r, dueBefore, time.Time{}); err != nil || len(st.Bundles) != 1 || st.Bundles[0].ID != recs[0].ID {
		t.Fatalf("without since: %+v (%v), want only the due bundle", st.Bundles, err)
	}
}

// A drawer a sweep takes out of the catalog while a bundle still reads
// from it is kept: readable, and not named as kept until the retention of
// the bundle covering its end is over; then a sweep deletes it and its
// record.
func applySweepKeepsDrawersUntilTheyAreDue(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(2, r, domain.OriginCharges, "c")...)
	e := s.entry(r, domain.OriginCharges, "c")
	done := s.acknowledgeNaming(r, s.create(r, s.record(domain.OriginCharges, "c", 0, 2)))
	st := s.load(r)
	d := e.Drawers[0].ID
	err := s.store.ApplySweep(ctx(t), store.Sweep{
		Recipient:     r,
		DeleteEntries: []catalog.Entry{e},
		DeleteCursors: []catalog.Cursor{cursorOf(st, domain.OriginCharges, "c")},
		Keep:          []store.Kept{{Cabinet: e.Key(), Until: done.DequeuedAt, Drawers: []string{d}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.load(r).Entries) != 0 {
		t.Fatal("the sweep left the entry")
	}
	if items, err := s.store.ReadDrawer(ctx(t), d, 0, 2, 10); err != nil || len(items) != 2 {
		t.Fatalf("the kept drawer reads %d items (%v), want 2", len(items), err)
	}
	before, err := s.store.LoadRetention(ctx(t), r, done.DequeuedAt, time.Time{})
	if err != nil || len(before.Kept) != 0 {
		t.Fatalf("kept drawers before their bundle is due: %+v (%v), want none", before.Kept, err)
	}
	due, err := s.store.LoadRetention(ctx(t), r, done.DequeuedAt.Add(time.Millisecond), time.Time{})
	if err != nil || len(due.Kept) != 1 || !slices.Equal(due.Kept[0].Drawers, []string{d}) {
		t.Fatalf("kept drawers once their bundle is due: %+v (%v), want %s", due.Kept, err, d)
	}
	err = s.store.ApplySweep(ctx(t), store.Sweep{Recipient: r, Bundles: []bundle.Record{{ID: done.ID}}, Drawers: []string{d}, Done: []string{due.Kept[0].ID}})
	if err != nil {
		t.Fatal(err)
	}
	if items, err := s.store.ReadDrawer(ctx(t), d, 0, 2, 10); err != nil || len(items) != 0 {
		t.Fatalf("the drawer reads %d items past its retention (%v)", len(items), err)
	}
	if after, err := s.store.LoadRetention(ctx(t), r, done.DequeuedAt.Add(time.Hour), time.Time{}); err != nil || len(after.Kept) != 0 || len(after.Bundles) != 0 {
		t.Fatalf("after the sweep: %+v (%v), want nothing kept or retained", after, err)
	}
	if s.exists(r, done.ID) {
		t.Fatal("the expired bundle is still there")
	}
}
