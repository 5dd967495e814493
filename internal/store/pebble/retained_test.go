package pebble

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
)

// The retention index holds one key per dequeued or released bundle, from
// its Dequeue (or release) to the sweep that deletes it: DueRecipients
// finds the recipient through it, and nothing of it is left once the
// bundles are gone.
func TestTheRetentionIndexFollowsTheBundles(t *testing.T) {
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	repo := hub.New(s, hub.Options{Now: clock, Retention: time.Hour, SweepInterval: time.Hour}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	for _, o := range []domain.Origin{domain.OriginTimeSeries, domain.OriginCharges} {
		n := domain.Notification{ID: uuid.NewString(), Recipient: r, Origin: o, ContentType: "c", DocumentType: "d", Weight: 1}
		if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := repo.Peek(ctx, r, domain.GroupTimeSeries, "")
	if err != nil || b == nil {
		t.Fatalf("peek: %v, %v", b, err)
	}
	if err := repo.Dequeue(ctx, r, b.ID); err != nil {
		t.Fatal(err)
	}
	released, err := repo.Peek(ctx, r, domain.GroupMasterData, "")
	if err != nil || released == nil {
		t.Fatalf("peek: %v, %v", released, err)
	}
	if _, err := repo.ReleaseBundle(ctx, r, released.ID); err != nil {
		t.Fatal(err)
	}
	if n := s.retainedKeys(t); n != 2 {
		t.Fatalf("%d keys in the retention index, want 2 (one dequeued, one released)", n)
	}
	due := func(dueBefore, since time.Time) []string {
		var out []string
		if err := s.DueRecipients(ctx, dueBefore, since, func(r string) error { out = append(out, r); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := due(now.Add(-time.Hour), now.Add(-time.Minute)); len(got) != 1 || got[0] != r {
		t.Fatalf("due since a minute ago: %v, want %s", got, r)
	}
	if got := due(now.Add(-time.Hour), now.Add(time.Minute)); len(got) != 0 {
		t.Fatalf("due with nothing in range: %v, want none", got)
	}
	if got := due(now.Add(time.Minute), time.Time{}); len(got) != 1 {
		t.Fatalf("due before a minute from now: %v, want %s", got, r)
	}
	now = now.Add(2 * time.Hour)
	if err := repo.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	if left, err := s.DequeuedBundles(ctx, r); err != nil || len(left) != 0 {
		t.Fatalf("bundles left after the retention: %v (%v)", left, err)
	}
	if n := s.retainedKeys(t); n != 0 {
		t.Fatalf("%d keys left in the retention index, want none", n)
	}
}

// retainedKeys counts the keys of the retention index.
func (s *Store) retainedKeys(t *testing.T) int {
	t.Helper()
	n := 0
	if err := s.scan([]byte{prefixRetained}, func(_, _ []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}
