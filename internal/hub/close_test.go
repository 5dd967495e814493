package hub_test

import (
	"context"
	"errors"
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

// commitHoldingStore holds every CommitSaves until released; entered says
// one arrived.
type commitHoldingStore struct {
	store.Store
	entered chan struct{}
	release chan struct{}
}

func (s *commitHoldingStore) CommitSaves(ctx context.Context, saves []store.RecipientSave) error {
	s.entered <- struct{}{}
	<-s.release
	return s.Store.CommitSaves(ctx, saves)
}

// Close while a Save is being written waits for it: the Save is answered
// OK and stored before Close returns, so the store is never closed under an
// answered Save; a Save after Close is refused as UNAVAILABLE and stores
// nothing. With one group at a time and with several.
func TestCloseWaitsForTheSavesBeingWritten(t *testing.T) {
	for _, concurrent := range []int{0, 4} {
		inner, err := pebble.Open(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		st := &commitHoldingStore{Store: inner, entered: make(chan struct{}, 1), release: make(chan struct{})}
		h := hub.New(st, hub.Options{ConcurrentGroups: concurrent}, nil)
		ctx := context.Background()
		n := notes(1, "0d9f3c2a-3333-4c39-9f0a-3f5c5f8f0a01")
		saved := make(chan error, 1)
		go func() {
			_, err := h.Save(ctx, n)
			saved <- err
		}()
		<-st.entered
		closed := make(chan struct{})
		go func() { h.Close(); close(closed) }()
		select {
		case <-closed:
			t.Fatalf("groups %d: Close returned while a Save was being written", concurrent)
		case err := <-saved:
			t.Fatalf("groups %d: a Save held in its write answered %v", concurrent, err)
		default:
		}
		close(st.release)
		if err := <-saved; err != nil {
			t.Fatalf("groups %d: the Save written during Close: %v", concurrent, err)
		}
		<-closed
		if found, err := inner.LookupIDs(ctx, noteIDs(n)); err != nil || len(found) != 1 {
			t.Fatalf("groups %d: the Save answered during Close is not stored: %v, %v", concurrent, found, err)
		}
		late := notes(1, "0d9f3c2a-3333-4c39-9f0a-3f5c5f8f0a01")
		if _, err := h.Save(ctx, late); !errors.Is(err, domain.ErrUnavailable) {
			t.Fatalf("groups %d: a Save after Close: %v, want UNAVAILABLE", concurrent, err)
		}
		if found, err := inner.LookupIDs(ctx, noteIDs(late)); err != nil || len(found) != 0 {
			t.Fatalf("groups %d: a Save refused after Close was stored: %v, %v", concurrent, found, err)
		}
		if err := inner.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
