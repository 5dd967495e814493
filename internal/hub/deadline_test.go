package hub_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// deadlineStore records the deadline each CommitSaves was given.
type deadlineStore struct {
	store.Store
	deadlines chan time.Time
}

func (s *deadlineStore) CommitSaves(ctx context.Context, saves []store.RecipientSave) error {
	d, _ := ctx.Deadline()
	s.deadlines <- d
	return s.Store.CommitSaves(ctx, saves)
}

// A Save whose caller allows more time than the hub's own bound for a group
// commit gets it (a large Save on a slow store must not be cut short by the
// hub), up to two minutes; a caller in a hurry does not shorten the group's
// time below the hub's own bound.
func TestAGroupCommitHasTheTimeItsCallersAllow(t *testing.T) {
	inner, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &deadlineStore{Store: inner, deadlines: make(chan time.Time, 1)}
	h := hub.New(s, hub.Options{}, nil)
	defer func() { h.Close(); _ = inner.Close() }()
	// Each deadline is set at a moment between the test's clock readings
	// before the caller's context and after the Save (the caller's, or the
	// hub's from its own clock then): it is want after some moment of that
	// span, however long a busy machine makes the span.
	for _, tc := range []struct {
		name    string
		allowed time.Duration
		want    time.Duration
	}{
		{"a caller allowing 90 s", 90 * time.Second, 90 * time.Second},
		{"a caller allowing an hour", time.Hour, 2 * time.Minute},
		{"a caller allowing 5 s", 5 * time.Second, 30 * time.Second},
	} {
		before := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), tc.allowed)
		n := domain.Notification{ID: uuid.NewString(), Recipient: uuid.NewString(), Origin: domain.OriginCharges,
			ContentType: "c", DocumentType: "c", SupportsBundling: true, Weight: 1}
		if _, err := h.Save(ctx, []domain.Notification{n}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		after := time.Now()
		cancel()
		if d := <-s.deadlines; d.Before(before.Add(tc.want)) || d.After(after.Add(tc.want)) {
			t.Errorf("%s: the store was given %s to %s, want %s", tc.name, d.Sub(after).Round(time.Millisecond), d.Sub(before).Round(time.Millisecond), tc.want)
		}
	}
}
