package pebble

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
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
