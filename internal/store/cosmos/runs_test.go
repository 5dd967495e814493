package cosmos_test

import (
	"context"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
)

// A save that aborts between two that succeed gives back positions at the
// tail of the cabinet's drawer. The hub sees that drawer as the run before
// them; the next save, which cannot continue it, opens a drawer of its own;
// the bundle is cut across the positions given back with the notifications
// of both saves, and once dequeued reads back from its record.
func TestABundleIsCutAcrossTheHoleOfAnAbortedSave(t *testing.T) {
	f := newFaulty()
	store := open(t, cosmos.Config{Transport: f})
	repo := hub.New(store, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	first, lost, last := notifications(5, r, 1), notifications(7, r, 1), notifications(6, r, 1)
	if _, err := repo.Save(ctx, first); err != nil {
		t.Fatal(err)
	}
	abortSave(t, f, repo, lost)
	if _, err := repo.Save(ctx, last); err != nil {
		t.Fatal(err)
	}
	state, err := store.LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(state.Entries) != 1 {
		t.Fatalf("%d catalog entries, want 1", len(state.Entries))
	}
	e := state.Entries[0]
	if d := e.Drawers; e.Total != 18 || len(d) != 2 || d[0].Start != 0 || d[0].Count != 5 || d[1].Start != 12 || d[1].Count != 6 || d[0].ID == d[1].ID {
		t.Fatalf("entry %+v; want 18 positions in the runs [0, 5) and [12, 18) of two drawers", e)
	}
	if n := drawer.Held(e.Drawers, 0); n != 11 {
		t.Fatalf("runs hold %d positions, want 11", n)
	}
	want := ids(slices.Concat(first, last))
	b, err := repo.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || b == nil || !slices.Equal(b.NotificationIDs, want) {
		t.Fatalf("Peek = %v, %v; want the 11 saved, across the hole", b, err)
	}
	if err := repo.Dequeue(ctx, r, b.ID); err != nil {
		t.Fatal(err)
	}
	back, err := repo.DequeuedBundle(ctx, r, b.ID)
	if err != nil || !slices.Equal(back.NotificationIDs, want) {
		t.Fatalf("dequeued bundle read back = %v, %v; want %v", back, err, want)
	}
	if b, err := repo.Peek(ctx, r, domain.GroupAll, ""); err != nil || b != nil {
		t.Fatalf("after the dequeue Peek = %v, %v; want nothing", b, err)
	}
}
