package hub_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// refusingStore refuses every dequeue and release with refusal, as a store
// does that writes nothing (the disk guard below its floor, a Cosmos
// partition that is full).
type refusingStore struct {
	store.Store
	refusal error
}

func (s refusingStore) Acknowledge(context.Context, string, bundle.Record, catalog.Cursor) error {
	return s.refusal
}

func (s refusingStore) ReleaseBundle(context.Context, string, bundle.Record) error {
	return s.refusal
}

// A dequeue or release the store refused outright wrote nothing: it is not
// reported as a change of unknown outcome (which the audit log would record
// as one that may have applied).
func TestADequeueOrReleaseTheStoreRefusedIsNotOfUnknownOutcome(t *testing.T) {
	for _, refusal := range []error{domain.ErrStorageFull, domain.ErrStoreRefuses, store.ErrTooLarge} {
		t.Run(refusal.Error(), func(t *testing.T) {
			inner, err := pebble.Open(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			h := hub.New(refusingStore{Store: inner, refusal: fmt.Errorf("%w: refused", refusal)}, hub.Options{}, nil)
			t.Cleanup(func() {
				h.Close()
				_ = inner.Close()
			})
			ctx := context.Background()
			recipient := uuid.NewString()
			if _, err := h.Save(ctx, tenNotes(recipient)); err != nil {
				t.Fatal(err)
			}
			b, err := h.Peek(ctx, recipient, domain.GroupAll, "")
			if err != nil || b == nil {
				t.Fatalf("Peek = %v, %v", b, err)
			}
			var unknown *hub.OutcomeUnknown
			err = h.Dequeue(ctx, recipient, b.ID)
			if !errors.Is(err, refusal) || errors.As(err, &unknown) {
				t.Errorf("Dequeue refused with %v = %v; want the refusal, not an unknown outcome", refusal, err)
			}
			_, err = h.ReleaseBundle(ctx, recipient, b.ID)
			if !errors.Is(err, refusal) || errors.As(err, &unknown) {
				t.Errorf("ReleaseBundle refused with %v = %v; want the refusal, not an unknown outcome", refusal, err)
			}
		})
	}
}
