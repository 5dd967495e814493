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

// gatedStore holds every LoadRecipient until want of them are in flight at
// once, then lets them all go: a hub that loads fewer at once never gets
// past the gate.
type gatedStore struct {
	store.Store
	arrived chan struct{}
	open    chan struct{}
}

func (s *gatedStore) LoadRecipient(ctx context.Context, recipient string, opts ...store.LoadOption) (store.RecipientState, error) {
	s.arrived <- struct{}{}
	select {
	case <-s.open:
	case <-ctx.Done():
		return store.RecipientState{}, ctx.Err()
	}
	return s.Store.LoadRecipient(ctx, recipient, opts...)
}

// With PlanParallel set, a save group loads that many recipients at once,
// as a store whose loads wait for round trips needs.
func TestASaveGroupLoadsPlanParallelRecipientsAtOnce(t *testing.T) {
	inner, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	const parallel = 4
	gated := &gatedStore{Store: inner, arrived: make(chan struct{}, 64), open: make(chan struct{})}
	h := hub.New(gated, hub.Options{PlanParallel: parallel}, nil)
	t.Cleanup(func() {
		h.Close()
		_ = inner.Close()
	})
	var ns []domain.Notification
	for range 8 {
		ns = append(ns, domain.Notification{ID: uuid.NewString(), Recipient: uuid.NewString(), Origin: domain.OriginTimeSeries,
			ContentType: "c", DocumentType: "c", Weight: 1})
	}
	saved := make(chan error, 1)
	go func() {
		_, err := h.Save(context.Background(), ns)
		saved <- err
	}()
	// A generous bound only against a hang: the loads either overlap or
	// never do.
	timeout := time.After(time.Minute)
	for n := range parallel {
		select {
		case <-gated.arrived:
		case <-timeout:
			t.Fatalf("%d of %d loads in flight at once; the save waits for the first to end", n, parallel)
		}
	}
	close(gated.open)
	if err := <-saved; err != nil {
		t.Fatal(err)
	}
}
