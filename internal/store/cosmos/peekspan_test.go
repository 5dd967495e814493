package cosmos_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
)

// A cabinet's cursor is created in the batch of its first bundle, after the
// bundle, so a Peek's load answered in pages may read that bundle pending
// in one page and, in the next, the cursor another instance's Dequeue of it
// moved past it meanwhile. While a bundle is pending its cursor is at its
// start: such a state is a stale read, read again. Answered from it, the
// Peek returned the bundle the actor had dequeued already, a second
// delivery after its Dequeue.
func TestAPeekWhoseLoadSpansAnotherInstancesDequeueDoesNotReturnTheDequeuedBundle(t *testing.T) {
	r := uuid.NewString()
	// The load of a Peek (its head read on the primary) is the entry and
	// the bundle in its first page, the cursor in the next.
	a, b, paged := pagedPairSized(t, r, 2, hub.Options{})
	ctx := context.Background()
	if _, err := b.Save(ctx, notifications(3, r, 1)); err != nil {
		t.Fatal(err)
	}
	bundle, err := b.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || bundle == nil {
		t.Fatalf("peek: %v, %v", bundle, err)
	}
	done := peekHeldBetweenPages(t, a, r, paged) // its load read the entry and the pending bundle
	if err := b.Dequeue(ctx, r, bundle.ID); err != nil {
		t.Fatal(err)
	}
	close(paged.release)
	if got := <-done; got.err != nil || got.b != nil {
		t.Fatalf("A's peek after B dequeued bundle %s = %+v, %v; want nothing", bundle.ID, got.b, got.err)
	}
}
