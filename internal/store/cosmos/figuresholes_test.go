package cosmos_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// The backlog figures count what a Peek would deliver: the positions of an
// aborted save between two saves' notifications in one drawer are a
// recorded hole, no notification, in the recount (ScanBacklog) and in the
// reading of a recipient that changed (ChangedBacklog) as in the
// recipient's own load.
func TestTheBacklogFiguresDoNotCountAnAbortedSavesHole(t *testing.T) {
	db := cosmostest.UniqueID("db")
	fa, holding, release := heldFailingCommit(t)
	a := hub.New(open(t, cosmos.Config{Database: db, Transport: fa}), hub.Options{}, nil)
	t.Cleanup(a.Close)
	sb := open(t, cosmos.Config{Database: db})
	b := hub.New(sb, hub.Options{}, nil)
	t.Cleanup(b.Close)
	ctx := context.Background()
	r := uuid.NewString()
	feed, err := sb.ChangedBacklog(ctx, "")
	if err != nil {
		t.Fatal(err)
	}

	if _, err := b.Save(ctx, notifications(3, r, 1)); err != nil { // positions [0, 3)
		t.Fatal(err)
	}
	// A's positions [3, 8) become a hole between B's [0, 3) and [8, 10),
	// in one drawer.
	saveBesideAFailingSave(t, a, b, holding, release, notifications(5, r, 1), notifications(2, r, 1))

	state, err := sb.LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	var loaded store.Backlog
	if waiting, _ := loaded.Add(state.Entries, state.Cursors); waiting != 5 || len(state.Entries) != 1 || len(state.Entries[0].Drawers) != 2 {
		t.Fatalf("the recipient's load shows %d waiting in %+v; want 5 in two runs of one drawer: the test tests something else", waiting, state.Entries)
	}
	count := func(how string, rs []store.RecipientRecords) {
		t.Helper()
		for _, rec := range rs {
			if rec.Recipient != r {
				continue
			}
			var b store.Backlog
			if waiting, _ := b.Add(rec.Entries, rec.Cursors); waiting != 5 {
				t.Errorf("%s counts %d waiting, want 5 (the aborted save's positions are a hole)", how, waiting)
			}
			return
		}
		t.Errorf("%s does not name the recipient", how)
	}
	var scanned []store.RecipientRecords
	if _, err := sb.ScanBacklog(ctx, func(rec store.RecipientRecords) error {
		scanned = append(scanned, rec)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	count("ScanBacklog", scanned)
	changed, err := sb.ChangedBacklog(ctx, feed.Cursor)
	if err != nil {
		t.Fatal(err)
	}
	count("ChangedBacklog", changed.Recipients)
}
