package hub_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// stallingStore holds every LoadRecipient until its context ends, counting
// the calls still inside the store.
type stallingStore struct {
	store.Store
	entered chan struct{}
	inside  atomic.Int32
}

func (s *stallingStore) LoadRecipient(ctx context.Context, recipient string, opts ...store.LoadOption) (store.RecipientState, error) {
	s.inside.Add(1)
	defer s.inside.Add(-1)
	s.entered <- struct{}{}
	<-ctx.Done()
	return s.Store.LoadRecipient(context.Background(), recipient, opts...)
}

// A Peek whose caller has gone keeps running for the others that might share
// it; Close must end it and wait for it, so the store is never closed under
// it.
func TestCloseWaitsForPeeksItStarted(t *testing.T) {
	inner, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	store := &stallingStore{Store: inner, entered: make(chan struct{}, 1)}
	repo := hub.New(store, hub.Options{}, nil)

	ctx, leave := context.WithCancel(context.Background())
	peeked := make(chan error, 1)
	go func() {
		_, err := repo.Peek(ctx, "0d9f3c2a-1111-4c39-9f0a-3f5c5f8f0a01", domain.GroupAll, "")
		peeked <- err
	}()
	<-store.entered
	leave()
	if err := <-peeked; err == nil {
		t.Fatal("a peek whose caller left returned no error")
	}

	repo.Close()
	if n := store.inside.Load(); n != 0 {
		t.Fatalf("Close returned with %d store calls still running", n)
	}
	if err := inner.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Peek(context.Background(), "0d9f3c2a-1111-4c39-9f0a-3f5c5f8f0a01", domain.GroupAll, ""); err == nil {
		t.Fatal("a peek after Close succeeded")
	}
}
