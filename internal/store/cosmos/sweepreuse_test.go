package cosmos_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// A dequeued bundle that names no drawer carries a ttl, so it can vanish
// between a sweep's read of it and the sweep's batch, and its id is then
// free: an actor may peek a new bundle under it meanwhile. The sweep
// deletes the bundle it read, on its etag, never the new pending one
// (deleted by id alone, the new bundle's notifications were acknowledged
// by nobody and its Dequeue found nothing).
func TestASweepDeletesTheExpiredBundleItReadNotANewOneOfItsID(t *testing.T) {
	db := cosmostest.UniqueID("db")
	s := open(t, cosmos.Config{Database: db})
	repo := hub.New(s, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r, id := uuid.NewString(), uuid.NewString()
	saveAndPeek := func() *domain.Bundle {
		t.Helper()
		if _, err := repo.Save(ctx, notifications(1, r, 1)); err != nil {
			t.Fatal(err)
		}
		b, err := repo.Peek(ctx, r, domain.GroupAll, id)
		if err != nil || b == nil || b.ID != id {
			t.Fatalf("peek with id %s: %+v, %v", id, b, err)
		}
		return b
	}
	saveAndPeek()
	if err := repo.Dequeue(ctx, r, id); err != nil {
		t.Fatal(err)
	}
	// The sweep's read: the dequeued bundle, due.
	st, err := s.LoadRetention(ctx, r, time.Now().Add(time.Hour), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var read []bundle.Record
	for _, rec := range st.Bundles {
		if rec.ID == id {
			read = append(read, rec)
		}
	}
	if len(read) != 1 || read[0].Version == "" {
		t.Fatalf("the sweep's read: %+v; want the dequeued bundle with its version", st.Bundles)
	}
	// Its ttl runs out, and the actor peeks a new bundle under the id.
	if _, err := containerOf(t, db, "recipients").DeleteItem(ctx, azcosmos.NewPartitionKeyString(r), "b:"+id, nil); err != nil {
		t.Fatal(err)
	}
	fresh := saveAndPeek()
	// The sweep's batch, planned on its read.
	if err := s.ApplySweep(ctx, store.Sweep{Recipient: r, Bundles: read}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("the sweep of a bundle changed since its read: %v; want a conflict", err)
	}
	if err := repo.Dequeue(ctx, r, fresh.ID); err != nil {
		t.Fatalf("the Dequeue of the new bundle under the id: %v", err)
	}
	if b, err := repo.Peek(ctx, r, domain.GroupAll, ""); err != nil || b != nil {
		t.Fatalf("peek after the dequeue: %+v, %v; want nothing", b, err)
	}
}
