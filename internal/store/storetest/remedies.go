package storetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
)

// The operators' remedies: ReleaseBundle's promise to the hub (RunStore),
// and releasing and acknowledging on an actor's behalf through the hub
// (RunRepository).

// released is a pending bundle's record as ReleaseBundle takes it.
func (s *storeEnv) released(rec bundle.Record) bundle.Record {
	rec.State, rec.ReleasedAt = bundle.Released, s.clock.Now()
	return rec
}

// releaseFreesItsGroupAndKeepsItsID: a released bundle is no longer
// pending, its group takes a new bundle on the unmoved cursor, its id stays
// used, it is listed with the dequeued ones as released and no notice is
// written.
func releaseFreesItsGroupAndKeepsItsID(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(3, r, domain.OriginCharges, "c")...)
	rec := s.create(r, s.record(domain.OriginCharges, "c", 0, 2))
	cursorBefore := cursorOf(s.load(r), domain.OriginCharges, "c") // as the bundle left it
	// A release tells no domain, whatever the record says.
	rec.Notice = true
	gone := s.released(rec)
	if err := s.store.ReleaseBundle(ctx(t), r, gone); err != nil {
		t.Fatal(err)
	}
	st := s.load(r)
	if len(st.Pending) != 0 {
		t.Fatalf("still pending: %+v", st.Pending)
	}
	if cur := cursorOf(st, domain.OriginCharges, "c"); cur.Acked != 0 || cur.Version != cursorBefore.Version {
		t.Fatalf("the release moved the cursor: %+v, was %+v", cur, cursorBefore)
	}
	if !s.exists(r, rec.ID) {
		t.Fatal("the released id is no longer used")
	}
	listed, err := s.store.DequeuedBundles(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || !sameRecord(listed[0], gone) || !listed[0].ReleasedAt.Equal(gone.ReleasedAt) {
		t.Fatalf("listed %+v, want the released %+v", listed, gone)
	}
	if _, err := s.store.DequeuedBundle(ctx(t), r, rec.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("a released bundle read as dequeued: %v", err)
	}
	if n, _, err := s.store.NoticeBacklog(ctx(t)); err != nil || n != 0 {
		t.Fatalf("a release wrote %d notices (%v)", n, err)
	}
	// The id cannot be used again; the group takes a new bundle.
	again := rec
	again.Version = ""
	expectConflict(t, "a bundle under the released id", s.store.CreateBundle(ctx(t), r, again, cursorOf(s.load(r), domain.OriginCharges, "c")))
	fresh := s.create(r, s.record(domain.OriginCharges, "c", 0, 3))
	s.acknowledge(r, fresh)
}

// releaseRefusesABundleNotPendingAtItsVersion: a stale or missing version,
// a bundle never created or already dequeued or released is a conflict that
// changes nothing.
func releaseRefusesABundleNotPendingAtItsVersion(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(3, r, domain.OriginCharges, "c")...)
	rec := s.create(r, s.record(domain.OriginCharges, "c", 0, 1))
	for what, version := range map[string]string{"another version": "stale", "no version": ""} {
		stale := s.released(rec)
		stale.Version = version
		expectConflict(t, what, s.store.ReleaseBundle(ctx(t), r, stale))
	}
	never := s.released(s.record(domain.OriginCharges, "c", 0, 1))
	never.Version = rec.Version
	expectConflict(t, "a bundle never created", s.store.ReleaseBundle(ctx(t), r, never))
	if s.exists(r, never.ID) {
		t.Fatal("releasing a bundle never created stored it")
	}
	s.pending(r, rec.ID)
	done := s.acknowledge(r, rec)
	expectConflict(t, "a dequeued bundle", s.store.ReleaseBundle(ctx(t), r, s.released(rec)))
	if got, err := s.store.DequeuedBundle(ctx(t), r, rec.ID); err != nil || got.State != bundle.Dequeued || !sameRecord(got, done) {
		t.Fatalf("the dequeued bundle after a refused release: %+v, %v", got, err)
	}
	next := s.create(r, s.record(domain.OriginCharges, "c", 1, 2))
	if err := s.store.ReleaseBundle(ctx(t), r, s.released(next)); err != nil {
		t.Fatal(err)
	}
	expectConflict(t, "a released bundle", s.store.ReleaseBundle(ctx(t), r, s.released(next)))
}

// releasesAndDequeuesOfOneBundleAtOnceOneWins: releases and acknowledges
// of one pending bundle race; exactly one of them applies.
func releasesAndDequeuesOfOneBundleAtOnceOneWins(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(2, r, domain.OriginCharges, "c")...)
	rec := s.create(r, s.record(domain.OriginCharges, "c", 0, 1))
	fns := make([]func() error, racers)
	for i := range fns {
		if i%2 == 0 {
			gone := s.released(rec)
			fns[i] = func() error { return s.store.ReleaseBundle(ctx(t), r, gone) }
		} else {
			done, cur := s.dequeued(r, rec)
			fns[i] = func() error { return s.store.Acknowledge(ctx(t), r, done, cur) }
		}
	}
	w := oneWins(t, "releases and dequeues of one bundle", race(fns...))
	listed, err := s.store.DequeuedBundles(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	want := bundle.Released
	if w%2 == 1 {
		want = bundle.Dequeued
	}
	if len(listed) != 1 || listed[0].State != want || len(s.load(r).Pending) != 0 {
		t.Fatalf("after the race (winner %d): listed %+v", w, listed)
	}
}

// sweepRemovesAReleasedBundle: retention removes a released record it
// names, and its id is free again.
func sweepRemovesAReleasedBundle(t *testing.T, s *storeEnv) {
	r := newRecipient()
	s.commit(notes(2, r, domain.OriginCharges, "c")...)
	rec := s.create(r, s.record(domain.OriginCharges, "c", 0, 1))
	if err := s.store.ReleaseBundle(ctx(t), r, s.released(rec)); err != nil {
		t.Fatal(err)
	}
	if err := s.store.ApplySweep(ctx(t), store.Sweep{Recipient: r, Bundles: []bundle.Record{{ID: rec.ID}}}); err != nil {
		t.Fatal(err)
	}
	if s.exists(r, rec.ID) {
		t.Fatal("the swept released bundle still exists")
	}
	if listed, err := s.store.DequeuedBundles(ctx(t), r); err != nil || len(listed) != 0 {
		t.Fatalf("listed after the sweep: %+v (%v)", listed, err)
	}
}

// remedies releases a pending bundle and acknowledges on the actor's
// behalf through the hub: the actor's next Peek cuts afresh under a new
// id, the released id is refused, and the domain gets a notice of every
// bundle the hub dequeued for the actor.
func (h *harness) remedies(t *testing.T) {
	e := h.env(t, hub.Options{MaxBundleWeight: 3, Notices: func(domain.Origin) bool { return true }})
	r := newRecipient()
	ns := notes(8, r, domain.OriginMeteringPoints, "mp")
	e.save(ns...)
	held := uuid.NewString()
	first := e.peek(r, domain.GroupMasterData, held)
	expectIDs(t, "first peek", first.NotificationIDs, ids(ns[:3]))
	released, err := e.repo.ReleaseBundle(ctx(t), r, held)
	if err != nil || released.ID != held {
		t.Fatalf("release: %+v, %v", released, err)
	}
	if err := e.repo.Dequeue(ctx(t), r, held); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("dequeue of the released id: %v", err)
	}
	if _, err := e.repo.Peek(ctx(t), r, domain.GroupAll, held); !errors.Is(err, domain.ErrBundleIDInUse) {
		t.Fatalf("peek naming the released id: %v", err)
	}
	again := e.peek(r, domain.GroupAll, "")
	if again.ID == held {
		t.Fatal("the next peek kept the released id")
	}
	expectIDs(t, "peek after the release", again.NotificationIDs, ids(ns[:3]))

	done, err := e.repo.AcknowledgeOnBehalf(ctx(t), r, domain.OriginMeteringPoints, "mp", ns[6].ID)
	if err != nil {
		t.Fatal(err)
	}
	var dequeued []string
	for _, b := range done.Bundles {
		dequeued = append(dequeued, b.ID)
	}
	if done.Notifications != 7 || len(dequeued) != 3 || dequeued[0] != again.ID {
		t.Fatalf("acknowledged %d in %v, want 7 in the pending %s and two more", done.Notifications, dequeued, again.ID)
	}
	expectIDs(t, "bundles the domain is told of", e.noticed(r, domain.OriginMeteringPoints), slices.Sorted(slices.Values(dequeued)))
	expectIDs(t, "the actor's next bundle", e.peek(r, domain.GroupAll, "").NotificationIDs, ids(ns[7:]))
	st, err := e.store.LoadRecipient(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	if cur := cursorOf(st, domain.OriginMeteringPoints, "mp"); cur.Acked != 7 {
		t.Fatalf("cursor at %d, want 7", cur.Acked)
	}
}

// acknowledgeInBoundedCalls acknowledges, on the actor's behalf, a backlog
// of notifications that do not support bundling (a bundle each) in calls of
// at most MaxAcknowledgeBundles bundles: each call's bundles are durable
// (the cursor is past them) when it answers, it says whether more remain,
// the same call again goes on from there, and once none remain a further
// call finds nothing to do. The domain is told of every bundle, once.
func (h *harness) acknowledgeInBoundedCalls(t *testing.T) {
	e := h.env(t, hub.Options{MaxAcknowledgeBundles: 2, Notices: func(domain.Origin) bool { return true }})
	r := newRecipient()
	ns := notes(5, r, domain.OriginCharges, "ch")
	for i := range ns {
		ns[i].SupportsBundling = false
	}
	e.save(ns...)
	var answered []string
	for call, want := range []int{2, 2, 1} {
		done, err := e.repo.AcknowledgeOnBehalf(ctx(t), r, domain.OriginCharges, "ch", ns[4].ID)
		if err != nil {
			t.Fatalf("call %d: %v", call, err)
		}
		if more := call < 2; len(done.Bundles) != want || done.Notifications != int64(want) || done.More != more {
			t.Fatalf("call %d: %d bundles, %d notifications, more %t; want %d, %d, %t", call, len(done.Bundles), done.Notifications, done.More, want, want, more)
		}
		for _, b := range done.Bundles {
			answered = append(answered, b.ID)
		}
		st, err := e.store.LoadRecipient(ctx(t), r)
		if err != nil {
			t.Fatal(err)
		}
		if cur := cursorOf(st, domain.OriginCharges, "ch"); cur.Acked != int64(len(answered)) {
			t.Fatalf("after call %d the cursor is at %d, want %d", call, cur.Acked, len(answered))
		}
	}
	done, err := e.repo.AcknowledgeOnBehalf(ctx(t), r, domain.OriginCharges, "ch", ns[4].ID)
	if err != nil || len(done.Bundles) != 0 || done.More {
		t.Fatalf("once more: %+v, %v; want nothing to do", done, err)
	}
	expectIDs(t, "bundles the domain is told of", e.noticed(r, domain.OriginCharges), slices.Sorted(slices.Values(answered)))
	if b, err := e.repo.Peek(ctx(t), r, domain.GroupAll, ""); err != nil || b != nil {
		t.Fatalf("the actor's peek after the acknowledgement: %+v, %v", b, err)
	}
}

// noticed is the ids of the bundles of recipient whose dequeue the outbox
// tells origin of (at most 100 notices read), sorted.
func (e *env) noticed(recipient string, origin domain.Origin) []string {
	e.t.Helper()
	notices, err := e.store.Notices(ctx(e.t), []domain.Origin{origin}, 100)
	if err != nil {
		e.t.Fatal(err)
	}
	var told []string
	for _, n := range notices {
		if n.Recipient == recipient {
			told = append(told, n.BundleID)
		}
	}
	return slices.Sorted(slices.Values(told))
}
