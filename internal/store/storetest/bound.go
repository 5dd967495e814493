package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
)

// gatedStore holds the first CommitSaves after close(armed) until release
// is closed, so that saves made meanwhile queue up into one group commit.
type gatedStore struct {
	store.Store
	once     sync.Once
	armed    chan struct{}
	entered  chan struct{}
	released chan struct{}
}

func (g *gatedStore) CommitSaves(ctx context.Context, saves []store.RecipientSave) error {
	select {
	case <-g.armed:
		g.once.Do(func() {
			close(g.entered)
			<-g.released
		})
	default:
	}
	return g.Store.CommitSaves(ctx, saves)
}

// cabinetBound: a save that needs more drawers in a cabinet than the bound
// allows is refused before anything is written, with ErrCabinetFull, and
// only that save: the others of its group commit, in the same cabinet and
// in another, are stored. Once the recipient drains and retention sweeps,
// the same save fits.
func (h *harness) cabinetBound(t *testing.T) {
	gate := &gatedStore{
		Store: open(t, h.newStore), armed: make(chan struct{}),
		entered: make(chan struct{}), released: make(chan struct{}),
	}
	c := newClock()
	repo := hub.New(gate, hub.Options{
		MaxCabinetDrawers: 1, Retention: 24 * time.Hour, Now: c.Now, SweepInterval: time.Hour,
	}, nil)
	t.Cleanup(repo.Close)
	e := &env{t: t, store: gate.Store, repo: repo, clock: c}

	r := newRecipient()
	first := note(r, domain.OriginTimeSeries, "ts") // opens the cabinet's one drawer
	e.save(first)

	// A save for someone else holds the committer while the three queue.
	close(gate.armed)
	holder := make(chan error, 1)
	go func() {
		_, err := repo.Save(ctx(t), notes(1, newRecipient(), domain.OriginCharges, "c"))
		holder <- err
	}()
	<-gate.entered
	big := notes(drawer.Capacity, r, domain.OriginTimeSeries, "ts") // 1 + 10,000: a second drawer
	small := note(r, domain.OriginTimeSeries, "ts")
	other := note(r, domain.OriginCharges, "c")
	type outcome struct {
		name string
		err  error
	}
	outcomes := make(chan outcome, 3)
	for name, ns := range map[string][]domain.Notification{"big": big, "small": {small}, "other": {other}} {
		go func() { _, err := repo.Save(ctx(t), ns); outcomes <- outcome{name, err} }()
	}
	time.Sleep(300 * time.Millisecond) // the three queue behind the held commit
	close(gate.released)
	if err := <-holder; err != nil {
		t.Fatalf("the held save: %v", err)
	}
	for range 3 {
		o := <-outcomes
		switch {
		case o.name == "big" && !errors.Is(o.err, domain.ErrCabinetFull):
			t.Fatalf("the save needing a second drawer: %v, want ErrCabinetFull", o.err)
		case o.name != "big" && o.err != nil:
			t.Fatalf("the %s save failed with the one that does not fit: %v", o.name, o.err)
		}
	}

	// Nothing of the refused save was written: no position, no id.
	state, err := e.store.LoadRecipient(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	for _, entry := range state.Entries {
		if entry.Origin == domain.OriginTimeSeries && (entry.Total != 2 || len(entry.Drawers) != 1) {
			t.Fatalf("bounded cabinet holds %d positions in %d drawers, want 2 in 1", entry.Total, len(entry.Drawers))
		}
	}
	if found, err := e.store.LookupIDs(ctx(t), []string{big[0].ID, big[len(big)-1].ID}); err != nil || len(found) > 0 {
		t.Fatalf("ids of the refused save stored: %v (%v)", found, err)
	}
	expectIDs(t, "bounded cabinet", e.drain(r, domain.GroupTimeSeries), []string{first.ID, small.ID})
	expectIDs(t, "other cabinet", e.drain(r, domain.GroupMasterData), []string{other.ID})

	// Drained and swept, the cabinet starts again with room for the save.
	c.Advance(25 * time.Hour)
	if err := repo.SweepNow(ctx(t)); err != nil {
		t.Fatal(err)
	}
	e.save(big...)
	if got := e.drain(r, domain.GroupTimeSeries); len(got) != len(big) || got[0] != big[0].ID {
		t.Fatalf("after draining, the save delivered %d notifications, want %d", len(got), len(big))
	}
}

// acknowledgedDrawersLeave: a dequeued bundle's record names its drawers,
// so the sweep takes acknowledged drawers out of the entry (here the whole
// cabinet goes) and they no longer count against the bound; the bundle
// still reads back from its own drawers, even once the cabinet restarted,
// and its drawer goes with it past the retention.
func (h *harness) acknowledgedDrawersLeave(t *testing.T) {
	e := h.env(t, hub.Options{MaxCabinetDrawers: 1, Retention: 24 * time.Hour})
	r := newRecipient()
	first := notes(3, r, domain.OriginTimeSeries, "ts")
	e.save(first...)
	b := e.peek(r, domain.GroupTimeSeries, "")
	e.dequeue(r, b.ID)
	big := notes(drawer.Capacity, r, domain.OriginTimeSeries, "ts") // 3 + 10,000: a second drawer
	if _, err := e.repo.Save(ctx(t), big); !errors.Is(err, domain.ErrCabinetFull) {
		t.Fatalf("save past the bound before the sweep: %v, want ErrCabinetFull", err)
	}
	state, err := e.store.LoadRecipient(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	old := state.Entries[0].Drawers[0]

	// The drained cabinet goes whole once its cursor has stood still a
	// while (well within the retention).
	e.clock.Advance(time.Hour)
	if err := e.repo.SweepNow(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if state, err = e.store.LoadRecipient(ctx(t), r); err != nil || len(state.Entries) != 0 {
		t.Fatalf("acknowledged cabinet kept in the catalog after the sweep: %+v (%v)", state.Entries, err)
	}
	if items, err := e.store.ReadDrawer(ctx(t), old.ID, old.Start, old.End(), 10); err != nil || len(items) != 3 {
		t.Fatalf("drawer of a retained bundle: %d items (%v), want 3 kept", len(items), err)
	}
	e.save(big...) // room now: the cabinet starts again
	got, err := e.repo.DequeuedBundle(ctx(t), r, b.ID)
	if err != nil {
		t.Fatalf("dequeued bundle after its drawer left the entry: %v", err)
	}
	expectIDs(t, "dequeued bundle read back", got.NotificationIDs, b.NotificationIDs)

	e.clock.Advance(25 * time.Hour)
	if err := e.repo.SweepNow(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if e.bundleExists(r, b.ID) {
		t.Fatal("dequeued bundle kept past retention")
	}
	if items, err := e.store.ReadDrawer(ctx(t), old.ID, old.Start, old.End(), 10); err != nil || len(items) != 0 {
		t.Fatalf("drawer of an expired bundle: %d items (%v), want none", len(items), err)
	}
	if found, err := e.store.LookupIDs(ctx(t), []string{first[0].ID}); err != nil || len(found) != 0 {
		t.Fatalf("ids of a removed drawer kept: %v (%v)", found, err)
	}
	expectIDs(t, "the restarted cabinet", e.drain(r, domain.GroupTimeSeries), ids(big))
}

// acknowledgedDrawerLeavesALiveCabinet: a full acknowledged drawer leaves
// the entry of a cabinet that still has notifications to deliver, making
// room for a save the bound refused; delivery goes on in order.
func (h *harness) acknowledgedDrawerLeavesALiveCabinet(t *testing.T) {
	e := h.env(t, hub.Options{MaxCabinetDrawers: 2, Retention: 24 * time.Hour})
	r := newRecipient()
	full := notes(drawer.Capacity, r, domain.OriginCharges, "c")
	e.save(full...)
	b := e.peek(r, domain.GroupMasterData, "")
	e.dequeue(r, b.ID)
	tail := note(r, domain.OriginCharges, "c") // a second drawer
	e.save(tail)
	big := notes(drawer.Capacity, r, domain.OriginCharges, "c") // a third
	if _, err := e.repo.Save(ctx(t), big); !errors.Is(err, domain.ErrCabinetFull) {
		t.Fatalf("save past the bound before the sweep: %v, want ErrCabinetFull", err)
	}
	if err := e.repo.SweepNow(ctx(t)); err != nil {
		t.Fatal(err)
	}
	state, err := e.store.LoadRecipient(ctx(t), r)
	if err != nil || len(state.Entries) != 1 || len(state.Entries[0].Drawers) != 1 || state.Entries[0].Drawers[0].Start != drawer.Capacity {
		t.Fatalf("after the sweep the entry is %+v (%v), want the second drawer alone", state.Entries, err)
	}
	e.save(big...)
	got, err := e.repo.DequeuedBundle(ctx(t), r, b.ID)
	if err != nil {
		t.Fatalf("dequeued bundle after its drawer left the entry: %v", err)
	}
	expectIDs(t, "dequeued bundle read back", got.NotificationIDs, ids(full))
	expectIDs(t, "delivery after the sweep", e.drain(r, domain.GroupAll), append([]string{tail.ID}, ids(big)...))
}
