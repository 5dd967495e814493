package cosmos_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
)

// A Dequeue's load answered in pages can read the bundle's entry in one
// page and the bundle in a later one, which another instance cut meanwhile
// from notifications a save appended to the drawer after that entry was
// read. The bundle's record was then stored naming no drawers (the entry
// read stops short of its end), as a bundle over more runs than a record
// names is, though it covers one: a later pass, which takes such a bundle
// to be seen only among the new ones or to keep an entry of more runs,
// took the drawer out of the entry for the next bundle's sake while this
// one still read through the entry; once a save started the cabinet
// afresh, the bundle read back (its notice to its domain, an operator's
// trace) named the new notifications at its positions.
func TestADequeueWhoseLoadReadTheEntryBeforeAnAppendNamesTheBundlesDrawers(t *testing.T) {
	r := uuid.NewString()
	clock := &costClock{now: time.Now()}
	a, b, paged := pagedPairWith(t, r, hub.Options{Retention: time.Hour, SweepInterval: time.Hour, Now: clock.Now})
	paged.size = 2 // the head and the entry; the cursor and the bundle in the next page
	ctx := context.Background()
	dequeueSaved(t, b, notifications(1, r, 1)) // opens the drawer and creates the cursor
	clock.advance(40 * time.Minute)
	before := notifications(2, r, 1)
	if _, err := b.Save(ctx, before); err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	done := make(chan error, 1)
	go func() { done <- a.Dequeue(ctx, r, id) }()
	select {
	case <-paged.held: // A's load read the entry, not yet the cursor and the bundle
	case err := <-done:
		t.Fatalf("A's dequeue answered %v without asking for a second page; the test tested nothing", err)
	}
	appended := notifications(2, r, 1) // in the same drawer
	if _, err := b.Save(ctx, appended); err != nil {
		t.Fatal(err)
	}
	want := slices.Concat(idsOf(before), idsOf(appended))
	if cut, err := b.Peek(ctx, r, domain.GroupAll, id); err != nil || cut == nil || !slices.Equal(cut.NotificationIDs, want) {
		t.Fatalf("peek through B = %+v, %v; want bundle %s of %v", cut, err, id, want)
	}
	close(paged.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	since := clock.Now()
	dequeueSaved(t, b, notifications(2, r, 1)) // a later bundle of the drawer
	// The drawer, opened more than the retention ago, leaves the drained
	// cabinet at the pass after the later bundle's dequeue; the bundle
	// dequeued through A is retained, and the next save starts the cabinet
	// afresh at position 0.
	clock.advance(30 * time.Minute)
	if err := b.SweepSince(ctx, since); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Save(ctx, notifications(5, r, 1)); err != nil {
		t.Fatal(err)
	}
	if got, err := b.DequeuedBundle(ctx, r, id); err != nil || !slices.Equal(got.NotificationIDs, want) {
		t.Fatalf("the bundle dequeued through A reads back %+v, %v; want its notifications %v", got, err, want)
	}
}
