package pebble_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// listCounting counts the reads of every dequeued bundle of a recipient.
type listCounting struct {
	*pebble.Store
	lists atomic.Int64
}

func (s *listCounting) DequeuedBundles(ctx context.Context, recipient string) ([]bundle.Record, error) {
	s.lists.Add(1)
	return s.Store.DequeuedBundles(ctx, recipient)
}

// A notice's bundle is read by its key, not by listing every dequeued
// bundle the recipient retains; a pending or unknown bundle is not found.
func TestANoticesBundleIsOnePointRead(t *testing.T) {
	s, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	store := &listCounting{Store: s}
	repo := hub.New(store, hub.Options{Notices: func(domain.Origin) bool { return true }}, nil)
	defer func() { repo.Close(); _ = s.Close() }()
	ctx := context.Background()
	recipient := uuid.NewString()
	for range 3 { // one bundle each: they do not support bundling
		n := domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges, ContentType: "c", DocumentType: "c", Weight: 1}
		if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
			t.Fatal(err)
		}
	}
	var dequeued []*domain.Bundle
	for range 2 {
		b, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
		if err != nil || b == nil {
			t.Fatalf("peek: %v %v", b, err)
		}
		if err := repo.Dequeue(ctx, recipient, b.ID); err != nil {
			t.Fatal(err)
		}
		dequeued = append(dequeued, b)
	}
	pending, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || pending == nil {
		t.Fatalf("peek: %v %v", pending, err)
	}
	for _, want := range dequeued {
		rec, err := s.DequeuedBundle(ctx, recipient, want.ID)
		if err != nil || rec.ID != want.ID || rec.State != bundle.Dequeued || rec.Origin != want.Origin || rec.DequeuedAt.IsZero() {
			t.Fatalf("record of %s: %+v (%v)", want.ID, rec, err)
		}
		got, err := repo.DequeuedBundle(ctx, recipient, want.ID)
		if err != nil || got.ID != want.ID || !slices.Equal(got.NotificationIDs, want.NotificationIDs) {
			t.Fatalf("bundle %s: %+v (%v); want %+v", want.ID, got, err, want)
		}
	}
	for _, id := range []string{pending.ID, uuid.NewString()} {
		if _, err := s.DequeuedBundle(ctx, recipient, id); !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("bundle %s, pending or unknown: %v; want not found", id, err)
		}
		if _, err := repo.DequeuedBundle(ctx, recipient, id); !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("bundle %s, pending or unknown: %v; want not found", id, err)
		}
	}
	if _, err := s.DequeuedBundle(ctx, uuid.NewString(), dequeued[0].ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("a bundle of another recipient: %v; want not found", err)
	}
	if n := store.lists.Load(); n != 0 {
		t.Fatalf("the recipient's dequeued bundles were listed %d times", n)
	}
}

// A notice lives no longer than its bundle's record: retention removes it
// with the record. A domain whose provider was removed has no worker to
// tell it (or to find its bundle gone), and its notices would otherwise
// stay for good, the outbox's figures (its count, its oldest notice's age)
// growing for ever; on Cosmos DB a notice's ttl is the retention too.
func TestRetentionRemovesTheNoticeOfABundleItRemoves(t *testing.T) {
	s, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var ahead atomic.Int64 // how far the hub's clock is ahead
	now := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	repo := hub.New(s, hub.Options{Retention: time.Hour, Now: now, Notices: func(domain.Origin) bool { return true }}, nil)
	defer func() { repo.Close(); _ = s.Close() }()
	ctx := context.Background()
	recipient := uuid.NewString()
	n := domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges, ContentType: "c", DocumentType: "c", Weight: 1}
	if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
		t.Fatal(err)
	}
	b, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("peek: %v %v", b, err)
	}
	if err := repo.Dequeue(ctx, recipient, b.ID); err != nil {
		t.Fatal(err)
	}
	if n, _, err := s.NoticeBacklog(ctx); err != nil || n != 1 {
		t.Fatalf("%d notices (%v) after the dequeue, want 1", n, err)
	}

	ahead.Store(int64(2 * time.Hour))
	if err := repo.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DequeuedBundle(ctx, recipient, b.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("the bundle past its retention: %v; want it removed", err)
	}
	if n, oldest, err := s.NoticeBacklog(ctx); err != nil || n != 0 {
		t.Fatalf("%d notices (%v), the oldest of %v, once retention removed their bundle; want none", n, err, oldest)
	}
}
