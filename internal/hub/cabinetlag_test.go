package hub_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// behindStore answers the loads that may lag (store.MayLag) of a recipient
// with a state read earlier, as this instance's replica would while it has
// not yet received another instance's writes; every other load is fresh.
type behindStore struct {
	store.Store
	mu     sync.Mutex
	behind map[string]store.RecipientState
}

func (s *behindStore) LoadRecipient(ctx context.Context, recipient string, opts ...store.LoadOption) (store.RecipientState, error) {
	s.mu.Lock()
	state, ok := s.behind[recipient]
	s.mu.Unlock()
	if ok && slices.Contains(opts, store.MayLag) {
		return state, nil
	}
	return s.Store.LoadRecipient(ctx, recipient, opts...)
}

// A cabinet at its bound of drawers whose acknowledged drawer another
// instance's sweep took out of the entry has room again: a Save through an
// instance whose first, lagging load still shows the drawer must not be
// refused as RESOURCE_EXHAUSTED on that view, which nothing re-reads (the
// refusal, unlike a stale write, is no conflict).
func TestACabinetFullOnlyInALaggingLoadTakesTheSave(t *testing.T) {
	inner, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lagging := &behindStore{Store: inner, behind: map[string]store.RecipientState{}}
	opts := hub.Options{MaxCabinetDrawers: 1, Retention: 24 * time.Hour, SweepInterval: time.Hour}
	saver := hub.New(lagging, opts, nil)
	// Another instance sharing the store, sweeping an hour on: past the
	// time a drained cabinet's cursor stands still before it goes.
	later := opts
	later.Now = func() time.Time { return time.Now().Add(time.Hour) }
	sweeper := hub.New(inner, later, nil)
	t.Cleanup(func() {
		saver.Close()
		sweeper.Close()
		_ = inner.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	r := "6a1f3c2a-2222-4c39-9f0a-3f5c5f8f0a01"
	if _, err := saver.Save(ctx, notes(3, r)); err != nil {
		t.Fatal(err)
	}
	b, err := saver.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || b == nil {
		t.Fatalf("peek: %v, %v", b, err)
	}
	if err := saver.Dequeue(ctx, r, b.ID); err != nil {
		t.Fatal(err)
	}
	before, err := inner.LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if err := sweeper.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := inner.LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Entries) != 1 || len(after.Entries) != 0 {
		t.Fatalf("the sweep left %d of %d entries, want the acknowledged cabinet gone", len(after.Entries), len(before.Entries))
	}
	lagging.mu.Lock()
	lagging.behind[r] = before
	lagging.mu.Unlock()

	big := notes(drawer.Capacity, r) // with the 3 still shown: a second drawer
	res, err := saver.Save(ctx, big)
	if err != nil {
		t.Fatalf("a Save with room in the cabinet, planned first on a load from before the sweep: %v", err)
	}
	if res.Saved != len(big) {
		t.Fatalf("saved %d, want %d", res.Saved, len(big))
	}
}

// A cabinet's last drawer opened longer than the retention ago with some of
// it acknowledged takes no more notifications: they go into a new drawer.
// A cabinet at its bound of drawers has no room for one, and its last
// drawer takes them still, as it has room: a drawer closed for retention's
// sake is not worth a refused save.
func TestAnOldDrawerOfACabinetAtItsBoundTakesTheSave(t *testing.T) {
	for _, bound := range []int{1, 2} {
		inner, err := pebble.Open(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		now := time.UnixMilli(1_700_000_000_000)
		repo := hub.New(inner, hub.Options{MaxCabinetDrawers: bound, Retention: time.Hour, SweepInterval: time.Hour,
			Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}, nil)
		ctx := context.Background()
		r := "6a1f3c2a-2222-4c39-9f0a-3f5c5f8f0a02"
		if _, err := repo.Save(ctx, notes(2, r)); err != nil {
			t.Fatal(err)
		}
		b, err := repo.Peek(ctx, r, domain.GroupAll, "")
		if err == nil && b != nil {
			err = repo.Dequeue(ctx, r, b.ID)
		}
		if err != nil || b == nil {
			t.Fatalf("peek and dequeue: %v, %v", b, err)
		}
		if _, err := repo.Save(ctx, notes(1, r)); err != nil { // one left waiting
			t.Fatal(err)
		}
		mu.Lock()
		now = now.Add(2 * time.Hour)
		mu.Unlock()
		if _, err := repo.Save(ctx, notes(1, r)); err != nil {
			t.Fatalf("bound %d: a save into a cabinet whose only drawer is older than the retention and partly acknowledged: %v", bound, err)
		}
		st, err := inner.LoadRecipient(ctx, r)
		if err != nil || len(st.Entries) != 1 {
			t.Fatalf("bound %d: entries %+v (%v)", bound, st.Entries, err)
		}
		if ids := drawerIDs(st.Entries[0].Drawers); len(ids) != bound {
			t.Fatalf("bound %d: the cabinet's drawers %v; want %d", bound, ids, bound)
		}
		repo.Close()
		_ = inner.Close()
	}
}

// drawerIDs lists the drawers of runs, each once, in order.
func drawerIDs(runs []drawer.Meta) []string {
	var ids []string
	for _, m := range runs {
		if !slices.Contains(ids, m.ID) {
			ids = append(ids, m.ID)
		}
	}
	return ids
}
