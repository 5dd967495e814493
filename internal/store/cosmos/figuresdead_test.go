package cosmos_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/figures"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
)

// A save whose process dies before its commit leaves its reservation in
// the recipient's head and its positions taken in the catalog: none of its
// notifications is one a Peek could deliver (the first load after its
// lease settles the save as aborted). The backlog figures count none of
// them once the lease has ended, though nothing loads the recipient (an
// actor that never polls): whether the holder of the figures takes the
// lease then and counts every recipient, follows the changes from before
// the save (they name the recipient while the save is in flight and never
// again), or counts every recipient again a day on, having followed the
// changes until a turn before the save. A save whose process died after
// its commit counts: the first load finalizes it.
func TestTheBacklogFiguresDoNotCountASaveWhoseProcessDiedBeforeItsCommit(t *testing.T) {
	for _, tc := range []struct {
		name string
		// follow: the keeper counts before the saves; between: it takes a
		// turn while they are in flight; daily: its next recount is due
		// after the leases end.
		follow, between, daily bool
	}{
		{name: "TakingTheLeaseOver"},
		{name: "FollowingTheChanges", follow: true, between: true},
		{name: "ADailyRecount", follow: true, daily: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deadSaveInTheFigures(t, tc.follow, tc.between, tc.daily)
		})
	}
}

func deadSaveInTheFigures(t *testing.T, follow, between, daily bool) {
	ctx := context.Background()
	clock := &costClock{now: time.Now()}
	const lease = 3 * time.Minute // outlasts a turn
	// Without replica lag: a replica behind the dying process's writes
	// shows the keeper its saves a turn later, which is not what this
	// test is about.
	openOn := withoutLagAs(t)
	f := newFaulty()
	dyingStore := openOn(cosmos.Config{Transport: f, Now: clock.Now, Lease: lease})
	cosmos.SetFinalizeFor(dyingStore, 0)
	dying := hub.New(withoutBells{dyingStore}, hub.Options{}, nil)
	t.Cleanup(dying.Close)
	ks := openOn(cosmos.Config{Transport: newFaulty(), Now: clock.Now, Lease: lease})
	live := hub.New(withoutBells{ks}, hub.Options{}, nil)
	t.Cleanup(live.Close)
	kopts := figures.Options{Now: clock.Now}
	if daily {
		kopts.FullEvery = 2 * lease // the turn after the leases end counts every recipient
	}
	keeper := figures.New(ks, kopts)
	turn := func() {
		t.Helper()
		clock.advance(figures.DefaultEvery)
		if done, err := keeper.Turn(ctx); err != nil || !done {
			t.Fatalf("the keeper's turn = %v, %v; want the figures updated", done, err)
		}
	}

	aborted, committed, saved := uuid.NewString(), uuid.NewString(), uuid.NewString()
	if _, err := live.Save(ctx, notifications(2, saved, 1)); err != nil {
		t.Fatal(err)
	}
	if follow {
		turn() // the keeper counts every recipient, then follows the changes
	}
	f.dieAtCommit()
	if _, err := dying.Save(ctx, notifications(3, aborted, 1)); err == nil {
		t.Fatal("the save whose process died at its commit succeeded")
	}
	gone := f.goneAfterCommit()
	_, _ = dying.Save(ctx, notifications(4, committed, 1)) // its answer never reaches the producer
	if !gone.Load() {
		t.Fatal("the save whose process dies after its commit never committed")
	}
	if between {
		turn() // the changes name both recipients, their saves in flight
	}
	clock.advance(2 * lease)
	turn()

	fig, err := ks.ReadFigures(ctx, store.FigureLists)
	if err != nil {
		t.Fatal(err)
	}
	waiting := map[string]int64{}
	for _, l := range fig.Largest {
		waiting[l.Recipient] = l.Waiting
	}
	for r, want := range map[string]int64{aborted: 0, committed: 4, saved: 2} {
		if waiting[r] != want {
			t.Errorf("the figures count %d waiting for the recipient of the %s save; want %d",
				waiting[r], map[string]string{aborted: "dead uncommitted", committed: "dead committed", saved: "finished"}[r], want)
		}
	}
	if b, err := live.Peek(ctx, aborted, domain.GroupAll, ""); err != nil || b != nil {
		t.Fatalf("a peek of the dead uncommitted save's recipient = %v, %v; want nothing", b, err)
	}
}
