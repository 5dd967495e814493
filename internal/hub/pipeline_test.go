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

// heldStore is the embedded store with every staged save's fsync held back
// until release is closed.
type heldStore struct {
	*pebble.Store
	release chan struct{}
}

func (s *heldStore) StageSaves(ctx context.Context, saves []store.RecipientSave) (func() error, error) {
	durable, err := s.Store.StageSaves(ctx, saves)
	if err != nil {
		return nil, err
	}
	return func() error { <-s.release; return durable() }, nil
}

// A Save that only repeats a notification staged and not yet durable is
// answered only once that one is durable: "duplicate" says it is stored.
func TestDuplicateOfAStagedSaveIsAnsweredOnceItIsDurable(t *testing.T) {
	inner, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	store := &heldStore{Store: inner, release: make(chan struct{})}
	repo := hub.New(store, hub.Options{}, nil)
	released := false
	release := func() {
		if !released {
			released = true
			close(store.release)
		}
	}
	defer func() { release(); repo.Close(); _ = inner.Close() }()

	n := domain.Notification{ID: uuid.NewString(), Recipient: uuid.NewString(), Origin: domain.OriginCharges,
		ContentType: "c", DocumentType: "c", SupportsBundling: true, Weight: 1}
	type answer struct {
		res domain.SaveResult
		err error
	}
	first, again := make(chan answer, 1), make(chan answer, 1)
	go func() {
		res, err := repo.Save(context.Background(), []domain.Notification{n})
		first <- answer{res, err}
	}()
	time.Sleep(50 * time.Millisecond) // let the first be staged
	go func() {
		res, err := repo.Save(context.Background(), []domain.Notification{n})
		again <- answer{res, err}
	}()
	select {
	case a := <-again:
		t.Fatalf("the repeat was answered (%+v, %v) before the original was durable", a.res, a.err)
	case a := <-first:
		t.Fatalf("the original was answered (%+v, %v) before it was durable", a.res, a.err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	if a := <-first; a.err != nil || a.res.Saved != 1 {
		t.Fatalf("original: %+v, %v", a.res, a.err)
	}
	if a := <-again; a.err != nil || a.res.Duplicates != 1 {
		t.Fatalf("repeat: %+v, %v", a.res, a.err)
	}
}
