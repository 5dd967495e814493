package pebble

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/audit"
	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
)

// Pebble shows a write group to its own reads before the group is synced:
// the outbox must not. A notice read then would have the bundle's domain
// told of a dequeue that a failed sync, or a power loss, undoes.
func TestANoticeIsReadOnlyOnceItsDequeueIsDurable(t *testing.T) {
	s, r := withOneSaved(t)
	ctx := context.Background()
	done, acked := dequeueOfOne(t, s, r)
	group, errs := queueWrites(s, func() error { return s.Acknowledge(ctx, r, done, acked) })
	finish := s.applyGroup(group) // in pebble, not yet answered
	notices, err := s.Notices(ctx, domain.Origins, 10)
	if err != nil || len(notices) != 0 {
		t.Fatalf("before the dequeue is durable the outbox holds %+v (%v), want nothing", notices, err)
	}
	finish()
	if err := <-errs[0]; err != nil {
		t.Fatal(err)
	}
	notices, err = s.Notices(ctx, domain.Origins, 10)
	if err != nil || len(notices) != 1 || notices[0].BundleID != done.ID {
		t.Fatalf("once the dequeue is durable the outbox holds %+v (%v), want its notice", notices, err)
	}
}

// withOneSaved opens a store with a recipient that has one notification
// saved, and returns the recipient.
func withOneSaved(t *testing.T) (*Store, string) {
	t.Helper()
	s := openTemp(t)
	t.Cleanup(func() { _ = s.Close() })
	r := uuid.NewString()
	if err := saveIDsFor(t, s, r, []string{uuid.NewString()}); err != nil {
		t.Fatal(err)
	}
	return s, r
}

// dequeueOfOne makes a pending bundle of the notification of a recipient of
// withOneSaved and returns its dequeue: the bundle as dequeued, with a
// notice, and its cabinet's cursor past it.
func dequeueOfOne(t *testing.T, s *Store, r string) (bundle.Record, catalog.Cursor) {
	t.Helper()
	ctx := context.Background()
	cursor := catalog.Cursor{Origin: domain.OriginCharges, ContentType: "x"}
	pending := bundle.Record{ID: uuid.NewString(), Origin: domain.OriginCharges, ContentType: "x",
		Group: domain.GroupMasterData, Start: 0, End: 1, Count: 1, Weight: 1, State: bundle.Pending, CreatedAt: time.Now()}
	if err := s.CreateBundle(ctx, r, pending, cursor); err != nil {
		t.Fatal(err)
	}
	st, err := s.LoadRecipient(ctx, r)
	if err != nil || len(st.Pending) != 1 {
		t.Fatalf("pending %+v (%v)", st.Pending, err)
	}
	done := st.Pending[0]
	done.State, done.DequeuedAt, done.Notice = bundle.Dequeued, time.Now(), true
	cursor.Acked = 1
	return done, cursor
}

// Pebble shows a save's id records to a look-up before the save is
// synced. A trace of its notification must not answer from them: the
// recipient's records, published only once the save is durable, do not
// hold its drawer yet, so the operator would be told the notification is
// another recipient's (or being removed) when it is the recipient's, on
// its way, or never stored at all if a failed sync or a power loss
// undoes the save.
func TestATraceAnswersOnlyOnceTheSaveItFindsIsDurable(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	h := hub.New(s, hub.Options{}, nil)
	defer h.Close()
	r := uuid.NewString()
	n := domain.Notification{ID: uuid.NewString(), Recipient: r, Origin: domain.OriginCharges, ContentType: "c", DocumentType: "c", Weight: 1}
	group, errs := queueWrites(s, func() error {
		_, err := h.Save(context.Background(), []domain.Notification{n})
		return err
	})
	finish := s.applyGroup(group) // in pebble, not yet answered
	// A trace that could not wait for the save to be durable (its call
	// ended) has nothing to answer about it.
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if tr, err := h.TraceNotification(ended, r, n.ID); err == nil {
		t.Errorf("while the save is not durable a trace answers %+v", tr) // the save is finished all the same, or the hub's Close would wait for it
	}
	finish()
	if err := <-errs[0]; err != nil {
		t.Fatal(err)
	}
	if tr, err := h.TraceNotification(context.Background(), r, n.ID); err != nil || tr.State != hub.TraceWaiting {
		t.Fatalf("once the save is durable a trace answers %+v (%v), want it waiting", tr, err)
	}
}

// An id whose save's fsync failed is not stored: a look-up is answered
// with the failure, not with the record pebble shows.
func TestALookUpOfAnIDWhoseSaveFailedToSyncAnswersTheFailure(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	id := uuid.NewString()
	group, errs := queueWrites(s, func() error { return saveIDsFor(t, s, uuid.NewString(), []string{id}) })
	failed := finishWithFailedSync(s.applyGroup(group))
	if err := <-errs[0]; !errors.Is(err, failed) {
		t.Fatalf("the save whose fsync failed: %v, want the failure", err)
	}
	if found, err := s.LookupIDs(context.Background(), []string{id}); !errors.Is(err, failed) {
		t.Fatalf("a look-up of its id: %+v (%v), want the failure", found, err)
	}
}

// The audit log shows an event only once it is durable: an operator shown
// an event that a failed fsync or a power loss then undoes would find the
// record of it gone.
func TestAnAuditEventIsListedOnlyOnceItIsDurable(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	r, at := uuid.NewString(), time.Now()
	e := audit.Event{Key: audit.NewKey(at), At: at, Action: audit.Action(1), Subject: "operator", Recipient: r, Detail: "written"}
	group, errs := queueWrites(s, func() error { return s.AppendAudit(context.Background(), []audit.Event{e}) })
	finish := s.applyGroup(group) // in pebble, not yet answered
	// A listing that could not wait for the write to be durable (its call
	// ended) has nothing to show of it.
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if page, err := s.AuditEvents(ended, audit.Query{Recipient: r, Limit: 10}); err == nil && len(page.Events) > 0 {
		t.Errorf("while its write is not durable the audit log lists %+v", page.Events)
	}
	finish()
	if err := <-errs[0]; err != nil {
		t.Fatal(err)
	}
	if page, err := s.AuditEvents(context.Background(), audit.Query{Recipient: r, Limit: 10}); err != nil || len(page.Events) != 1 || page.Events[0].Key != e.Key {
		t.Fatalf("once its write is durable the audit log lists %+v (%v), want the event", page.Events, err)
	}
}
