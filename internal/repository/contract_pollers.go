package repository

import (
	"context"
	"maps"
	"sync"
	"testing"

	"github.com/energydatahub/messagehub/internal/domain"
)

// peekAfterDequeue drains a recipient while other pollers peek the same
// recipient and group without pause. A Peek that starts after Dequeue(X)
// returned must never answer X, neither to the consumer nor to a poller, and
// every notification is delivered once, in order.
func (h *harness) peekAfterDequeue(t *testing.T) {
	e := h.env(t, Options{})
	r := newRecipient()
	saved := notes(150, r, domain.OriginTimeSeries, "ts")
	for i := range saved {
		saved[i].SupportsBundling = false // one notification per bundle: many dequeues
	}
	e.save(saved...)

	var mu sync.Mutex
	dequeued := map[string]bool{} // bundle ids whose Dequeue has returned
	wasDequeued := func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(dequeued)
	}

	pollCtx, stopPolling := context.WithCancel(ctx(t))
	defer stopPolling()
	const pollers = 3
	failures := make(chan string, pollers)
	var wg sync.WaitGroup
	for range pollers {
		wg.Go(func() {
			for pollCtx.Err() == nil {
				before := wasDequeued()
				b, err := e.repo.Peek(pollCtx, r, domain.GroupAll, "")
				if err != nil {
					if pollCtx.Err() == nil {
						failures <- "poller: " + err.Error()
					}
					return
				}
				if b != nil && before[b.ID] {
					failures <- "a poller's peek returned bundle " + b.ID + ", dequeued before it started"
					return
				}
			}
		})
	}

	var delivered []string
	for range len(saved) + 1 {
		b := e.peek(r, domain.GroupAll, "")
		if b == nil {
			break
		}
		if err := e.repo.Dequeue(ctx(t), r, b.ID); err != nil {
			t.Fatalf("dequeue of the bundle just peeked: %v", err)
		}
		mu.Lock()
		dequeued[b.ID] = true
		mu.Unlock()
		delivered = append(delivered, b.NotificationIDs...)
		if next := e.peek(r, domain.GroupAll, ""); next != nil && next.ID == b.ID {
			t.Fatalf("peek after Dequeue(%s) returned it again", b.ID)
		}
	}
	stopPolling()
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	expectIDs(t, "delivered", delivered, ids(saved))
}
