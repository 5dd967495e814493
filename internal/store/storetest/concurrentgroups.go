package storetest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
)

// concurrentGroups is how many save groups the hub of RunConcurrentGroups
// writes at once.
const concurrentGroups = 4

// RunConcurrentGroups checks the hub as the binary runs it over a store
// over the network (Cosmos DB), with save groups of different recipients
// written at once (hub.Options.ConcurrentGroups): the store's CommitSaves
// calls overlap. The embedded store is written one group at a time and is
// not run with it.
func RunConcurrentGroups(t *testing.T, newStore Factory) {
	h := &harness{newStore: newStore}
	t.Run("ConcurrentGroupsKeepEachRecipientsOrder", h.concurrentGroupsKeepEachRecipientsOrder)
	t.Run("ConcurrentGroupsStoreAnIDOnce", h.concurrentGroupsStoreAnIDOnce)
}

// envWith is env over the store as wrap changes it, with concurrent groups.
func (h *harness) envWith(t *testing.T, wrap func(store.Store) store.Store) *env {
	t.Helper()
	st := open(t, h.newStore)
	c := newClock()
	repo := hub.New(wrap(st), hub.Options{Now: c.Now, SweepInterval: time.Hour, ConcurrentGroups: concurrentGroups}, nil)
	t.Cleanup(repo.Close)
	return &env{t: t, store: st, repo: repo, clock: c}
}

// meetingStore holds the first two CommitSaves until both have arrived, so
// that two save groups are written at once; arrived says the first is in.
type meetingStore struct {
	store.Store
	calls   atomic.Int64
	arrived chan struct{}
	met     chan struct{}
}

func (s *meetingStore) CommitSaves(ctx context.Context, saves []store.RecipientSave) error {
	switch s.calls.Add(1) {
	case 1:
		close(s.arrived)
	case 2:
		close(s.met)
	}
	select {
	case <-s.met:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.CommitSaves(ctx, saves)
}

// Two save groups in flight at once that both carry the same notification
// id (for two recipients, so different content): the id index lets exactly
// one store it, and the other Save fails as a conflict.
func (h *harness) concurrentGroupsStoreAnIDOnce(t *testing.T) {
	meeting := &meetingStore{arrived: make(chan struct{}), met: make(chan struct{})}
	e := h.envWith(t, func(s store.Store) store.Store { meeting.Store = s; return meeting })
	r1, r2 := newRecipient(), newRecipient()
	first := note(r1, domain.OriginCharges, "c")
	second := first
	second.Recipient = r2
	errs := make(chan error, 2)
	go func() { _, err := e.repo.Save(ctx(t), []domain.Notification{first}); errs <- err }()
	<-meeting.arrived // the first group is in flight: the second is a group of its own
	go func() { _, err := e.repo.Save(ctx(t), []domain.Notification{second}); errs <- err }()
	var failed []error
	for range 2 {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) != 1 || !errors.Is(failed[0], domain.ErrNotificationConflict) {
		t.Fatalf("Saves of one id to two recipients at once failed with %v, want one conflict", failed)
	}
	got := append(e.drain(r1, domain.GroupAll), e.drain(r2, domain.GroupAll)...)
	expectIDs(t, "delivered", got, []string{first.ID})
}

// ackedSave is a Save of concurrentGroupsKeepEachRecipientsOrder: how many
// Saves were acknowledged when it started, and its ids by recipient.
type ackedSave struct {
	started     int
	byRecipient map[string][]string
}

// Concurrent Saves over a few recipients, through concurrent groups: each
// recipient gets every Save's notifications in request order, and those of
// a Save acknowledged before another started first.
func (h *harness) concurrentGroupsKeepEachRecipientsOrder(t *testing.T) {
	e := h.envWith(t, func(s store.Store) store.Store { return s })
	recipients := []string{newRecipient(), newRecipient(), newRecipient()}
	const writers, savesEach = 8, 10
	var mu sync.Mutex
	var acked []ackedSave // in the order they were acknowledged
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 1)) //nolint:gosec // a test's spread
			for range savesEach {
				// One or two recipients, a few notifications each.
				var ns []domain.Notification
				save := ackedSave{byRecipient: map[string][]string{}}
				for _, i := range rnd.Perm(len(recipients))[:1+rnd.IntN(2)] {
					more := notes(1+rnd.IntN(3), recipients[i], domain.OriginTimeSeries, "t")
					ns = append(ns, more...)
					save.byRecipient[recipients[i]] = ids(more)
				}
				mu.Lock()
				save.started = len(acked)
				mu.Unlock()
				if _, err := e.repo.Save(ctx(t), ns); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked = append(acked, save)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	pos := map[string]int{} // an id's place among its recipient's deliveries
	for _, r := range recipients {
		for i, id := range e.drain(r, domain.GroupAll) {
			pos[id] = i
		}
	}
	want := 0
	for _, save := range acked {
		for r, got := range save.byRecipient {
			want += len(got)
			for i, id := range got {
				if p, ok := pos[id]; !ok || (i > 0 && p != pos[got[i-1]]+1) {
					t.Fatalf("save %v for %s not delivered in request order", got, r)
				}
			}
			for _, earlier := range acked[:save.started] {
				if prev, ok := earlier.byRecipient[r]; ok && pos[prev[0]] > pos[got[0]] {
					t.Fatalf("a save acknowledged before %v started was delivered after it", got)
				}
			}
		}
	}
	if len(pos) != want {
		t.Fatalf("delivered %d notifications, acknowledged %d", len(pos), want)
	}
}
