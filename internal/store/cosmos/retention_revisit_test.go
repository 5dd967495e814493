package cosmos_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// visitCountingStore counts the visits of retention and their reads of
// every retained bundle.
type visitCountingStore struct {
	*cosmos.Store
	visits, readsOfAll atomic.Int32
}

func (s *visitCountingStore) LoadRetention(ctx context.Context, recipient string, dueBefore, since time.Time) (store.RetentionState, error) {
	s.visits.Add(1)
	return s.Store.LoadRetention(ctx, recipient, dueBefore, since)
}

func (s *visitCountingStore) DequeuedBundles(ctx context.Context, recipient string) ([]bundle.Record, error) {
	s.readsOfAll.Add(1)
	return s.Store.DequeuedBundles(ctx, recipient)
}

// A drained cabinet whose last drawer is older than the retention is kept
// by the pass after its dequeue, its cursor having just moved; the first
// pass past the drop delay comes back to the recipient, though nothing of
// it is due or new, and takes the cabinet out, reading as new what the
// first visit read (the bundle that drained it), not every retained
// bundle. The passes in between do not visit it.
func TestAPassComesBackOnCosmosForADrainedCabinetItKeptForItsCursor(t *testing.T) {
	clock := &costClock{now: time.Now()}
	s := &visitCountingStore{Store: open(t, cosmos.Config{Database: cosmostest.UniqueID("db"), Now: clock.Now})}
	repo := hub.New(s, hub.Options{Now: clock.Now, Retention: 24 * time.Hour, SweepInterval: time.Hour}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	ns := notifications(3, r, 1)
	if _, err := repo.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	clock.advance(25 * time.Hour) // the cabinet's drawer is older than the retention
	since := clock.Now()          // the previous pass's start
	drainExactly(t, repo, r, ids(ns))
	cabinet := func() (entries, cursors int) {
		t.Helper()
		st, err := s.LoadRecipient(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return len(st.Entries), len(st.Cursors)
	}
	pass := func() {
		t.Helper()
		start := clock.Now()
		if err := repo.SweepSince(ctx, since); err != nil {
			t.Fatal(err)
		}
		since = start
	}
	clock.advance(time.Second)
	pass()
	if e, c := cabinet(); e != 1 || c != 1 || s.visits.Load() != 1 {
		t.Fatalf("the pass after the dequeue left %d entries and %d cursors after %d visits, want the cabinet kept after one", e, c, s.visits.Load())
	}
	clock.advance(5 * time.Minute)
	pass()
	if e, c := cabinet(); e != 1 || c != 1 || s.visits.Load() != 1 {
		t.Fatalf("a pass within the drop delay left %d entries and %d cursors after %d visits, want the cabinet kept and no visit", e, c, s.visits.Load())
	}
	clock.advance(10 * time.Minute)
	pass()
	if e, c := cabinet(); e != 0 || c != 0 || s.visits.Load() != 2 {
		t.Fatalf("the first pass past the drop delay left %d entries and %d cursors after %d visits, want the cabinet gone after one more visit", e, c, s.visits.Load())
	}
	if n := s.readsOfAll.Load(); n != 0 {
		t.Fatalf("the visits read every retained bundle %d times, want none: the bundle read as new is read again", n)
	}
}
