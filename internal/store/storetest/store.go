package storetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/store"
)

// RunStore checks each Store method's promise (store.go) directly, with no
// Repository in between: one subtest per promise, so that a backend that
// breaks one is told which. Every backend's tests call it.
func RunStore(t *testing.T, newStore Factory) {
	run := func(name string, test func(*testing.T, *storeEnv)) {
		t.Run(name, func(t *testing.T) {
			test(t, &storeEnv{t: t, store: open(t, newStore), clock: newClock()})
		})
	}
	run("LoadRecipientOfAnUnknownRecipientIsZero", loadUnknownRecipient)
	run("CommitSavesWritesHeadEntriesPagesAndIDs", commitWritesEverything)
	run("CommitSavesMovesTheWatermarkItIsGiven", commitMovesWatermark)
	run("CommitSavesRefusesAStaleHead", commitRefusesStaleHead)
	run("CommitSavesRefusesAStaleEntry", commitRefusesStaleEntry)
	run("CommitSavesNamesEveryExistingIDAndWritesNothing", commitNamesEveryExistingID)
	run("CommitSavesIsAllOrNothingAcrossRecipients", commitAllOrNothing)
	run("CommitSavesOnOneHeadAtOnceOneWins", commitOneWins)
	run("CommitSavesNeverStoreOneIDTwice", commitOneIDOnce)
	run("ReadDrawerAndItsLatestHonourFromToLimitAndOrder", readDrawerRanges)
	run("LookupIDsReturnsOnlyStoredIDs", lookupIDs)
	run("BundleExistsForPendingAndDequeuedBundles", bundleExists)
	run("CreateBundleStoresAPendingBundle", createStoresPending)
	run("CreateBundleRefusesWhenABundleIsPendingInItsGroup", createRefusesPendingGroup)
	run("CreateBundleRefusesAUsedID", createRefusesUsedID)
	run("CreateBundleRefusesWhenTheCursorMoved", createRefusesMovedCursor)
	run("CreateBundlesInOneGroupAtOnceOneWins", createOneWins)
	run("AcknowledgeDequeuesTheBundleAndMovesTheCursor", acknowledgeDequeues)
	run("AcknowledgeRefusesAStaleBundleVersion", acknowledgeRefusesStaleBundle)
	run("AcknowledgeRefusesWhenTheCursorMoved", acknowledgeRefusesMovedCursor)
	run("AcknowledgeRefusesABundleNotPending", acknowledgeRefusesUnknownBundle)
	run("AcknowledgesOfOneBundleAtOnceOneWins", acknowledgeOneWins)
	run("RecipientsVisitsEveryRecipientWithState", recipients)
	run("DequeuedBundlesListsOnlyBundlesNoLongerPending", dequeuedBundles)
	run("ApplySweepRemovesWhatItNames", sweepRemoves)
	run("ApplySweepRefusesWhenTheCatalogChanged", sweepRefusesChangedCatalog)
	run("LoadRetentionReadsOnlyWhatIsDueOrNew", loadRetentionReadsOnlyWhatIsDueOrNew)
	run("ApplySweepKeepsDrawersUntilTheyAreDue", applySweepKeepsDrawersUntilTheyAreDue)
	run("BacklogSumsEntriesAndCursors", backlogSums)
	run("BacklogCountsPendingBundles", backlogCountsPending)
	run("OutboxKeepsTheNoticesOfDequeues", outboxNotices)
	run("OutboxKeepsTheNoticesOfTwoDequeuesOfOneID", outboxNoticesOfAReusedID)
	run("OutboxListsTheNoticesAfterTheLastCallsInTurn", outboxNoticesInTurn)
	run("OutboxListsEveryDomainsNoticesInTurn", outboxNoticesOfDomainsInTurn)
	run("ReleaseBundleFreesItsGroupAndKeepsItsID", releaseFreesItsGroupAndKeepsItsID)
	run("ReleaseBundleRefusesABundleNotPendingAtItsVersion", releaseRefusesABundleNotPendingAtItsVersion)
	run("ReleasesAndDequeuesOfOneBundleAtOnceOneWins", releasesAndDequeuesOfOneBundleAtOnceOneWins)
	run("ApplySweepRemovesAReleasedBundle", sweepRemovesAReleasedBundle)
	run("AStaleSweepSparesANewDequeueOfItsID", staleSweepSparesANewDequeueOfItsID)
	run("ReadBellsNeverReturnsTheStoresOwnBells", ownBellsAreNotRead)
}

// storeEnv drives one store by hand, the way the repository would.
type storeEnv struct {
	t     *testing.T
	store store.Store
	clock *clock
}

func (s *storeEnv) load(recipient string) store.RecipientState {
	s.t.Helper()
	st, err := s.store.LoadRecipient(ctx(s.t), recipient)
	if err != nil {
		s.t.Fatalf("load %s: %v", recipient, err)
	}
	return st
}

// plan plans a save of ns on the recipient's current state.
func (s *storeEnv) plan(recipient string, ns ...domain.Notification) store.RecipientSave {
	s.t.Helper()
	return planSave(recipient, s.load(recipient), ns, s.clock.Now().UnixMilli())
}

// commit saves ns for their recipient and fails the test if the store refuses.
func (s *storeEnv) commit(ns ...domain.Notification) {
	s.t.Helper()
	if err := s.store.CommitSaves(ctx(s.t), []store.RecipientSave{s.plan(ns[0].Recipient, ns...)}); err != nil {
		s.t.Fatalf("commit: %v", err)
	}
}

// entry returns the recipient's catalog entry of a cabinet.
func (s *storeEnv) entry(recipient string, origin domain.Origin, contentType string) catalog.Entry {
	s.t.Helper()
	st := s.load(recipient)
	i := slices.IndexFunc(st.Entries, func(e catalog.Entry) bool { return e.Origin == origin && e.ContentType == contentType })
	if i < 0 {
		s.t.Fatalf("no catalog entry %v/%s for %s", origin, contentType, recipient)
	}
	return st.Entries[i]
}

// cursorOf returns the cabinet's stored cursor, or a new one (no version).
func cursorOf(st store.RecipientState, origin domain.Origin, contentType string) catalog.Cursor {
	if i := slices.IndexFunc(st.Cursors, func(c catalog.Cursor) bool { return c.Origin == origin && c.ContentType == contentType }); i >= 0 {
		return st.Cursors[i]
	}
	return catalog.Cursor{Origin: origin, ContentType: contentType}
}

// record is a pending bundle of positions [from, to) of a cabinet, as cut.
func (s *storeEnv) record(origin domain.Origin, contentType string, from, to int64) bundle.Record {
	return bundle.Record{
		ID: uuid.NewString(), Origin: origin, ContentType: contentType, Group: domain.GroupOf(origin),
		Start: from, End: to, Count: int(to - from), Weight: to - from, DocumentTypes: []string{contentType},
		State: bundle.Pending, CreatedAt: s.clock.Now(),
	}
}

// create stores rec as pending on the cabinet's current cursor and returns
// it as stored (with its version).
func (s *storeEnv) create(recipient string, rec bundle.Record) bundle.Record {
	s.t.Helper()
	cur := cursorOf(s.load(recipient), rec.Origin, rec.ContentType)
	if err := s.store.CreateBundle(ctx(s.t), recipient, rec, cur); err != nil {
		s.t.Fatalf("create bundle: %v", err)
	}
	return s.pending(recipient, rec.ID)
}

// pending returns the recipient's pending bundle id; the test fails if there is none.
func (s *storeEnv) pending(recipient, id string) bundle.Record {
	s.t.Helper()
	st := s.load(recipient)
	i := slices.IndexFunc(st.Pending, func(b bundle.Record) bool { return b.ID == id })
	if i < 0 {
		s.t.Fatalf("bundle %s is not pending", id)
	}
	return st.Pending[i]
}

// dequeued is a pending bundle's record as Acknowledge takes it, with the
// cabinet's cursor moved past it.
func (s *storeEnv) dequeued(recipient string, rec bundle.Record) (bundle.Record, catalog.Cursor) {
	s.t.Helper()
	cur := cursorOf(s.load(recipient), rec.Origin, rec.ContentType)
	rec.State, rec.DequeuedAt = bundle.Dequeued, s.clock.Now()
	cur.Acked, cur.HeadSeq = rec.End, rec.NextSeq
	return rec, cur
}

func (s *storeEnv) acknowledge(recipient string, rec bundle.Record) bundle.Record {
	s.t.Helper()
	rec, cur := s.dequeued(recipient, rec)
	if err := s.store.Acknowledge(ctx(s.t), recipient, rec, cur); err != nil {
		s.t.Fatalf("acknowledge %s: %v", rec.ID, err)
	}
	return rec
}

// readable returns every item readable in the recipient's drawers, by id.
func (s *storeEnv) readable(recipient string) map[string]drawer.Item {
	s.t.Helper()
	out := map[string]drawer.Item{}
	for _, e := range s.load(recipient).Entries {
		for _, d := range e.Drawers {
			items, err := s.store.ReadDrawer(ctx(s.t), d.ID, d.Start, d.End(), drawer.Capacity+1)
			if err != nil {
				s.t.Fatal(err)
			}
			for _, it := range items {
				out[it.ID] = it
			}
		}
	}
	return out
}

func (s *storeEnv) lookup(ids ...string) map[string]store.IDRecord {
	s.t.Helper()
	found, err := s.store.LookupIDs(ctx(s.t), ids)
	if err != nil {
		s.t.Fatal(err)
	}
	return found
}

func (s *storeEnv) exists(recipient, id string) bool {
	s.t.Helper()
	ok, err := s.store.BundleExists(ctx(s.t), recipient, id)
	if err != nil {
		s.t.Fatal(err)
	}
	return ok
}

// expectConflict checks that a write was refused as a conflict.
func expectConflict(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("%s: got %v, want ErrConflict", what, err)
	}
}

func sameRecord(a, b bundle.Record) bool {
	return a.ID == b.ID && a.Origin == b.Origin && a.ContentType == b.ContentType && a.Group == b.Group &&
		a.Start == b.Start && a.End == b.End && a.Count == b.Count && a.Weight == b.Weight &&
		slices.Equal(a.DocumentTypes, b.DocumentTypes) && a.NextSeq == b.NextSeq && a.State == b.State &&
		a.CreatedAt.Equal(b.CreatedAt) && a.DequeuedAt.Equal(b.DequeuedAt)
}

func loadUnknownRecipient(t *testing.T, s *storeEnv) {
	st := s.load(newRecipient())
	if st.Head != (store.Head{}) || len(st.Entries)+len(st.Cursors)+len(st.Pending) != 0 {
		t.Fatalf("a recipient never seen has state %+v", st)
	}
}

func commitWritesEverything(t *testing.T, s *storeEnv) {
	r := newRecipient()
	ns := notes(3, r, domain.OriginCharges, "c")
	ns = append(ns, note(r, domain.OriginTimeSeries, "t"))
	ns[1].DocumentType, ns[1].Weight, ns[1].SupportsBundling = "d", 7, false
	plan := s.plan(r, ns...)
	if err := s.store.CommitSaves(ctx(t), []store.RecipientSave{plan}); err != nil {
		t.Fatal(err)
	}
	st := s.load(r)
	if st.Head.NextSeq != 5 || st.Head.Watermark != 4 || st.Head.Version == "" {
		t.Fatalf("head %+v; want next 5, watermark 4, a version", st.Head)
	}
	if len(st.Entries) != 2 {
		t.Fatalf("%d catalog entries, want 2", len(st.Entries))
	}
	for _, want := range plan.Entries {
		got := s.entry(r, want.Origin, want.ContentType)
		if got.Total != want.Total || got.Version == "" || !slices.Equal(got.Drawers, want.Drawers) {
			t.Fatalf("entry %+v, want %+v with a version", got, want)
		}
	}
	items := s.readable(r)
	for i, n := range ns {
		it, ok := items[n.ID]
		if !ok || it.Seq != int64(i+1) || it.DocumentType != n.DocumentType || it.Weight != n.Weight || it.SupportsBundling != n.SupportsBundling {
			t.Fatalf("notification %d read back as %+v (found %v), saved %+v", i, it, ok, n)
		}
	}
	found := s.lookup(ids(ns)...)
	for _, want := range plan.IDs {
		if got := found[want.ID]; got.ID != want.ID || got.Fingerprint != want.Fingerprint || got.DrawerID != want.DrawerID {
			t.Fatalf("id record %+v, want %+v", got, want)
		}
	}
}

// A save may hold the watermark back (as one whose earlier saves are still
// being written does), and a save of the head alone moves it later: the
// store keeps the watermark it is given, and nothing else changes.
func commitMovesWatermark(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(note(r, domain.OriginCharges, "c"))
	plan := s.plan(r, notes(2, r, domain.OriginCharges, "c")...)
	plan.Head.Watermark = 1
	if err := s.store.CommitSaves(ctx(t), []store.RecipientSave{plan}); err != nil {
		t.Fatal(err)
	}
	st := s.load(r)
	if st.Head.NextSeq != 4 || st.Head.Watermark != 1 {
		t.Fatalf("head %+v; want next 4 with the watermark held at 1", st.Head)
	}
	entry := s.entry(r, domain.OriginCharges, "c")
	head := st.Head
	head.Watermark = 3
	if err := s.store.CommitSaves(ctx(t), []store.RecipientSave{{Recipient: r, Head: head}}); err != nil {
		t.Fatal(err)
	}
	st = s.load(r)
	if st.Head.NextSeq != 4 || st.Head.Watermark != 3 || st.Head.Version == head.Version {
		t.Fatalf("head %+v; want next 4, watermark 3, a new version", st.Head)
	}
	if after := s.entry(r, domain.OriginCharges, "c"); after.Version != entry.Version || after.Total != 3 {
		t.Fatalf("a save of the head alone changed the entry: %+v, was %+v", after, entry)
	}
}

func commitRefusesStaleHead(t *testing.T, s *storeEnv) {
	r := newRecipient()
	fresh := s.plan(r, note(r, domain.OriginCharges, "c")) // for a head that does not exist yet
	s.commit(note(r, domain.OriginCharges, "c"))
	stale := s.plan(r, note(r, domain.OriginCharges, "c")) // on the head as it is now
	s.commit(note(r, domain.OriginTimeSeries, "t"))
	before := s.load(r)
	for what, plan := range map[string]store.RecipientSave{"head created twice": fresh, "head changed": stale} {
		expectConflict(t, what, s.store.CommitSaves(ctx(t), []store.RecipientSave{plan}))
		if found := s.lookup(plan.IDs[0].ID); len(found) != 0 {
			t.Fatalf("%s: the refused save's id was stored", what)
		}
	}
	if after := s.load(r); after.Head.Watermark != before.Head.Watermark || len(s.readable(r)) != 2 {
		t.Fatalf("a refused save changed the recipient: %+v", after.Head)
	}
}

func commitRefusesStaleEntry(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(note(r, domain.OriginCharges, "c"))
	old := s.entry(r, domain.OriginCharges, "c")
	s.commit(note(r, domain.OriginCharges, "c"))
	for what, version := range map[string]string{"entry changed": old.Version, "entry created twice": ""} {
		plan := s.plan(r, note(r, domain.OriginCharges, "c"))
		plan.Entries[0].Version = version
		expectConflict(t, what, s.store.CommitSaves(ctx(t), []store.RecipientSave{plan}))
		if found := s.lookup(plan.IDs[0].ID); len(found) != 0 {
			t.Fatalf("%s: the refused save's id was stored", what)
		}
	}
	if got := len(s.readable(r)); got != 2 {
		t.Fatalf("%d notifications readable, want the 2 saved", got)
	}
}

func commitNamesEveryExistingID(t *testing.T, s *storeEnv) {
	r1, r2 := newRecipient(), newRecipient()
	a, b := note(r1, domain.OriginCharges, "c"), note(r1, domain.OriginCharges, "c")
	c := note(r2, domain.OriginTimeSeries, "t")
	s.commit(a, b)
	s.commit(c)
	stored := s.lookup(a.ID, b.ID, c.ID)
	before1, before2 := s.readable(r1), s.readable(r2)

	x, y, z := note(r1, domain.OriginCharges, "c"), note(r1, domain.OriginMarketRoles, "m"), note(r2, domain.OriginTimeSeries, "t")
	// The existing ids come back under another recipient's content too: an
	// id is global.
	again := c
	again.Recipient = r1
	saves := []store.RecipientSave{s.plan(r1, x, a, y, b, again), s.plan(r2, z)}
	err := s.store.CommitSaves(ctx(t), saves)
	var exist *store.IDsExistError
	if !errors.As(err, &exist) || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("got %v, want *IDsExistError that is an ErrConflict", err)
	}
	if got := slices.Sorted(maps.Keys(exist.Records)); !slices.Equal(got, slices.Sorted(maps.Keys(stored))) {
		t.Fatalf("named %v, want every existing id %v", got, slices.Sorted(maps.Keys(stored)))
	}
	for id, want := range stored {
		if got := exist.Records[id]; got.Fingerprint != want.Fingerprint || got.DrawerID != want.DrawerID {
			t.Fatalf("named %s as %+v, stored as %+v", id, got, want)
		}
	}
	// Nothing of it was written, for either recipient.
	if found := s.lookup(x.ID, y.ID, z.ID); len(found) != 0 {
		t.Fatalf("ids of a refused save stored: %v", slices.Collect(maps.Keys(found)))
	}
	if after1, after2 := s.readable(r1), s.readable(r2); !maps.Equal(after1, before1) || !maps.Equal(after2, before2) {
		t.Fatalf("a refused save changed what is readable: %d and %d items, were %d and %d", len(after1), len(after2), len(before1), len(before2))
	}
	// And nothing of it is left in the way: the new ones save now.
	if err := s.store.CommitSaves(ctx(t), []store.RecipientSave{s.plan(r1, x, y), s.plan(r2, z)}); err != nil {
		t.Fatalf("saving the new ids after the refusal: %v", err)
	}
	if found := s.lookup(x.ID, y.ID, z.ID); len(found) != 3 {
		t.Fatalf("%d of 3 ids stored", len(found))
	}
}

func commitAllOrNothing(t *testing.T, s *storeEnv) {
	r1, r2 := newRecipient(), newRecipient()
	s.commit(note(r2, domain.OriginCharges, "c"))
	stale := s.plan(r2, note(r2, domain.OriginCharges, "c"))
	s.commit(note(r2, domain.OriginCharges, "c"))
	good := s.plan(r1, notes(3, r1, domain.OriginAggregations, "a")...)
	for _, order := range [][]store.RecipientSave{{good, stale}, {stale, good}} {
		expectConflict(t, "one recipient's head changed", s.store.CommitSaves(ctx(t), order))
		if found := s.lookup(good.IDs[0].ID, good.IDs[2].ID, stale.IDs[0].ID); len(found) != 0 {
			t.Fatalf("ids of a refused group stored: %v", slices.Collect(maps.Keys(found)))
		}
		if got := s.readable(r1); len(got) != 0 {
			t.Fatalf("the other recipient's part of a refused group is readable: %d items", len(got))
		}
	}
}

func readDrawerRanges(t *testing.T, s *storeEnv) {
	r := newRecipient()
	// Two saves into one drawer, so that pages start at 0, 3, 1003, 2003.
	ns := notes(2_503, r, domain.OriginCharges, "c")
	s.commit(ns[:3]...)
	s.commit(ns[3:]...)
	e := s.entry(r, domain.OriginCharges, "c")
	if len(e.Drawers) != 1 {
		t.Fatalf("%d drawers, want 1", len(e.Drawers))
	}
	d := e.Drawers[0].ID
	cases := []struct {
		from, to int64
		limit    int
		want     []domain.Notification
	}{
		{0, 2_503, drawer.Capacity, ns},
		{0, 100_000, drawer.Capacity, ns},   // to past the end
		{2, 5, 10, ns[2:5]},                 // across a page boundary
		{1_000, 1_010, 10, ns[1_000:1_010]}, // inside a page
		{1_500, 2_503, 10, ns[1_500:1_510]}, // limit before to
		{1_002, 2_004, 2_000, ns[1_002:2_004]},
		{7, 7, 10, nil},         // empty range
		{2_503, 2_600, 10, nil}, // past the last item
		{0, 2_503, 1, ns[:1]},   // the first item only
		{2_502, 2_503, 5, ns[2_502:]},
	}
	reads := []struct {
		name string
		read drawer.ReadFunc
	}{{"read", s.store.ReadDrawer}, {"latest read", s.store.ReadDrawerLatest}}
	for _, r := range reads {
		for _, c := range cases {
			items, err := r.read(ctx(t), d, c.from, c.to, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]string, len(items))
			for i, it := range items {
				got[i] = it.ID
				if want := c.from + int64(i); it.Pos != want {
					t.Fatalf("%s [%d, %d) limit %d: item %d at position %d, want %d", r.name, c.from, c.to, c.limit, i, it.Pos, want)
				}
			}
			expectIDs(t, fmt.Sprintf("%s [%d, %d) limit %d", r.name, c.from, c.to, c.limit), got, ids(c.want))
		}
		if items, err := r.read(ctx(t), uuid.NewString(), 0, 10, 10); err != nil || len(items) != 0 {
			t.Fatalf("%s of a drawer never written: %d items (%v)", r.name, len(items), err)
		}
	}
}

func lookupIDs(t *testing.T, s *storeEnv) {
	r := newRecipient()
	ns := notes(3, r, domain.OriginCharges, "c")
	plan := s.plan(r, ns...)
	if err := s.store.CommitSaves(ctx(t), []store.RecipientSave{plan}); err != nil {
		t.Fatal(err)
	}
	unknown := uuid.NewString()
	found := s.lookup(ns[0].ID, unknown, ns[2].ID)
	if len(found) != 2 {
		t.Fatalf("found %d records, want the 2 stored", len(found))
	}
	for _, want := range []store.IDRecord{plan.IDs[0], plan.IDs[2]} {
		if got := found[want.ID]; got.ID != want.ID || got.Fingerprint != want.Fingerprint || got.DrawerID != want.DrawerID {
			t.Fatalf("record %+v, want %+v", got, want)
		}
	}
	if found := s.lookup(); len(found) != 0 {
		t.Fatalf("looking up nothing found %d", len(found))
	}
}

func bundleExists(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(note(r, domain.OriginCharges, "c"))
	rec := s.record(domain.OriginCharges, "c", 0, 1)
	if s.exists(r, rec.ID) {
		t.Fatal("a bundle never created exists")
	}
	rec = s.create(r, rec)
	if !s.exists(r, rec.ID) {
		t.Fatal("a pending bundle does not exist")
	}
	if s.exists(newRecipient(), rec.ID) {
		t.Fatal("a bundle exists for another recipient")
	}
	s.acknowledge(r, rec)
	if !s.exists(r, rec.ID) {
		t.Fatal("a dequeued bundle does not exist")
	}
}

func createStoresPending(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(4, r, domain.OriginTimeSeries, "t")...)
	want := s.record(domain.OriginTimeSeries, "t", 0, 3)
	want.DocumentTypes, want.Weight, want.NextSeq = []string{"t", "u"}, 9, 4
	got := s.create(r, want)
	if !sameRecord(got, want) || got.Version == "" {
		t.Fatalf("pending bundle %+v, want %+v with a version", got, want)
	}
	if st := s.load(r); len(st.Pending) != 1 {
		t.Fatalf("%d pending bundles, want 1", len(st.Pending))
	}
}

func createRefusesPendingGroup(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(note(r, domain.OriginCharges, "c"), note(r, domain.OriginMarketRoles, "m"), note(r, domain.OriginTimeSeries, "t"))
	first := s.create(r, s.record(domain.OriginCharges, "c", 0, 1))
	// Another cabinet of the same group (master data).
	other := s.record(domain.OriginMarketRoles, "m", 0, 1)
	cur := cursorOf(s.load(r), other.Origin, other.ContentType)
	expectConflict(t, "a second bundle in the group", s.store.CreateBundle(ctx(t), r, other, cur))
	if s.exists(r, other.ID) {
		t.Fatal("the refused bundle was stored")
	}
	// Another group is free.
	s.create(r, s.record(domain.OriginTimeSeries, "t", 0, 1))
	// Once the first is dequeued, its group is free again.
	s.acknowledge(r, first)
	s.create(r, other)
}

func createRefusesUsedID(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(note(r, domain.OriginCharges, "c"), note(r, domain.OriginCharges, "c"), note(r, domain.OriginTimeSeries, "t"))
	rec := s.create(r, s.record(domain.OriginCharges, "c", 0, 1))
	// Pending in another group under the same id.
	ts := s.record(domain.OriginTimeSeries, "t", 0, 1)
	ts.ID = rec.ID
	expectConflict(t, "the id of a pending bundle", s.store.CreateBundle(ctx(t), r, ts, cursorOf(s.load(r), ts.Origin, ts.ContentType)))
	// Dequeued: its id stays used, in its own group too.
	s.acknowledge(r, rec)
	again := s.record(domain.OriginCharges, "c", 1, 2)
	again.ID = rec.ID
	expectConflict(t, "the id of a dequeued bundle", s.store.CreateBundle(ctx(t), r, again, cursorOf(s.load(r), again.Origin, again.ContentType)))
	if st := s.load(r); len(st.Pending) != 0 {
		t.Fatalf("a refused bundle is pending: %+v", st.Pending)
	}
	// Bundle ids are per recipient.
	other := newRecipient()
	s.commit(note(other, domain.OriginTimeSeries, "t"))
	s.create(other, ts)
}

func createRefusesMovedCursor(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(3, r, domain.OriginCharges, "c")...)
	never := cursorOf(s.load(r), domain.OriginCharges, "c") // no cursor stored yet
	first := s.acknowledge(r, s.create(r, s.record(domain.OriginCharges, "c", 0, 1)))
	moved := cursorOf(s.load(r), domain.OriginCharges, "c")
	stale := catalog.Cursor{Origin: moved.Origin, ContentType: moved.ContentType, Acked: moved.Acked, Version: "stale"}
	for what, cur := range map[string]catalog.Cursor{"created before": never, "another version": stale} {
		rec := s.record(domain.OriginCharges, "c", first.End, first.End+1)
		expectConflict(t, "cursor "+what, s.store.CreateBundle(ctx(t), r, rec, cur))
		if s.exists(r, rec.ID) {
			t.Fatalf("cursor %s: the refused bundle was stored", what)
		}
	}
	s.create(r, s.record(domain.OriginCharges, "c", first.End, first.End+1))
}

func acknowledgeDequeues(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(3, r, domain.OriginCharges, "c")...)
	rec := s.create(r, s.record(domain.OriginCharges, "c", 0, 2))
	rec.NextSeq = 3
	done := s.acknowledge(r, rec)
	st := s.load(r)
	if len(st.Pending) != 0 {
		t.Fatalf("still pending: %+v", st.Pending)
	}
	cur := cursorOf(st, domain.OriginCharges, "c")
	if cur.Acked != 2 || cur.HeadSeq != 3 || cur.Version == "" {
		t.Fatalf("cursor %+v; want acknowledged up to 2, head sequence 3, a version", cur)
	}
	dequeued, err := s.store.DequeuedBundles(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	if len(dequeued) != 1 || !sameRecord(dequeued[0], done) {
		t.Fatalf("dequeued bundles %+v, want %+v", dequeued, done)
	}
}

func acknowledgeRefusesStaleBundle(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(2, r, domain.OriginCharges, "c")...)
	rec := s.create(r, s.record(domain.OriginCharges, "c", 0, 1))
	for what, version := range map[string]string{"another version": "stale", "no version": ""} {
		stale := rec
		stale.Version = version
		done, cur := s.dequeued(r, stale)
		expectConflict(t, what, s.store.Acknowledge(ctx(t), r, done, cur))
	}
	s.pending(r, rec.ID)
	if cur := cursorOf(s.load(r), domain.OriginCharges, "c"); cur.Acked != 0 {
		t.Fatalf("a refused acknowledge moved the cursor to %d", cur.Acked)
	}
	s.acknowledge(r, rec)
}

func acknowledgeRefusesMovedCursor(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(2, r, domain.OriginCharges, "c")...)
	rec := s.create(r, s.record(domain.OriginCharges, "c", 0, 1))
	done, cur := s.dequeued(r, rec)
	cur.Version = "stale"
	expectConflict(t, "cursor moved", s.store.Acknowledge(ctx(t), r, done, cur))
	s.pending(r, rec.ID)
	if dequeued, err := s.store.DequeuedBundles(ctx(t), r); err != nil || len(dequeued) != 0 {
		t.Fatalf("a refused acknowledge left %d dequeued bundles (%v)", len(dequeued), err)
	}
	s.acknowledge(r, rec)
}

func acknowledgeRefusesUnknownBundle(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(2, r, domain.OriginCharges, "c")...)
	rec := s.record(domain.OriginCharges, "c", 0, 1)
	rec.Version = "never-stored"
	done, cur := s.dequeued(r, rec)
	expectConflict(t, "a bundle never created", s.store.Acknowledge(ctx(t), r, done, cur))
	if s.exists(r, rec.ID) {
		t.Fatal("acknowledging a bundle never created stored it")
	}
	if cur := cursorOf(s.load(r), domain.OriginCharges, "c"); cur.Acked != 0 {
		t.Fatalf("the cursor moved to %d", cur.Acked)
	}
}

func recipients(t *testing.T, s *storeEnv) {
	want := []string{newRecipient(), newRecipient(), newRecipient()}
	for _, r := range want {
		s.commit(note(r, domain.OriginCharges, "c"))
	}
	var got []string
	if err := s.store.Recipients(ctx(t), func(r string) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	expectIDs(t, "recipients", slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want)))
	stop := errors.New("stop")
	calls := 0
	err := s.store.Recipients(ctx(t), func(string) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("fn's error: got %v after %d calls, want it after 1", err, calls)
	}
}

func dequeuedBundles(t *testing.T, s *storeEnv) {
	r, other := newRecipient(), newRecipient()
	s.commit(note(r, domain.OriginCharges, "c"), note(r, domain.OriginTimeSeries, "t"))
	s.commit(note(other, domain.OriginCharges, "c"))
	done := s.acknowledge(r, s.create(r, s.record(domain.OriginCharges, "c", 0, 1)))
	s.create(r, s.record(domain.OriginTimeSeries, "t", 0, 1)) // pending: not listed
	s.acknowledge(other, s.create(other, s.record(domain.OriginCharges, "c", 0, 1)))
	got, err := s.store.DequeuedBundles(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !sameRecord(got[0], done) {
		t.Fatalf("dequeued bundles %+v, want only %+v", got, done)
	}
	if got, err := s.store.DequeuedBundles(ctx(t), newRecipient()); err != nil || len(got) != 0 {
		t.Fatalf("a recipient never seen has %d dequeued bundles (%v)", len(got), err)
	}
}

// fullDrawers saves two full drawers and a third with one item into a
// cabinet and acknowledges the first two drawers in one bundle.
func (s *storeEnv) fullDrawers(r string) ([]domain.Notification, bundle.Record) {
	s.t.Helper()
	ns := notes(2*drawer.Capacity+1, r, domain.OriginCharges, "c")
	s.commit(ns[:drawer.Capacity]...)
	s.commit(ns[drawer.Capacity:]...)
	done := s.acknowledge(r, s.create(r, s.record(domain.OriginCharges, "c", 0, 2*drawer.Capacity)))
	return ns, done
}

func sweepRemoves(t *testing.T, s *storeEnv) {
	r := newRecipient()
	ns, done := s.fullDrawers(r)
	s.commit(note(r, domain.OriginTimeSeries, "t"))
	ts := s.acknowledge(r, s.create(r, s.record(domain.OriginTimeSeries, "t", 0, 1)))
	st := s.load(r)
	charges := s.entry(r, domain.OriginCharges, "c")
	kept := charges
	kept.Drawers = kept.Drawers[2:]
	tsEntry := s.entry(r, domain.OriginTimeSeries, "t")
	sw := store.Sweep{
		Recipient:     r,
		Bundles:       []bundle.Record{{ID: done.ID}},
		Drawers:       []string{charges.Drawers[0].ID, charges.Drawers[1].ID, tsEntry.Drawers[0].ID},
		Entries:       []catalog.Entry{kept},
		DeleteEntries: []catalog.Entry{tsEntry},
		DeleteCursors: []catalog.Cursor{cursorOf(st, domain.OriginTimeSeries, "t")},
	}
	if err := s.store.ApplySweep(ctx(t), sw); err != nil {
		t.Fatal(err)
	}
	after := s.load(r)
	if len(after.Entries) != 1 || len(after.Entries[0].Drawers) != 1 || after.Entries[0].Drawers[0] != charges.Drawers[2] {
		t.Fatalf("entries after the sweep %+v; want charges with its last drawer only", after.Entries)
	}
	if len(after.Cursors) != 1 || after.Cursors[0].Origin != domain.OriginCharges {
		t.Fatalf("cursors after the sweep %+v; want charges' only", after.Cursors)
	}
	if s.exists(r, done.ID) || !s.exists(r, ts.ID) {
		t.Fatal("the sweep removed the wrong bundles")
	}
	for _, id := range sw.Drawers {
		if items, err := s.store.ReadDrawer(ctx(t), id, 0, 3*drawer.Capacity, 10); err != nil || len(items) != 0 {
			t.Fatalf("swept drawer %s still reads %d items (%v)", id, len(items), err)
		}
	}
	// The first save wrote only the first drawer: its ids go with it. The
	// second wrote the second drawer and the kept one: a store may keep its
	// ids until its last drawer goes (the Cosmos id index does), never less.
	found := s.lookup(ns[0].ID, ns[2*drawer.Capacity].ID)
	if len(found) != 1 || found[ns[2*drawer.Capacity].ID].DrawerID != charges.Drawers[2].ID {
		t.Fatalf("id records after the sweep %v; want only the kept drawer's", found)
	}
	if got := s.readable(r); len(got) != 1 {
		t.Fatalf("%d items readable after the sweep, want 1", len(got))
	}
}

// A sweep planned on a catalog that changed since is refused and removes
// nothing that is not acknowledged: here a save appended to the cabinet's
// last drawer after the sweep read it fully acknowledged. Acknowledged
// positions below the drawer's end as the sweep read it may be gone (a
// store may delete pages before its catalog write); the rest stays.
func sweepRefusesChangedCatalog(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(2, r, domain.OriginCharges, "c")...)
	done := s.acknowledge(r, s.create(r, s.record(domain.OriginCharges, "c", 0, 2)))
	st := s.load(r)
	e := s.entry(r, domain.OriginCharges, "c")
	sw := store.Sweep{
		Recipient:     r,
		Bundles:       []bundle.Record{{ID: done.ID}},
		Drawers:       []string{e.Drawers[0].ID},
		DrawerEnds:    map[string]int64{e.Drawers[0].ID: 2},
		DeleteEntries: []catalog.Entry{e},
		DeleteCursors: []catalog.Cursor{cursorOf(st, domain.OriginCharges, "c")},
	}
	late := note(r, domain.OriginCharges, "c")
	s.commit(late)
	if s.entry(r, domain.OriginCharges, "c").Drawers[0].ID != e.Drawers[0].ID {
		t.Fatal("the save opened a drawer instead of appending") // the setup is not what the test means
	}
	expectConflict(t, "entry changed", s.store.ApplySweep(ctx(t), sw))
	if !s.exists(r, done.ID) {
		t.Fatal("a refused sweep removed a bundle")
	}
	if got := s.readable(r); got[late.ID].ID != late.ID {
		t.Fatalf("a refused sweep left %d items readable, without the one saved after it read the catalog", len(got))
	}
	if found := s.lookup(late.ID); len(found) != 1 {
		t.Fatal("a refused sweep removed the id record of a notification not acknowledged")
	}
	// A sweep on a changed cursor is refused too.
	st = s.load(r)
	cur := cursorOf(st, domain.OriginCharges, "c")
	cur.Version = "stale"
	sw = store.Sweep{Recipient: r, DeleteEntries: []catalog.Entry{s.entry(r, domain.OriginCharges, "c")}, DeleteCursors: []catalog.Cursor{cur}}
	expectConflict(t, "cursor changed", s.store.ApplySweep(ctx(t), sw))
	if got := len(s.load(r).Entries); got != 1 {
		t.Fatalf("a refused sweep deleted the entry (%d left)", got)
	}
}

func backlogSums(t *testing.T, s *storeEnv) {
	empty, err := sumBacklog(ctx(t), s.store)
	if err != nil || empty.Recipients != 0 || len(empty.ByOrigin) != 0 {
		t.Fatalf("an empty store has a backlog %+v (%v)", empty, err)
	}
	a, b := newRecipient(), newRecipient()
	s.commit(notes(4, a, domain.OriginCharges, "c")...)
	s.commit(notes(2, a, domain.OriginTimeSeries, "t")...)
	s.commit(notes(3, b, domain.OriginCharges, "c")...)
	s.acknowledge(a, s.create(a, s.record(domain.OriginCharges, "c", 0, 3)))
	s.acknowledge(a, s.create(a, s.record(domain.OriginTimeSeries, "t", 0, 2)))
	var want store.Backlog
	for _, r := range []string{a, b} {
		st := s.load(r)
		want.Add(st.Entries, st.Cursors)
	}
	got, err := sumBacklog(ctx(t), s.store)
	if err != nil {
		t.Fatal(err)
	}
	if got.Recipients != 2 || got.ByOrigin[domain.OriginCharges].Notifications != 4 || got.ByOrigin[domain.OriginTimeSeries].Notifications != 0 {
		t.Fatalf("backlog %+v; want 2 recipients, 1+3 charges, no time series", got)
	}
	if !got.ByOrigin[domain.OriginCharges].Oldest.Equal(want.ByOrigin[domain.OriginCharges].Oldest) {
		t.Fatalf("oldest charge %v, the catalog says %v", got.ByOrigin[domain.OriginCharges].Oldest, want.ByOrigin[domain.OriginCharges].Oldest)
	}
}

// outboxNotices checks the notices of stores that keep them: written by
// Acknowledge in the same atomic write, oldest first, until removed.
func outboxNotices(t *testing.T, s *storeEnv) {
	an := s.store
	r := newRecipient()
	s.commit(notes(4, r, domain.OriginCharges, "c")...)
	ack := func(rec bundle.Record, notice bool) bundle.Record {
		t.Helper()
		rec, cur := s.dequeued(r, rec)
		rec.Notice = notice
		if err := s.store.Acknowledge(ctx(t), r, rec, cur); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	first := ack(s.create(r, s.record(domain.OriginCharges, "c", 0, 1)), true)
	ack(s.create(r, s.record(domain.OriginCharges, "c", 1, 2)), false)
	// A refused acknowledge writes no notice.
	refused := s.create(r, s.record(domain.OriginCharges, "c", 2, 3))
	rec, cur := s.dequeued(r, refused)
	rec.Notice, cur.Version = true, "stale"
	expectConflict(t, "cursor moved", s.store.Acknowledge(ctx(t), r, rec, cur))
	s.clock.Advance(time.Second)
	second := ack(refused, true)

	notices, err := an.Notices(ctx(t), domain.Origins, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range notices {
		if n.Recipient != r {
			t.Fatalf("notice for %s, want %s", n.Recipient, r)
		}
		got = append(got, n.BundleID)
	}
	expectIDs(t, "notices, oldest first", got, []string{first.ID, second.ID})
	if !notices[0].DequeuedAt.Equal(first.DequeuedAt) {
		t.Fatalf("notice made at %v, the bundle was dequeued at %v", notices[0].DequeuedAt, first.DequeuedAt)
	}
	if limited, err := an.Notices(ctx(t), domain.Origins, 1); err != nil || len(limited) != 1 || limited[0].BundleID != first.ID {
		t.Fatalf("one notice: got %+v (%v), want the oldest", limited, err)
	}
	n, oldest, err := an.NoticeBacklog(ctx(t))
	if err != nil || n != 2 || !oldest.Equal(first.DequeuedAt) {
		t.Fatalf("notice backlog %d, oldest %v (%v); want 2, %v", n, oldest, err, first.DequeuedAt)
	}
	missing := store.Notice{Recipient: r, BundleID: uuid.NewString(), DequeuedAt: first.DequeuedAt}
	if err := an.RemoveNotices(ctx(t), []store.Notice{notices[0], missing}); err != nil {
		t.Fatal(err)
	}
	if left, err := an.Notices(ctx(t), domain.Origins, 10); err != nil || len(left) != 1 || left[0].BundleID != second.ID {
		t.Fatalf("after removing the first: %+v (%v)", left, err)
	}
}

// outboxNoticesInTurn: a call that cannot list every notice leaves the
// next call to go on after the ones it listed, so a caller that keeps
// skipping the first notices it is given (their bundles cannot be read)
// still reaches the ones after them.
func outboxNoticesInTurn(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(3, r, domain.OriginCharges, "c")...)
	all := map[string]bool{}
	for i := range int64(3) {
		rec, cur := s.dequeued(r, s.create(r, s.record(domain.OriginCharges, "c", i, i+1)))
		rec.Notice = true
		if err := s.store.Acknowledge(ctx(t), r, rec, cur); err != nil {
			t.Fatal(err)
		}
		all[rec.ID] = true
		s.clock.Advance(time.Second)
	}
	origins := []domain.Origin{domain.OriginCharges}
	listed := map[string]bool{}
	for call := range 2 {
		notices, err := s.store.Notices(ctx(t), origins, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(notices) != 2 || notices[0].BundleID == notices[1].BundleID {
			t.Fatalf("call %d listed %+v; want two notices of the three", call+1, notices)
		}
		for _, n := range notices {
			listed[n.BundleID] = true
		}
	}
	if len(listed) != len(all) {
		t.Fatalf("two calls of two listed %d of the %d notices; want the second to go on after the first's", len(listed), len(all))
	}
}

// outboxNoticesOfDomainsInTurn: calls for several domains take turns
// over all their notices too: however many notices of one domain are
// older, a caller that leaves every notice in the outbox (their bundles
// cannot be read) has each listed again within about ⌈backlog / limit⌉
// calls (store.Outbox), the newest domain's as well.
func outboxNoticesOfDomainsInTurn(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(3, r, domain.OriginCharges, "c")...)
	s.commit(notes(1, r, domain.OriginMeteringPoints, "m")...)
	var all []string
	dequeue := func(origin domain.Origin, contentType string, i int64) {
		rec, cur := s.dequeued(r, s.create(r, s.record(origin, contentType, i, i+1)))
		rec.Notice = true
		if err := s.store.Acknowledge(ctx(t), r, rec, cur); err != nil {
			t.Fatal(err)
		}
		all = append(all, rec.ID)
		s.clock.Advance(time.Second)
	}
	for i := range int64(3) {
		dequeue(domain.OriginCharges, "c", i)
	}
	dequeue(domain.OriginMeteringPoints, "m", 0) // the newest
	origins := []domain.Origin{domain.OriginCharges, domain.OriginMeteringPoints}
	const (
		calls  = 8
		within = 3 // ⌈4 / 2⌉ and one more
	)
	last := map[string]int{} // the call that last listed each notice
	for call := 1; call <= calls; call++ {
		notices, err := s.store.Notices(ctx(t), origins, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(notices) != 2 {
			t.Fatalf("call %d listed %+v; want two notices of the four", call, notices)
		}
		for _, n := range notices {
			last[n.BundleID] = call
		}
		for i, id := range all {
			if call-last[id] >= within {
				t.Fatalf("call %d: notice %d of 4 (oldest first) was last listed by call %d; want every notice within %d calls of two, whatever its domain",
					call, i+1, last[id], within)
			}
		}
	}
}

// outboxNoticesOfAReusedID: a bundle id is free again once a sweep removed
// its record. The notice of its dequeue goes with the record (the embedded
// store) or stays until it is removed or its ttl ends (Cosmos DB). A
// dequeue of a new bundle under the id writes a notice of its own, beside
// the old one if that stays (each with its own dequeue time), the old
// one's removal leaves the new one, and the id's record is the new
// dequeue's.
func outboxNoticesOfAReusedID(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(2, r, domain.OriginCharges, "c")...)
	ack := func(rec bundle.Record) bundle.Record {
		t.Helper()
		rec, cur := s.dequeued(r, rec)
		rec.Notice = true
		if err := s.store.Acknowledge(ctx(t), r, rec, cur); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	old := ack(s.create(r, s.record(domain.OriginCharges, "c", 0, 1)))
	s.sweepDue(t, r, old)
	reused := s.record(domain.OriginCharges, "c", 1, 2)
	reused.ID = old.ID
	renewed := ack(s.create(r, reused))

	notices, err := s.store.Notices(ctx(t), []domain.Origin{domain.OriginCharges}, 10)
	if err != nil {
		t.Fatal(err)
	}
	var mine []store.Notice
	for _, n := range notices {
		if n.Recipient == r {
			mine = append(mine, n)
		}
	}
	if len(mine) == 1 { // the old notice went with its record
		mine = append([]store.Notice{{Recipient: r, BundleID: old.ID, Origin: old.Origin, DequeuedAt: old.DequeuedAt}}, mine...)
	}
	if len(mine) != 2 || mine[0].BundleID != old.ID || mine[1].BundleID != old.ID ||
		mine[0].DequeuedAt.UnixMicro() != old.DequeuedAt.UnixMicro() || mine[1].DequeuedAt.UnixMicro() != renewed.DequeuedAt.UnixMicro() {
		t.Fatalf("notices of the reused id: %+v; want the old dequeue's (%v), unless it went with its record, and the new one's (%v), oldest first", mine, old.DequeuedAt, renewed.DequeuedAt)
	}
	if rec, err := s.store.DequeuedBundle(ctx(t), r, old.ID); err != nil || rec.DequeuedAt.UnixMicro() != renewed.DequeuedAt.UnixMicro() {
		t.Fatalf("the id's record: %+v (%v), want the new dequeue's", rec, err)
	}
	if err := s.store.RemoveNotices(ctx(t), mine[:1]); err != nil {
		t.Fatal(err)
	}
	left, err := s.store.Notices(ctx(t), []domain.Origin{domain.OriginCharges}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(left, func(n store.Notice) bool { return n.Recipient == r }); i < 0 ||
		left[i].DequeuedAt.UnixMicro() != renewed.DequeuedAt.UnixMicro() ||
		slices.ContainsFunc(left[i+1:], func(n store.Notice) bool { return n.Recipient == r }) {
		t.Fatalf("after removing the old notice: %+v; want the new one alone", left)
	}
}

// race runs fns at once and returns their errors.
func race(fns ...func() error) []error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, fn := range fns {
		wg.Go(func() {
			<-start
			errs[i] = fn()
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// oneWins checks that exactly one of errs is nil and every other one a
// conflict, and returns the winner's index.
func oneWins(t *testing.T, what string, errs []error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("%s: %d and %d both succeeded", what, winner, i)
		case err == nil:
			winner = i
		default:
			expectConflict(t, what, err)
		}
	}
	if winner < 0 {
		t.Fatalf("%s: none of %d succeeded", what, len(errs))
	}
	return winner
}

const racers = 6

// Saves planned on the same head race: one commits, the others are refused
// and leave nothing behind.
func commitOneWins(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(note(r, domain.OriginCharges, "c"))
	before := s.readable(r)
	plans := make([]store.RecipientSave, racers)
	fns := make([]func() error, racers)
	for i := range plans {
		plans[i] = s.plan(r, note(r, domain.OriginCharges, "c"), note(r, domain.OriginTimeSeries, "t"))
		fns[i] = func() error { return s.store.CommitSaves(ctx(t), []store.RecipientSave{plans[i]}) }
	}
	w := oneWins(t, "saves on one head", race(fns...))
	got := s.readable(r)
	for i, p := range plans {
		for _, rec := range p.IDs {
			_, readable := got[rec.ID]
			_, indexed := s.lookup(rec.ID)[rec.ID]
			if readable != (i == w) || indexed != (i == w) {
				t.Fatalf("save %d (winner %d): readable %v, indexed %v", i, w, readable, indexed)
			}
		}
	}
	if len(got) != len(before)+2 {
		t.Fatalf("%d items readable, want %d", len(got), len(before)+2)
	}
}

// Saves of one id for different recipients race (as on several instances):
// at most one stores it, and the id points where that one put it.
func commitOneIDOnce(t *testing.T, s *storeEnv) {
	for round := range 3 {
		shared := uuid.NewString()
		plans := make([]store.RecipientSave, racers)
		fns := make([]func() error, racers)
		for i := range plans {
			r := newRecipient()
			n := note(r, domain.OriginCharges, "c")
			n.ID = shared
			plans[i] = s.plan(r, n, note(r, domain.OriginCharges, "c"))
			fns[i] = func() error { return s.store.CommitSaves(ctx(t), []store.RecipientSave{plans[i]}) }
		}
		winner := -1
		for i, err := range race(fns...) {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: saves %d and %d both stored id %s", round, winner, i, shared)
			case err == nil:
				winner = i
			default:
				expectConflict(t, "a save of a stored id", err)
			}
		}
		found := s.lookup(shared)
		if winner < 0 {
			if len(found) != 0 {
				t.Fatalf("round %d: no save succeeded, yet the id is stored", round)
			}
			continue
		}
		if got, want := found[shared], plans[winner].IDs[0]; got.DrawerID != want.DrawerID || got.Fingerprint != want.Fingerprint {
			t.Fatalf("round %d: the id points at %+v, the winner wrote %+v", round, got, want)
		}
		for i, p := range plans {
			if _, ok := s.lookup(p.IDs[1].ID)[p.IDs[1].ID]; ok != (i == winner) {
				t.Fatalf("round %d: save %d's other id stored: %v (winner %d)", round, i, ok, winner)
			}
		}
	}
}

// Bundles cut from one state race for the group: one is created.
func createOneWins(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(2, r, domain.OriginCharges, "c")...)
	s.commit(note(r, domain.OriginMarketRoles, "m"))
	st := s.load(r)
	recs := make([]bundle.Record, racers)
	fns := make([]func() error, racers)
	for i := range recs {
		recs[i] = s.record(domain.OriginCharges, "c", 0, int64(1+i%2))
		if i%3 == 2 { // another cabinet of the same group
			recs[i] = s.record(domain.OriginMarketRoles, "m", 0, 1)
		}
		cur := cursorOf(st, recs[i].Origin, recs[i].ContentType)
		fns[i] = func() error { return s.store.CreateBundle(ctx(t), r, recs[i], cur) }
	}
	w := oneWins(t, "bundles in one group", race(fns...))
	if pending := s.load(r).Pending; len(pending) != 1 || !sameRecord(pending[0], recs[w]) {
		t.Fatalf("pending %+v, want only the winner %+v", pending, recs[w])
	}
}

// Dequeues of one bundle race: one acknowledges it, the others are refused.
func acknowledgeOneWins(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(2, r, domain.OriginCharges, "c")...)
	rec := s.create(r, s.record(domain.OriginCharges, "c", 0, 1))
	recs := make([]bundle.Record, racers)
	fns := make([]func() error, racers)
	for i := range recs {
		var cur catalog.Cursor
		recs[i], cur = s.dequeued(r, rec) // each its own moment
		fns[i] = func() error { return s.store.Acknowledge(ctx(t), r, recs[i], cur) }
	}
	w := oneWins(t, "dequeues of one bundle", race(fns...))
	dequeued, err := s.store.DequeuedBundles(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	if len(dequeued) != 1 || !sameRecord(dequeued[0], recs[w]) {
		t.Fatalf("dequeued %+v, want only the winner's %+v", dequeued, recs[w])
	}
	if cur := cursorOf(s.load(r), domain.OriginCharges, "c"); cur.Acked != 1 {
		t.Fatalf("cursor at %d, want 1", cur.Acked)
	}
}

// staleSweepSparesANewDequeueOfItsID: two sweeps read the same due bundle
// (the sweeper's turn and an operator's SweepNow); the first deletes it,
// the id is peeked and dequeued again, and the second applies its plan. It
// deletes the record it read, at its version, never the new dequeue's
// (deleted by id, the new record went before its retention, its notice
// named a bundle that was gone, and drawers only it kept were kept by
// nothing any more).
func staleSweepSparesANewDequeueOfItsID(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(2, r, domain.OriginCharges, "c")...)
	old := s.acknowledge(r, s.create(r, s.record(domain.OriginCharges, "c", 0, 1)))
	due := s.sweepDue(t, r, old)
	reused := s.record(domain.OriginCharges, "c", 1, 2)
	reused.ID = old.ID
	renewed := s.acknowledge(r, s.create(r, reused))
	// The second sweep, planned on the same read.
	if err := s.store.ApplySweep(ctx(t), store.Sweep{Recipient: r, Bundles: due.Bundles}); err != nil && !errors.Is(err, store.ErrConflict) {
		t.Fatalf("the stale sweep: %v; want nothing done or a conflict", err)
	}
	rec, err := s.store.DequeuedBundle(ctx(t), r, old.ID)
	if err != nil || rec.DequeuedAt.UnixMicro() != renewed.DequeuedAt.UnixMicro() {
		t.Fatalf("the id's record after a stale sweep: %+v (%v); want the new dequeue's, retained", rec, err)
	}
	later, err := s.store.LoadRetention(ctx(t), r, renewed.DequeuedAt.Add(time.Millisecond), time.Time{})
	if err != nil || len(later.Bundles) != 1 || later.Bundles[0].ID != old.ID {
		t.Fatalf("retention reads %+v (%v), want the new dequeue due once its time comes", later.Bundles, err)
	}
}

// sweepDue lets an hour pass, reads the recipient's retention, which must
// find old alone due, and sweeps it, so that its id is free again; it
// returns what the sweep read.
func (s *storeEnv) sweepDue(t *testing.T, r string, old bundle.Record) store.RetentionState {
	t.Helper()
	s.clock.Advance(time.Hour)
	due, err := s.store.LoadRetention(ctx(t), r, old.DequeuedAt.Add(time.Millisecond), time.Time{})
	if err != nil || len(due.Bundles) != 1 || due.Bundles[0].ID != old.ID {
		t.Fatalf("retention reads %+v (%v), want the old bundle due", due.Bundles, err)
	}
	if err := s.store.ApplySweep(ctx(t), store.Sweep{Recipient: r, Bundles: due.Bundles}); err != nil {
		t.Fatal(err)
	}
	if s.exists(r, old.ID) {
		t.Fatal("the swept bundle still exists: its id is not free, the test tests nothing")
	}
	return due
}
