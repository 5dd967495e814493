package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
)

// RunRepository checks the algorithm: a Repository over the store behaves as
// MessageHub promises its callers (save, peek, dequeue, order, idempotency,
// retention). Every backend's tests call it.
func RunRepository(t *testing.T, newStore Factory) {
	h := &harness{newStore: newStore}
	t.Run("SavesAndReadsBackEveryFieldInOrder", h.savesAndReadsBack)
	t.Run("DrawerNeverExceedsCapacity", h.drawerNeverExceedsCapacity)
	t.Run("ABundleOfManyDocumentTypesIsStoredWithoutThemAndAnsweredWithAll", h.manyDocumentTypes)
	t.Run("CabinetBoundRefusesOnlyTheSaveThatNeedsMoreDrawers", h.cabinetBound)
	t.Run("AcknowledgedDrawersLeaveTheEntryButNotTheirBundles", h.acknowledgedDrawersLeave)
	t.Run("AcknowledgedDrawerLeavesALiveCabinet", h.acknowledgedDrawerLeavesALiveCabinet)
	t.Run("DuplicatesAreStoredOnce", h.duplicatesStoredOnce)
	t.Run("ConflictingIDRejectsWholeSave", h.conflictingIDRejectsWholeSave)
	t.Run("SmallestHeadAcrossCabinetsWins", h.smallestHeadWins)
	t.Run("PeekGroupsAreHonoured", h.peekGroupsHonoured)
	t.Run("WatermarkHidesUnfinishedSave", h.watermarkHidesUnfinishedSave)
	t.Run("BundlingStopsWithoutSkipping", h.bundlingStopsWithoutSkipping)
	t.Run("TakeOneOfFiveThenAcknowledge", h.takeOneOfFive)
	t.Run("SaveBetweenPeekAndDequeueIsDeliveredOnce", h.saveBetweenPeekAndDequeue)
	t.Run("ThreeGroupsPendingDequeuedInAnyOrder", h.threeGroupsPending)
	t.Run("PeekIsIdempotent", h.peekIsIdempotent)
	t.Run("ConcurrentPeeksShareOneBundle", h.concurrentPeeksShareOneBundle)
	t.Run("AllPeekHeldWhileAGroupPeeksKeepsBothBundlesApart", h.allPeekHeldWhileAGroupPeeks)
	t.Run("GroupPeekHeldWhileAllPeeksKeepsBothBundlesApart", h.groupPeekHeldWhileAllPeeks)
	t.Run("PeeksOfOneGroupRacingShareTheWinner", h.peeksOfOneGroupRacingShareTheWinner)
	t.Run("PeekAfterDequeueNeverReturnsIt", h.peekAfterDequeue)
	t.Run("IsPendingFollowsTheBundle", h.isPending)
	t.Run("BacklogSumsWhatIsNotDequeued", h.backlog)
	t.Run("ConcurrentSavesKeepOrder", h.concurrentSavesKeepOrder)
	t.Run("BundleIDRules", h.bundleIDRules)
	t.Run("DequeueNotFound", h.dequeueNotFound)
	t.Run("FullBundleSpansDrawers", h.fullBundleSpansDrawers)
	t.Run("APeekHeldWhileItsCabinetIsDrainedTakenOutAndStartedAgainDeliversNothingTwice", h.peekHeldAcrossACabinetsRestart)
	t.Run("RetentionRemovesOnlyAcknowledged", h.retention)
	t.Run("AnAcknowledgedNotificationOfACabinetNeverDrainedGoesWithinTwiceTheRetention", h.neverDrainedCabinet)
	t.Run("ReleaseAndAcknowledgeOnBehalf", h.remedies)
	t.Run("AcknowledgeOnBehalfInBoundedCalls", h.acknowledgeInBoundedCalls)
}

type harness struct{ newStore Factory }

type env struct {
	t     *testing.T
	store store.Store
	repo  *hub.Hub
	clock *clock
}

func (h *harness) env(t *testing.T, opts hub.Options) *env {
	t.Helper()
	return h.envOver(t, opts, nil)
}

// envOver is env with the hub over wrap(store) when wrap is not nil, so a
// test can hold a store call; env.store is the store itself.
func (h *harness) envOver(t *testing.T, opts hub.Options, wrap func(store.Store) store.Store) *env {
	t.Helper()
	store := open(t, h.newStore)
	c := newClock()
	if opts.Now == nil {
		opts.Now = c.Now
	}
	opts.SweepInterval = time.Hour // sweeps are run by hand in tests
	under := store
	if wrap != nil {
		under = wrap(store)
	}
	repo := hub.New(under, opts, nil)
	// Cleanups run last in, first out: the repository stops before open's
	// cleanup closes the store.
	t.Cleanup(repo.Close)
	return &env{t: t, store: store, repo: repo, clock: c}
}

func (e *env) save(ns ...domain.Notification) domain.SaveResult {
	e.t.Helper()
	res, err := e.repo.Save(ctx(e.t), ns)
	if err != nil {
		e.t.Fatalf("save: %v", err)
	}
	return res
}

func (e *env) peek(recipient string, group domain.PeekGroup, bundleID string) *domain.Bundle {
	e.t.Helper()
	b, err := e.repo.Peek(ctx(e.t), recipient, group, bundleID)
	if err != nil {
		e.t.Fatalf("peek: %v", err)
	}
	return b
}

func (e *env) dequeue(recipient, bundleID string) {
	e.t.Helper()
	if err := e.repo.Dequeue(ctx(e.t), recipient, bundleID); err != nil {
		e.t.Fatalf("dequeue %s: %v", bundleID, err)
	}
}

// bundleExists asks the store; a failing store fails the test rather than
// answering "no".
func (e *env) bundleExists(recipient, bundleID string) bool {
	e.t.Helper()
	exists, err := e.store.BundleExists(ctx(e.t), recipient, bundleID)
	if err != nil {
		e.t.Fatalf("bundle exists %s: %v", bundleID, err)
	}
	return exists
}

// drain peeks and dequeues until nothing is left and returns every
// delivered notification id in delivery order.
func (e *env) drain(recipient string, group domain.PeekGroup) []string {
	e.t.Helper()
	var got []string
	for range 100_000 {
		b := e.peek(recipient, group, "")
		if b == nil {
			return got
		}
		got = append(got, b.NotificationIDs...)
		e.dequeue(recipient, b.ID)
	}
	e.t.Fatal("drain did not finish")
	return nil
}

func (h *harness) savesAndReadsBack(t *testing.T) {
	for _, n := range []int{1, 2, 10_000, 10_001} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			e := h.env(t, hub.Options{})
			r := newRecipient()
			ns := notes(n, r, domain.OriginCharges, "application:json")
			for i := range ns {
				ns[i].DocumentType = fmt.Sprintf("doc-%d", i%3)
				ns[i].Weight = int64(1 + i%4)
				ns[i].SupportsBundling = true
			}
			var saved int
			for chunk := range slices.Chunk(ns, domain.MaxNotificationsPerSave) {
				saved += e.save(chunk...).Saved
			}
			if saved != n {
				t.Fatalf("saved %d, want %d", saved, n)
			}
			// Every stored field, straight from the drawers.
			state, err := e.store.LoadRecipient(ctx(t), r)
			if err != nil {
				t.Fatal(err)
			}
			if len(state.Entries) != 1 {
				t.Fatalf("got %d catalog entries, want 1", len(state.Entries))
			}
			entry := state.Entries[0]
			if wantDrawers := (n + drawer.Capacity - 1) / drawer.Capacity; len(entry.Drawers) != wantDrawers {
				t.Fatalf("got %d drawers, want %d", len(entry.Drawers), wantDrawers)
			}
			items, err := drawer.ReadRange(ctx(t), e.store.ReadDrawer, entry.Drawers, 0, entry.Total)
			if err != nil {
				t.Fatal(err)
			}
			if len(items) != n {
				t.Fatalf("read %d items, want %d", len(items), n)
			}
			for i, it := range items {
				want := ns[i]
				if it.ID != want.ID || it.DocumentType != want.DocumentType || it.Weight != want.Weight ||
					it.SupportsBundling != want.SupportsBundling || it.Pos != int64(i) {
					t.Fatalf("item %d = %+v, want %+v", i, it, want)
				}
				if i > 0 && it.Seq <= items[i-1].Seq {
					t.Fatalf("item %d: sequence %d not above %d", i, it.Seq, items[i-1].Seq)
				}
			}
			// And through Peek: bundles of the whole cabinet, in order.
			var delivered []string
			for {
				b := e.peek(r, domain.GroupAll, "")
				if b == nil {
					break
				}
				if b.Recipient != r || b.Origin != domain.OriginCharges || b.ContentType != "application:json" {
					t.Fatalf("bundle header %+v", b)
				}
				var weight int64
				var docTypes []string
				for _, id := range b.NotificationIDs {
					i := slices.IndexFunc(ns, func(n domain.Notification) bool { return n.ID == id })
					weight += ns[i].Weight
					if !slices.Contains(docTypes, ns[i].DocumentType) {
						docTypes = append(docTypes, ns[i].DocumentType)
					}
				}
				if weight != b.Weight || !slices.Equal(docTypes, b.DocumentTypes) {
					t.Fatalf("bundle weight %d types %v, want %d %v", b.Weight, b.DocumentTypes, weight, docTypes)
				}
				delivered = append(delivered, b.NotificationIDs...)
				e.dequeue(r, b.ID)
			}
			expectIDs(t, "delivered", delivered, ids(ns))
		})
	}
}

// A bundle may hold thousands of distinct document types of 255
// characters (13 MB at the default weight limit): its stored record keeps
// none of them beyond bundle.MaxStoredDocumentTypesBytes, for every read of
// the record decodes them (retention reads every record a recipient
// retains, at every visit), and every answer reads them back from the items.
func (h *harness) manyDocumentTypes(t *testing.T) {
	e := h.env(t, hub.Options{})
	r := newRecipient()
	ns := notes(bundle.MaxStoredDocumentTypesBytes/domain.MaxContentTypeLength+1, r, domain.OriginCharges, "c")
	types := make([]string, len(ns))
	for i := range ns {
		ns[i].DocumentType = fmt.Sprintf("%04d", i) + strings.Repeat("t", domain.MaxContentTypeLength-4)
		types[i] = ns[i].DocumentType
	}
	e.save(ns...)
	answered := func(what string, b *domain.Bundle) *domain.Bundle {
		t.Helper()
		if b == nil || len(b.NotificationIDs) != len(ns) || !slices.Equal(b.DocumentTypes, types) {
			t.Fatalf("%s: %+v, want a bundle of all %d notifications and their document types", what, b, len(ns))
		}
		return b
	}
	kept := func(what string, recs []bundle.Record) {
		t.Helper()
		if len(recs) != 1 || recs[0].DocumentTypes != nil {
			t.Fatalf("%s: %d records, want one keeping no document types", what, len(recs))
		}
	}
	b := answered("peek", e.peek(r, domain.GroupAll, ""))
	st, err := e.store.LoadRecipient(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	kept("pending", st.Pending)
	answered("peek again", e.peek(r, domain.GroupAll, ""))
	e.dequeue(r, b.ID)
	dequeued, err := e.store.DequeuedBundles(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	kept("dequeued", dequeued)
}

func (h *harness) drawerNeverExceedsCapacity(t *testing.T) {
	e := h.env(t, hub.Options{})
	r := newRecipient()
	// Saves of awkward sizes, then 10,004 saves of one, concurrent.
	total := 0
	for _, size := range []int{9_999, 2, 10_000, 1, 9_998} {
		e.save(notes(size, r, domain.OriginTimeSeries, "ts")...)
		total += size
	}
	var wg sync.WaitGroup
	const workers, perWorker = 41, 244 // 10,004 single saves
	for range workers {
		wg.Go(func() {
			for range perWorker {
				if _, err := e.repo.Save(ctx(t), notes(1, r, domain.OriginTimeSeries, "ts")); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	total += workers * perWorker
	state, err := e.store.LoadRecipient(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, d := range state.Entries[0].Drawers {
		if d.Count > drawer.Capacity || d.Count < 1 {
			t.Fatalf("drawer %s holds %d", d.ID, d.Count)
		}
		items, err := e.store.ReadDrawer(ctx(t), d.ID, d.Start, d.End(), drawer.Capacity+10)
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != d.Count {
			t.Fatalf("drawer %s stores %d items, meta says %d", d.ID, len(items), d.Count)
		}
		sum += d.Count
	}
	if sum != total || state.Entries[0].Total != int64(total) {
		t.Fatalf("drawers hold %d, total %d, want %d", sum, state.Entries[0].Total, total)
	}
}

func (h *harness) duplicatesStoredOnce(t *testing.T) {
	e := h.env(t, hub.Options{})
	r := newRecipient()
	a, b := note(r, domain.OriginCharges, "c"), note(r, domain.OriginCharges, "c")
	if res := e.save(a, b, a); res.Saved != 2 || res.Duplicates != 1 {
		t.Fatalf("first save: %+v, want 2 saved 1 duplicate", res)
	}
	c := note(r, domain.OriginCharges, "c")
	if res := e.save(b, c, a); res.Saved != 1 || res.Duplicates != 2 {
		t.Fatalf("second save: %+v, want 1 saved 2 duplicates", res)
	}
	expectIDs(t, "delivered", e.drain(r, domain.GroupAll), []string{a.ID, b.ID, c.ID})
	// After the dequeue, saving them again is still a duplicate.
	if res := e.save(a, b); res.Saved != 0 || res.Duplicates != 2 {
		t.Fatalf("save after dequeue: %+v, want 2 duplicates", res)
	}
	if got := e.peek(r, domain.GroupAll, ""); got != nil {
		t.Fatalf("duplicate delivered again: %v", got.NotificationIDs)
	}
}

func (h *harness) conflictingIDRejectsWholeSave(t *testing.T) {
	e := h.env(t, hub.Options{})
	r := newRecipient()
	stored := note(r, domain.OriginCharges, "c")
	e.save(stored)

	changed := stored
	changed.Weight = 7
	fresh := note(r, domain.OriginCharges, "c")
	_, err := e.repo.Save(ctx(t), []domain.Notification{fresh, changed})
	expectErr(t, err, domain.ErrNotificationConflict)

	twin := note(r, domain.OriginTimeSeries, "t")
	other := twin
	other.DocumentType = "other"
	_, err = e.repo.Save(ctx(t), []domain.Notification{twin, other})
	expectErr(t, err, domain.ErrNotificationConflict)

	// Another recipient under a stored id is different content too.
	elsewhere := stored
	elsewhere.Recipient = newRecipient()
	_, err = e.repo.Save(ctx(t), []domain.Notification{elsewhere})
	expectErr(t, err, domain.ErrNotificationConflict)

	expectIDs(t, "delivered", e.drain(r, domain.GroupAll), []string{stored.ID})
	// Nothing of the rejected saves was stored: they can be saved now.
	if res := e.save(fresh, twin); res.Saved != 2 {
		t.Fatalf("resave: %+v", res)
	}
}

func (h *harness) smallestHeadWins(t *testing.T) {
	e := h.env(t, hub.Options{})
	r := newRecipient()
	a1 := note(r, domain.OriginCharges, "a")
	b1 := note(r, domain.OriginMarketRoles, "b")
	a2 := note(r, domain.OriginCharges, "a")
	c1 := note(r, domain.OriginTimeSeries, "c")
	b2 := note(r, domain.OriginMarketRoles, "b")
	e.save(a1, b1)
	e.save(a2, c1, b2)
	want := [][]string{{a1.ID, a2.ID}, {b1.ID, b2.ID}, {c1.ID}}
	for i, w := range want {
		b := e.peek(r, domain.GroupAll, "")
		if b == nil {
			t.Fatalf("bundle %d missing", i)
		}
		expectIDs(t, fmt.Sprintf("bundle %d", i), b.NotificationIDs, w)
		e.dequeue(r, b.ID)
	}
}

func (h *harness) peekGroupsHonoured(t *testing.T) {
	e := h.env(t, hub.Options{})
	r := newRecipient()
	byOrigin := map[domain.Origin]domain.Notification{}
	for _, o := range domain.Origins {
		n := note(r, o, "x")
		byOrigin[o] = n
		e.save(n)
	}
	cases := []struct {
		group domain.PeekGroup
		want  []domain.Origin
	}{
		{domain.GroupTimeSeries, []domain.Origin{domain.OriginTimeSeries}},
		{domain.GroupAggregations, []domain.Origin{domain.OriginAggregations}},
		{domain.GroupMasterData, []domain.Origin{domain.OriginCharges, domain.OriginMarketRoles, domain.OriginMeteringPoints}},
	}
	for _, c := range cases {
		var want []string
		for _, o := range c.want {
			want = append(want, byOrigin[o].ID)
		}
		expectIDs(t, fmt.Sprintf("group %d", c.group), e.drain(r, c.group), want)
	}
	if b := e.peek(r, domain.GroupUnspecified, ""); b != nil {
		t.Fatalf("left over: %v", b.NotificationIDs)
	}
}

func (h *harness) watermarkHidesUnfinishedSave(t *testing.T) {
	e := h.env(t, hub.Options{})
	r := newRecipient()
	visible := note(r, domain.OriginCharges, "c")
	e.save(visible)
	// Write a save whose watermark step has not happened yet, as a store
	// does between writing drawers and committing.
	state, err := e.store.LoadRecipient(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	hidden := []domain.Notification{note(r, domain.OriginCharges, "c"), note(r, domain.OriginTimeSeries, "t")}
	plan := planSave(r, state, hidden, e.clock.Now().UnixMilli())
	plan.Head.Watermark = state.Head.Watermark
	if err := e.store.CommitSaves(ctx(t), []store.RecipientSave{plan}); err != nil {
		t.Fatal(err)
	}
	b := e.peek(r, domain.GroupAll, "")
	expectIDs(t, "before the watermark moves", b.NotificationIDs, []string{visible.ID})
	e.dequeue(r, b.ID)
	if b := e.peek(r, domain.GroupAll, ""); b != nil {
		t.Fatalf("unfinished save visible: %v", b.NotificationIDs)
	}
	// The commit: only the watermark moves.
	state, err = e.store.LoadRecipient(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	head := state.Head
	head.Watermark = head.NextSeq - 1
	if err := e.store.CommitSaves(ctx(t), []store.RecipientSave{{Recipient: r, Head: head}}); err != nil {
		t.Fatal(err)
	}
	expectIDs(t, "after the watermark moves", e.drain(r, domain.GroupAll), ids(hidden))
}

func (h *harness) bundlingStopsWithoutSkipping(t *testing.T) {
	e := h.env(t, hub.Options{MaxBundleWeight: 10})
	r := newRecipient()
	mk := func(weight int64, bundling bool) domain.Notification {
		n := note(r, domain.OriginAggregations, "a")
		n.Weight, n.SupportsBundling = weight, bundling
		return n
	}
	ns := []domain.Notification{
		mk(4, true), mk(6, true), mk(1, true), // 4+6 = 10 fits; 1 more does not
		mk(20, true),              // alone over the limit: taken alone
		mk(1, false), mk(1, true), // not bundleable: alone
		mk(1, true), mk(1, false), mk(1, true), // stops at the unbundleable one, never skips it
	}
	e.save(ns...)
	want := [][]int{{0, 1}, {2}, {3}, {4}, {5, 6}, {7}, {8}}
	for i, w := range want {
		b := e.peek(r, domain.GroupAggregations, "")
		var wantIDs []string
		for _, j := range w {
			wantIDs = append(wantIDs, ns[j].ID)
		}
		if b == nil {
			t.Fatalf("bundle %d missing", i)
		}
		expectIDs(t, fmt.Sprintf("bundle %d", i), b.NotificationIDs, wantIDs)
		e.dequeue(r, b.ID)
	}
}

func (h *harness) takeOneOfFive(t *testing.T) {
	e := h.env(t, hub.Options{})
	r := newRecipient()
	ns := notes(5, r, domain.OriginMeteringPoints, "m")
	ns[0].SupportsBundling = false
	e.save(ns...)
	b := e.peek(r, domain.GroupMasterData, "")
	expectIDs(t, "first", b.NotificationIDs, ids(ns[:1]))
	e.dequeue(r, b.ID)
	expectIDs(t, "rest", e.drain(r, domain.GroupMasterData), ids(ns[1:]))
}

func (h *harness) saveBetweenPeekAndDequeue(t *testing.T) {
	for _, order := range []string{"peek-dequeue-save-peek", "peek-save-dequeue-peek"} {
		t.Run(order, func(t *testing.T) {
			e := h.env(t, hub.Options{})
			r := newRecipient()
			first := notes(3, r, domain.OriginCharges, "c")
			e.save(first...)
			late := note(r, domain.OriginCharges, "c")
			b := e.peek(r, domain.GroupAll, "")
			expectIDs(t, "first bundle", b.NotificationIDs, ids(first))
			if order == "peek-dequeue-save-peek" {
				e.dequeue(r, b.ID)
				e.save(late)
			} else {
				e.save(late)
				if again := e.peek(r, domain.GroupAll, ""); again.ID != b.ID || len(again.NotificationIDs) != 3 {
					t.Fatalf("pending bundle changed after a save: %+v", again)
				}
				e.dequeue(r, b.ID)
			}
			expectIDs(t, "later", e.drain(r, domain.GroupAll), []string{late.ID})
		})
	}
}

func (h *harness) threeGroupsPending(t *testing.T) {
	for _, order := range [][]int{{0, 1, 2}, {2, 0, 1}, {1, 2, 0}} {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			e := h.env(t, hub.Options{})
			r := newRecipient()
			ts, agg, md := note(r, domain.OriginTimeSeries, "t"), note(r, domain.OriginAggregations, "a"), note(r, domain.OriginCharges, "m")
			e.save(ts, agg, md)
			groups := []domain.PeekGroup{domain.GroupTimeSeries, domain.GroupAggregations, domain.GroupMasterData}
			want := []string{ts.ID, agg.ID, md.ID}
			bundles := make([]*domain.Bundle, 3)
			for i, g := range groups {
				bundles[i] = e.peek(r, g, "")
				expectIDs(t, "peek", bundles[i].NotificationIDs, want[i:i+1])
			}
			// ALL returns the earliest created pending bundle.
			if all := e.peek(r, domain.GroupAll, ""); all.ID != bundles[0].ID {
				t.Fatalf("ALL returned %s, want earliest %s", all.ID, bundles[0].ID)
			}
			for _, i := range order {
				e.dequeue(r, bundles[i].ID)
			}
			if b := e.peek(r, domain.GroupAll, ""); b != nil {
				t.Fatalf("left over: %v", b.NotificationIDs)
			}
		})
	}
}

func (h *harness) peekIsIdempotent(t *testing.T) {
	e := h.env(t, hub.Options{})
	r := newRecipient()
	e.save(notes(4, r, domain.OriginTimeSeries, "t")...)
	first := e.peek(r, domain.GroupTimeSeries, "")
	e.save(notes(2, r, domain.OriginTimeSeries, "t")...)
	for _, g := range []domain.PeekGroup{domain.GroupTimeSeries, domain.GroupAll, domain.GroupUnspecified} {
		again := e.peek(r, g, "")
		if again.ID != first.ID || !slices.Equal(again.NotificationIDs, first.NotificationIDs) {
			t.Fatalf("group %d: re-peek gave %+v, want %+v", g, again, first)
		}
	}
	byID := e.peek(r, domain.GroupTimeSeries, first.ID)
	if byID.ID != first.ID {
		t.Fatalf("peek by id gave %s", byID.ID)
	}
	if other := e.peek(r, domain.GroupMasterData, ""); other != nil {
		t.Fatalf("master data peek returned %+v", other)
	}
}

func (h *harness) concurrentPeeksShareOneBundle(t *testing.T) {
	e := h.env(t, hub.Options{})
	r := newRecipient()
	e.save(notes(100, r, domain.OriginCharges, "c")...)
	const peekers = 50
	got := make([]*domain.Bundle, peekers)
	errs := make([]error, peekers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range peekers {
		wg.Go(func() {
			<-start
			group := domain.GroupMasterData
			if i%2 == 0 {
				group = domain.GroupAll
			}
			got[i], errs[i] = e.repo.Peek(ctx(t), r, group, "")
		})
	}
	close(start)
	wg.Wait()
	for i := range peekers {
		if errs[i] != nil {
			t.Fatalf("peek %d: %v", i, errs[i])
		}
		if got[i] == nil || got[i].ID != got[0].ID || !slices.Equal(got[i].NotificationIDs, got[0].NotificationIDs) {
			t.Fatalf("peek %d returned a different bundle", i)
		}
	}
	state, err := e.store.LoadRecipient(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	if len(state.Pending) != 1 {
		t.Fatalf("%d pending bundles, want 1", len(state.Pending))
	}
}

func (h *harness) concurrentSavesKeepOrder(t *testing.T) {
	e := h.env(t, hub.Options{})
	r := newRecipient()
	const writers, savesEach, perSave = 16, 20, 5
	var mu sync.Mutex
	var acked [][]string // saves in the order they were acknowledged
	before := map[string]int{}
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range savesEach {
				ns := notes(perSave, r, domain.OriginTimeSeries, "t")
				mu.Lock()
				// Saves acknowledged before this one started must come first.
				before[ns[0].ID] = len(acked)
				mu.Unlock()
				if _, err := e.repo.Save(ctx(t), ns); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked = append(acked, ids(ns))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	delivered := e.drain(r, domain.GroupAll)
	if len(delivered) != writers*savesEach*perSave {
		t.Fatalf("delivered %d, want %d", len(delivered), writers*savesEach*perSave)
	}
	pos := make(map[string]int, len(delivered))
	for i, id := range delivered {
		pos[id] = i
	}
	for _, save := range acked {
		for i := 1; i < len(save); i++ {
			if pos[save[i]] != pos[save[i-1]]+1 {
				t.Fatalf("save %v not delivered in request order", save)
			}
		}
		// Every save acknowledged before this one started is delivered before it.
		for _, earlier := range acked[:before[save[0]]] {
			if pos[earlier[0]] > pos[save[0]] {
				t.Fatalf("save acknowledged earlier delivered later")
			}
		}
	}
}

func (h *harness) bundleIDRules(t *testing.T) {
	e := h.env(t, hub.Options{})
	r := newRecipient()
	id := uuid.NewString()
	// Nothing ready: no bundle, and the id stays usable.
	if b := e.peek(r, domain.GroupTimeSeries, id); b != nil {
		t.Fatalf("bundle from nothing: %+v", b)
	}
	e.save(note(r, domain.OriginTimeSeries, "t"), note(r, domain.OriginCharges, "c"))
	b := e.peek(r, domain.GroupTimeSeries, id)
	if b == nil || b.ID != id {
		t.Fatalf("peek with id gave %+v", b)
	}
	// A different id while one is pending in the group: failed precondition.
	_, err := e.repo.Peek(ctx(t), r, domain.GroupTimeSeries, uuid.NewString())
	expectErr(t, err, domain.ErrOtherBundlePending)
	_, err = e.repo.Peek(ctx(t), r, domain.GroupAll, uuid.NewString())
	expectErr(t, err, domain.ErrOtherBundlePending)
	// The same id for another group: already used.
	_, err = e.repo.Peek(ctx(t), r, domain.GroupMasterData, id)
	expectErr(t, err, domain.ErrBundleIDInUse)
	// ALL naming the pending bundle returns it.
	if all := e.peek(r, domain.GroupAll, id); all.ID != id {
		t.Fatalf("ALL with id gave %s", all.ID)
	}
	e.dequeue(r, id)
	// Dequeued ids stay used.
	_, err = e.repo.Peek(ctx(t), r, domain.GroupMasterData, id)
	expectErr(t, err, domain.ErrBundleIDInUse)
	// Bundle ids are per recipient.
	other := newRecipient()
	e.save(note(other, domain.OriginCharges, "c"))
	if b := e.peek(other, domain.GroupAll, id); b == nil || b.ID != id {
		t.Fatalf("other recipient could not use the id: %+v", b)
	}
}

func (h *harness) dequeueNotFound(t *testing.T) {
	e := h.env(t, hub.Options{})
	r, other := newRecipient(), newRecipient()
	e.save(note(r, domain.OriginCharges, "c"), note(r, domain.OriginCharges, "c"))
	b := e.peek(r, domain.GroupAll, "")
	expectErr(t, e.repo.Dequeue(ctx(t), other, b.ID), domain.ErrNotFound)
	expectErr(t, e.repo.Dequeue(ctx(t), r, uuid.NewString()), domain.ErrNotFound)
	e.dequeue(r, b.ID)
	expectErr(t, e.repo.Dequeue(ctx(t), r, b.ID), domain.ErrNotFound)
	if b := e.peek(r, domain.GroupAll, ""); b != nil {
		t.Fatalf("dequeued notifications delivered again: %v", b.NotificationIDs)
	}
}

func (h *harness) fullBundleSpansDrawers(t *testing.T) {
	e := h.env(t, hub.Options{})
	r := newRecipient()
	// Start mid-drawer so the full bundle spans seven drawers.
	first := notes(5_000, r, domain.OriginTimeSeries, "t")
	e.save(first...)
	b := e.peek(r, domain.GroupAll, "")
	e.dequeue(r, b.ID)
	var ns []domain.Notification
	for range 6 {
		chunk := notes(domain.MaxNotificationsPerSave, r, domain.OriginTimeSeries, "t")
		e.save(chunk...)
		ns = append(ns, chunk...)
	}
	b = e.peek(r, domain.GroupAll, "")
	expectIDs(t, "full bundle", b.NotificationIDs, ids(ns[:domain.DefaultMaxBundleWeight]))
	if b.Weight != domain.DefaultMaxBundleWeight {
		t.Fatalf("weight %d", b.Weight)
	}
	again := e.peek(r, domain.GroupAll, "")
	expectIDs(t, "re-peek", again.NotificationIDs, b.NotificationIDs)
	e.dequeue(r, b.ID)
	expectIDs(t, "rest", e.drain(r, domain.GroupAll), ids(ns[domain.DefaultMaxBundleWeight:]))
}

func (h *harness) retention(t *testing.T) {
	var forgotten []string // recipient/bundle pairs handed to ForgetBundles
	e := h.env(t, hub.Options{Retention: 24 * time.Hour, ForgetBundles: func(ctx context.Context, recipient string, ids []string, asRead func(context.Context) error) error {
		// Nothing changed the bundles since retention read them.
		if err := asRead(ctx); err != nil {
			t.Errorf("the bundles retention read, as read: %v", err)
		}
		for _, id := range ids {
			forgotten = append(forgotten, recipient+"/"+id)
		}
		return nil
	}})
	r := newRecipient()
	old := notes(drawer.Capacity+10, r, domain.OriginCharges, "c") // two drawers
	e.save(old[:drawer.Capacity]...)
	e.save(old[drawer.Capacity:]...)
	kept := note(r, domain.OriginTimeSeries, "t")
	e.save(kept)
	b := e.peek(r, domain.GroupMasterData, "")
	e.dequeue(r, b.ID) // all 10,010 acknowledged
	pendingTS := e.peek(r, domain.GroupTimeSeries, "")

	e.clock.Advance(23 * time.Hour)
	if err := e.repo.SweepNow(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if !e.bundleExists(r, b.ID) || len(forgotten) > 0 {
		t.Fatalf("bundle removed before its retention (forgotten: %v)", forgotten)
	}
	e.clock.Advance(2 * time.Hour)
	if err := e.repo.SweepNow(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if e.bundleExists(r, b.ID) {
		t.Fatal("dequeued bundle kept past retention")
	}
	expectIDs(t, "bundles forgotten with their records", forgotten, []string{r + "/" + b.ID})
	// A record gone since retention read it is not as read.
	if err := e.store.BundlesAsRead(ctx(t), r, []bundle.Record{{ID: b.ID, Version: "read"}}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a bundle removed since it was read, as read: %v; want ErrConflict", err)
	}
	state, err := e.store.LoadRecipient(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	for _, entry := range state.Entries {
		if entry.Origin == domain.OriginCharges {
			t.Fatalf("fully acknowledged cabinet kept: %+v", entry)
		}
	}
	found, err := e.store.LookupIDs(ctx(t), []string{old[0].ID, kept.ID})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := found[old[0].ID]; ok {
		t.Fatal("id index of a removed drawer kept")
	}
	if _, ok := found[kept.ID]; !ok {
		t.Fatal("id index of an unacknowledged notification removed")
	}
	// The unacknowledged pending bundle is untouched, and new saves work.
	again := e.peek(r, domain.GroupTimeSeries, "")
	expectIDs(t, "pending after sweep", again.NotificationIDs, pendingTS.NotificationIDs)
	fresh := note(r, domain.OriginCharges, "c")
	e.save(fresh)
	e.dequeue(r, again.ID)
	expectIDs(t, "after sweep", e.drain(r, domain.GroupAll), []string{fresh.ID})
}
