package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
)

// RunIdle checks the cheaper loads of LoadRecipient and the idle mark
// (store.MayBeIdle, store.MayLag, Store.MarkIdle), on the store and through
// the hub. A store may keep no mark (then it never answers Idle); one that
// keeps them answers Idle only at the recipient's current head, after a mark
// or a drain through its own Peeks' loads and Dequeues, and that never hides
// what a later save stores or a release gives back. Every backend's tests
// call it.
func RunIdle(t *testing.T, newStore Factory) {
	run := func(name string, test func(*testing.T, *storeEnv)) {
		t.Run(name, func(t *testing.T) {
			test(t, &storeEnv{t: t, store: open(t, newStore), clock: newClock()})
		})
	}
	run("AnUnknownRecipientHasNothingWhenItMayBeIdle", idleUnknownRecipient)
	run("NoIdleAnswerWithoutAMark", idleNeedsAMark)
	run("AMarkAtTheCurrentHeadHidesNothingAFullLoadShows", idleMarkAtCurrentHead)
	run("ASaveAfterTheMarkIsSeen", idleEndsWithASave)
	run("AStaleMarkChangesNothing", idleStaleMark)
	run("AReleasedBundleMakesTheRecipientWaitAgain", idleEndsWithARelease)
	run("ALaggingLoadHoldsTheStoresOwnWrites", lagHoldsOwnWrites)
	run("ACatalogOnlyLoadHoldsTheHeadAndEntriesOfAFullOne", catalogOnlyHoldsHeadAndEntries)
	h := &harness{newStore: newStore}
	t.Run("PeeksOfAnIdleRecipientSeeEverySaveAfterIt", h.idlePeeksSeeLaterSaves)
	t.Run("AnIdleRecipientsUsedBundleIDsStayUsed", h.idleKeepsUsedBundleIDs)
}

// mayBeIdle loads the recipient with store.MayBeIdle and checks what any
// Idle answer promises: nothing read but the head.
func (s *storeEnv) mayBeIdle(recipient string) store.RecipientState {
	s.t.Helper()
	st, err := s.store.LoadRecipient(ctx(s.t), recipient, store.MayBeIdle)
	if err != nil {
		s.t.Fatalf("load %s (may be idle): %v", recipient, err)
	}
	if st.Idle && len(st.Entries)+len(st.Cursors)+len(st.Pending) > 0 {
		s.t.Fatalf("an idle answer carries records: %+v", st)
	}
	return st
}

// drained commits n notifications for a new recipient and acknowledges
// them in one bundle: a recipient with a head, an entry and a cursor, and
// nothing waiting.
func (s *storeEnv) drained(n int) string {
	s.t.Helper()
	r := newRecipient()
	s.commit(notes(n, r, domain.OriginCharges, "c")...)
	s.acknowledge(r, s.create(r, s.record(domain.OriginCharges, "c", 0, int64(n))))
	return r
}

// mark marks the recipient idle at its head as a full load shows it now;
// with nothing changing meanwhile the store must not refuse it.
func (s *storeEnv) mark(recipient string) store.RecipientState {
	s.t.Helper()
	st := s.load(recipient)
	if err := s.store.MarkIdle(ctx(s.t), recipient, st.Head); err != nil {
		s.t.Fatalf("mark %s idle at its current head: %v", recipient, err)
	}
	return st
}

// waiting counts the positions the state's cabinets hold after their
// cursors.
func waiting(st store.RecipientState) int64 {
	var n int64
	for _, e := range st.Entries {
		n += drawer.Held(e.Drawers, cursorOf(st, e.Origin, e.ContentType).Acked)
	}
	return n
}

func idleUnknownRecipient(t *testing.T, s *storeEnv) {
	st := s.mayBeIdle(newRecipient())
	if st.Head != (store.Head{}) {
		t.Fatalf("a recipient never seen has head %+v", st.Head)
	}
}

func idleNeedsAMark(t *testing.T, s *storeEnv) {
	r := s.drained(3)
	if st := s.mayBeIdle(r); st.Idle || len(st.Entries) != 1 || len(st.Cursors) != 1 {
		t.Fatalf("a drained recipient never marked: %+v; want its entry and cursor, not idle", st)
	}
}

func idleMarkAtCurrentHead(t *testing.T, s *storeEnv) {
	r := s.drained(3)
	before := s.mark(r)
	st := s.mayBeIdle(r)
	t.Logf("idle answer after a mark: %v", st.Idle)
	if st.Idle && (st.Head.NextSeq != before.Head.NextSeq || st.Head.Watermark != before.Head.Watermark) {
		t.Fatalf("the idle answer's head %+v, want the numbers of %+v", st.Head, before.Head)
	}
	// Only a load that may be idle gets an idle answer.
	full := s.load(r)
	if full.Idle || len(full.Entries) != 1 || len(full.Cursors) != 1 || waiting(full) != 0 {
		t.Fatalf("a full load after the mark: %+v", full)
	}
}

func idleEndsWithASave(t *testing.T, s *storeEnv) {
	r := s.drained(3)
	s.mark(r)
	s.commit(notes(2, r, domain.OriginCharges, "c")...)
	st := s.mayBeIdle(r)
	if st.Idle || waiting(st) != 2 || st.Head.Watermark != st.Head.NextSeq-1 {
		t.Fatalf("after a save that followed the mark: %+v; want 2 waiting and not idle", st)
	}
	// A save to a cabinet the mark never saw is seen as well.
	s.mark(r) // a misuse (2 are waiting) the store cannot tell: the head stays the judge
	s.commit(notes(1, r, domain.OriginTimeSeries, "t")...)
	if st := s.mayBeIdle(r); st.Idle || len(st.Entries) != 2 {
		t.Fatalf("after a save to a new cabinet: %+v", st)
	}
}

func idleStaleMark(t *testing.T, s *storeEnv) {
	r := s.drained(3)
	stale := s.load(r)
	s.commit(notes(2, r, domain.OriginCharges, "c")...)
	err := s.store.MarkIdle(ctx(t), r, stale.Head)
	t.Logf("a mark at a head that changed: %v", err)
	if st := s.mayBeIdle(r); st.Idle || waiting(st) != 2 {
		t.Fatalf("after a stale mark: %+v; want the 2 waiting", st)
	}
	// Nor does a mark at a head whose save is not finished (watermark
	// below its last sequence number).
	unfinished := stale.Head
	unfinished.Watermark--
	if err := s.store.MarkIdle(ctx(t), r, unfinished); err != nil && !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a mark of a head under a save: %v", err)
	}
	if st := s.mayBeIdle(r); st.Idle {
		t.Fatalf("after a mark of a head under a save: %+v", st)
	}
}

func idleEndsWithARelease(t *testing.T, s *storeEnv) {
	r := s.drained(3)
	s.mark(r)
	s.commit(notes(2, r, domain.OriginCharges, "c")...)
	rec := s.create(r, s.record(domain.OriginCharges, "c", 3, 5))
	if err := s.store.ReleaseBundle(ctx(t), r, s.released(rec)); err != nil {
		t.Fatal(err)
	}
	st := s.mayBeIdle(r)
	if st.Idle || len(st.Pending) != 0 || waiting(st) != 2 {
		t.Fatalf("after the release: %+v; want its 2 notifications waiting again", st)
	}
}

func lagHoldsOwnWrites(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(3, r, domain.OriginCharges, "c")...)
	rec := s.create(r, s.record(domain.OriginCharges, "c", 0, 2))
	st, err := s.store.LoadRecipient(ctx(t), r, store.MayLag)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(st.Pending, func(p bundle.Record) bool { return p.ID == rec.ID })
	if st.Idle || i < 0 || len(st.Entries) != 1 || st.Head.NextSeq != 4 {
		t.Fatalf("a lagging load after this store's writes: %+v", st)
	}
	// Its versions are the stored ones: the acknowledge they lead to holds.
	done, cur := s.dequeued(r, st.Pending[i])
	cur.Version = cursorOf(st, domain.OriginCharges, "c").Version
	if err := s.store.Acknowledge(ctx(t), r, done, cur); err != nil {
		t.Fatalf("acknowledge on a lagging load's versions: %v", err)
	}
}

// catalogOnlyHoldsHeadAndEntries: a save's load (store.CatalogOnly, with
// and without store.MayLag) holds the head and the entries of a full load,
// at their versions, so the writes planned on it hold; cursors and pending
// bundles it may leave out.
func catalogOnlyHoldsHeadAndEntries(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(3, r, domain.OriginCharges, "c")...)
	s.commit(notes(2, r, domain.OriginTimeSeries, "t")...)
	s.create(r, s.record(domain.OriginCharges, "c", 0, 2))
	full, err := s.store.LoadRecipient(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]store.LoadOption{{store.CatalogOnly}, {store.CatalogOnly, store.MayLag}} {
		st, err := s.store.LoadRecipient(ctx(t), r, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if st.Idle || st.Head != full.Head || !sameEntries(st.Entries, full.Entries) {
			t.Fatalf("a catalog-only load (%d options): head %+v, entries %+v; a full load: head %+v, entries %+v",
				len(opts), st.Head, st.Entries, full.Head, full.Entries)
		}
	}
}

// sameEntries says whether a and b hold the same entries, in any order.
func sameEntries(a, b []catalog.Entry) bool {
	key := func(e catalog.Entry) string { return fmt.Sprintf("%d/%s", e.Origin, e.ContentType) }
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, func(x, y catalog.Entry) int { return strings.Compare(key(x), key(y)) })
	slices.SortFunc(b, func(x, y catalog.Entry) int { return strings.Compare(key(x), key(y)) })
	return slices.EqualFunc(a, b, func(x, y catalog.Entry) bool {
		return key(x) == key(y) && x.Total == y.Total && x.Version == y.Version && slices.Equal(x.Drawers, y.Drawers)
	})
}

// idleLooks peeks the recipient's empty state a few times, as a polling
// actor does: enough for the hub to mark it idle.
func (e *env) idleLooks(recipient string) {
	e.t.Helper()
	for range 3 {
		if b := e.peek(recipient, domain.GroupAll, ""); b != nil {
			e.t.Fatalf("peek of a drained recipient: %v", b.NotificationIDs)
		}
	}
	st, err := e.store.LoadRecipient(ctx(e.t), recipient, store.MayBeIdle)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Logf("after %s's empty peeks, idle: %v", recipient, st.Idle)
}

func (h *harness) idlePeeksSeeLaterSaves(t *testing.T) {
	e := h.env(t, hub.Options{})
	r := newRecipient()
	e.save(notes(3, r, domain.OriginCharges, "c")...)
	e.drain(r, domain.GroupAll)
	for round := range 3 {
		e.idleLooks(r)
		ns := notes(1+round, r, domain.OriginTimeSeries, "t")
		e.save(ns...)
		expectIDs(t, "the save after the idle peeks", e.drain(r, domain.GroupAll), ids(ns))
	}
	if err := e.repo.Dequeue(ctx(t), r, uuid.NewString()); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("dequeue of an unknown bundle of an idle recipient: %v", err)
	}
}

func (h *harness) idleKeepsUsedBundleIDs(t *testing.T) {
	e := h.env(t, hub.Options{})
	r := newRecipient()
	ns := notes(2, r, domain.OriginCharges, "c")
	e.save(ns...)
	dequeued, released := uuid.NewString(), uuid.NewString()
	b := e.peek(r, domain.GroupAll, released)
	if _, err := e.repo.ReleaseBundle(ctx(t), r, b.ID); err != nil {
		t.Fatal(err)
	}
	b = e.peek(r, domain.GroupAll, dequeued)
	expectIDs(t, "the peek after the release", b.NotificationIDs, ids(ns))
	e.dequeue(r, dequeued)
	e.idleLooks(r)
	for _, id := range []string{dequeued, released} {
		if _, err := e.repo.Peek(ctx(t), r, domain.GroupAll, id); !errors.Is(err, domain.ErrBundleIDInUse) {
			t.Fatalf("peek of an idle recipient naming a used id: %v", err)
		}
	}
	if b := e.peek(r, domain.GroupAll, uuid.NewString()); b != nil {
		t.Fatalf("peek with a new id: %v", b.NotificationIDs)
	}
}
