package hub_test

import (
	"context"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// holdingStore holds LoadRecipient of one recipient until released, as a
// throttled partition would; held says the first load arrived.
type holdingStore struct {
	store.Store
	hot     string
	held    chan struct{}
	release chan struct{}
}

func (s *holdingStore) LoadRecipient(ctx context.Context, recipient string, opts ...store.LoadOption) (store.RecipientState, error) {
	if recipient == s.hot {
		select {
		case s.held <- struct{}{}:
		default:
		}
		select {
		case <-s.release:
		case <-ctx.Done():
			return store.RecipientState{}, ctx.Err()
		}
	}
	return s.Store.LoadRecipient(ctx, recipient, opts...)
}

func notes(n int, recipient string) []domain.Notification {
	out := make([]domain.Notification, n)
	for i := range out {
		out[i] = domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginTimeSeries,
			ContentType: "c", DocumentType: "c", Weight: 1, SupportsBundling: true}
	}
	return out
}

// With ConcurrentGroups, a Save for another recipient commits while a
// group is held up by one slow recipient, and a later Save for the slow
// recipient waits for that group and is delivered after it.
func TestASlowRecipientHoldsUpOnlyTheSavesThatNameIt(t *testing.T) {
	inner, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hot := uuid.NewString()
	holding := &holdingStore{Store: inner, hot: hot, held: make(chan struct{}, 1), release: make(chan struct{})}
	h := hub.New(holding, hub.Options{ConcurrentGroups: 4}, nil)
	t.Cleanup(func() {
		h.Close()
		_ = inner.Close()
	})
	ctx := context.Background()
	first, second := notes(3, hot), notes(3, hot)
	saved := make(chan error, 2)
	go func() { _, err := h.Save(ctx, first); saved <- err }()
	<-holding.held
	go func() { _, err := h.Save(ctx, second); saved <- err }()
	if _, err := h.Save(ctx, notes(3, uuid.NewString())); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-saved:
		t.Fatalf("a Save for the held recipient ended (%v) before the other recipient's", err)
	default:
	}
	close(holding.release)
	for range 2 {
		if err := <-saved; err != nil {
			t.Fatal(err)
		}
	}
	b, err := h.Peek(ctx, hot, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("peek: %v, %v", b, err)
	}
	var want []string
	for _, n := range append(first, second...) {
		want = append(want, n.ID)
	}
	if !slices.Equal(b.NotificationIDs, want) {
		t.Fatalf("delivered %v, want the first Save's then the second's %v", b.NotificationIDs, want)
	}
}
