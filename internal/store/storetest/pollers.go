package storetest

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
)

// peekAfterDequeue drains a recipient while writers keep saving to it and
// other pollers peek the same recipient and group without pause. A Peek that
// starts after Dequeue(X) returned must never answer X, neither to the
// consumer nor to a poller; every notification is delivered exactly once,
// and in the order saved within its cabinet.
func (h *harness) peekAfterDequeue(t *testing.T) {
	e := h.env(t, hub.Options{})
	r := newRecipient()
	want := map[string][]string{} // cabinet → ids in the order saved
	first := notes(100, r, domain.OriginTimeSeries, "ts")
	for i := range first {
		first[i].SupportsBundling = false // one notification per bundle: many dequeues
	}
	e.save(first...)
	want["ts"] = ids(first)

	var mu sync.Mutex
	dequeued := map[string]bool{} // bundle ids whose Dequeue has returned
	wasDequeued := func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(dequeued)
	}

	runCtx, stop := context.WithCancel(ctx(t))
	defer stop()
	failures := make(chan string, 16)
	fail := func(format string, args ...any) {
		select {
		case failures <- fmt.Sprintf(format, args...):
		default:
		}
		stop()
	}

	const writers, savesEach, perSave = 2, 15, 3
	var writing sync.WaitGroup
	var writersDone atomic.Bool
	progress := make(chan struct{}, writers*savesEach) // one per returned Save
	for w := range writers {
		cabinet := fmt.Sprintf("w%d", w)
		batches := make([][]domain.Notification, savesEach)
		for i := range batches {
			batches[i] = notes(perSave, r, domain.OriginTimeSeries, cabinet)
			want[cabinet] = append(want[cabinet], ids(batches[i])...)
		}
		writing.Go(func() {
			for _, batch := range batches {
				if _, err := e.repo.Save(runCtx, batch); err != nil {
					fail("writer %s: %v", cabinet, err)
					return
				}
				progress <- struct{}{}
			}
		})
	}
	go func() { writing.Wait(); writersDone.Store(true) }()

	const pollers = 3
	var polling sync.WaitGroup
	for range pollers {
		polling.Go(func() {
			for runCtx.Err() == nil {
				before := wasDequeued()
				b, err := e.repo.Peek(runCtx, r, domain.GroupAll, "")
				if err != nil {
					if runCtx.Err() == nil {
						fail("poller: %v", err)
					}
					return
				}
				if b != nil && before[b.ID] {
					fail("a poller's peek returned bundle %s, dequeued before it started", b.ID)
					return
				}
			}
		})
	}

	got := map[string][]string{}
	seen := map[string]bool{}
	const maxRounds = 10_000 // bounds the loop; far more than the bundles there can be
	for round := 0; runCtx.Err() == nil; round++ {
		if round == maxRounds {
			fail("still delivering after %d rounds", maxRounds)
			break
		}
		done := writersDone.Load() // read before the peek: an empty answer after it means drained
		b := e.peek(r, domain.GroupAll, "")
		if b == nil {
			if done {
				break
			}
			select { // nothing ready yet: wait for a writer rather than spin
			case <-progress:
			case <-runCtx.Done():
			}
			continue
		}
		if err := e.repo.Dequeue(runCtx, r, b.ID); err != nil {
			fail("dequeue of the bundle just peeked: %v", err)
			break
		}
		mu.Lock()
		dequeued[b.ID] = true
		mu.Unlock()
		for _, id := range b.NotificationIDs {
			if seen[id] {
				fail("notification %s delivered twice", id)
			}
			seen[id] = true
		}
		got[b.ContentType] = append(got[b.ContentType], b.NotificationIDs...)
		if next := e.peek(r, domain.GroupAll, ""); next != nil && next.ID == b.ID {
			fail("peek after Dequeue(%s) returned it again", b.ID)
		}
	}
	stop()
	polling.Wait()
	writing.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	if t.Failed() {
		return
	}
	for cabinet, ids := range want {
		expectIDs(t, "delivered from cabinet "+cabinet, got[cabinet], ids)
	}
}

// isPending follows a bundle from peek to dequeue.
func (h *harness) isPending(t *testing.T) {
	e := h.env(t, hub.Options{})
	r := newRecipient()
	e.save(note(r, domain.OriginCharges, "c"))
	b := e.peek(r, domain.GroupAll, "")
	pending := func(recipient string) bool {
		t.Helper()
		got, err := e.repo.IsPending(ctx(t), recipient, b.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if !pending(r) {
		t.Fatal("a peeked bundle is not pending")
	}
	if pending(newRecipient()) {
		t.Fatal("another recipient's bundle is pending for this one")
	}
	e.dequeue(r, b.ID)
	if pending(r) {
		t.Fatal("a dequeued bundle is still pending")
	}
}

// backlog follows saves, a peek and a dequeue in the store's backlog sums.
func (h *harness) backlog(t *testing.T) {
	e := h.env(t, hub.Options{})
	read := func() store.Backlog {
		t.Helper()
		b, err := sumBacklog(ctx(t), e.store)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if b := read(); b.Recipients != 0 || len(b.ByOrigin) != 0 {
		t.Fatalf("an empty store has a backlog: %+v", b)
	}
	a, other := newRecipient(), newRecipient()
	before := e.clock.Now()
	e.save(notes(5, a, domain.OriginTimeSeries, "ts")...)
	between := e.clock.Now()
	e.save(notes(3, a, domain.OriginCharges, "c")...)
	e.save(notes(2, other, domain.OriginCharges, "c")...)

	b := read()
	ts, charges := b.ByOrigin[domain.OriginTimeSeries], b.ByOrigin[domain.OriginCharges]
	if b.Recipients != 2 || ts.Notifications != 5 || charges.Notifications != 5 {
		t.Fatalf("backlog %+v; want 2 recipients, 5 time series and 5 charges", b)
	}
	if ts.Oldest.Before(before.Truncate(time.Millisecond)) || ts.Oldest.After(between) || charges.Oldest.Before(between.Truncate(time.Millisecond)) {
		t.Fatalf("oldest time series %v, charges %v; saved from %v, charges after %v", ts.Oldest, charges.Oldest, before, between)
	}

	bundle := e.peek(a, domain.GroupTimeSeries, "")
	if got := read().ByOrigin[domain.OriginTimeSeries].Notifications; got != 5 {
		t.Fatalf("a peeked, not dequeued bundle left %d in the backlog, want 5", got)
	}
	e.dequeue(a, bundle.ID)
	b = read()
	if got := b.ByOrigin[domain.OriginTimeSeries].Notifications; got != 0 || b.Recipients != 2 {
		t.Fatalf("after the dequeue: %+v; want no time series, 2 recipients still waiting", b)
	}
}
