package cosmos_test

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// A cabinet's cursor is created in the batch of its first bundle, after the
// bundle, so a Peek's load answered in pages may read that bundle pending
// in one page and, in the next, the cursor another instance's Dequeue of it
// moved past it meanwhile. While a bundle is pending its cursor is at its
// start: such a state is a stale read, read again. Answered from it, the
// Peek returned the bundle the actor had dequeued already, a second
// delivery after its Dequeue.
func TestAPeekWhoseLoadSpansAnotherInstancesDequeueDoesNotReturnTheDequeuedBundle(t *testing.T) {
	opts := cosmostest.Default()
	opts.Lag = 0 // each page shows every write before it: the one the test makes between them
	srv := cosmostest.StartWith(t, opts)
	db := cosmostest.UniqueID("db")
	r := uuid.NewString()
	// The load of a Peek (its head read on the primary) is the entry and
	// the bundle in its first page, the cursor in the next.
	paged := &pagedLoads{next: cosmostest.NewHTTPClient(), recipient: r, size: 2,
		held: make(chan struct{}), release: make(chan struct{})}
	repos := make([]*hub.Hub, 2)
	for i, transport := range []policy.Transporter{paged, cosmostest.NewHTTPClient()} {
		s, err := cosmos.Open(context.Background(), cosmos.Config{
			Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: transport,
			Throughput: "manual=100000",
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		repos[i] = hub.New(withoutBells{s}, hub.Options{}, nil)
		t.Cleanup(repos[i].Close)
	}
	a, b := repos[0], repos[1]
	ctx := context.Background()
	if _, err := b.Save(ctx, notifications(3, r, 1)); err != nil {
		t.Fatal(err)
	}
	bundle, err := b.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || bundle == nil {
		t.Fatalf("peek: %v, %v", bundle, err)
	}
	type answer struct {
		b   *domain.Bundle
		err error
	}
	done := make(chan answer, 1)
	go func() {
		got, err := a.Peek(ctx, r, domain.GroupAll, "")
		done <- answer{got, err}
	}()
	select {
	case <-paged.held: // A's load read the entry and the pending bundle
	case got := <-done:
		t.Fatalf("A's peek answered %+v, %v without asking for a second page; the test tested nothing", got.b, got.err)
	}
	if err := b.Dequeue(ctx, r, bundle.ID); err != nil {
		t.Fatal(err)
	}
	close(paged.release)
	if got := <-done; got.err != nil || got.b != nil {
		t.Fatalf("A's peek after B dequeued bundle %s = %+v, %v; want nothing", bundle.ID, got.b, got.err)
	}
}
