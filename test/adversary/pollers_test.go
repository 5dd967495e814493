package adversary

import (
	"context"
	"sync"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// Pollers of one recipient racing each other while a domain saves: each
// peeks, and dequeues what it peeked. They peek the same pending bundle,
// but a bundle is dequeued once (the others get NOT_FOUND), no notification
// is in two dequeued bundles, and every saved one is delivered.
func concurrentPollersOfOneRecipient(t *testing.T) {
	const saves, perSave, pollers = 40, 50, 4
	h := startHub(t)
	recipient := uuid.NewString()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()

	var (
		mu        sync.Mutex
		saved     = map[string]bool{}
		delivered = map[string]string{} // notification id → the bundle that delivered it
		dequeued  = map[string]int{}    // bundle id → successful Dequeues
		failures  []error
		done      = make(chan struct{}) // closed once every saved notification is delivered
		savesDone bool
	)
	fail := func(err error) {
		mu.Lock()
		failures = append(failures, err)
		mu.Unlock()
		cancel()
	}
	// finished is called with mu held.
	finished := func() {
		if savesDone && len(delivered) >= len(saved) {
			select {
			case <-done:
			default:
				close(done)
			}
		}
	}
	measure(t, h, budget, func() {
		var wg sync.WaitGroup
		wg.Go(func() {
			for range saves {
				req := &messagehubv1.SaveRequest{}
				for range perSave {
					req.Notifications = append(req.Notifications, notification(recipient))
				}
				if _, err := h.client.Save(ctx, req); err != nil {
					fail(err)
					return
				}
				mu.Lock()
				for _, n := range req.Notifications {
					saved[n.GetId()] = true
				}
				mu.Unlock()
			}
			mu.Lock()
			savesDone = true
			finished()
			mu.Unlock()
		})
		for range pollers {
			wg.Go(func() {
				for {
					select {
					case <-done:
						return
					case <-ctx.Done():
						return
					default:
					}
					resp, err := h.client.Peek(ctx, &messagehubv1.PeekRequest{Recipient: recipient})
					if err != nil {
						fail(err)
						return
					}
					b := resp.GetBundle()
					if b == nil {
						continue
					}
					_, err = h.client.Dequeue(ctx, &messagehubv1.DequeueRequest{Recipient: recipient, BundleId: b.GetId()})
					if status.Code(err) == codes.NotFound {
						continue // another poller dequeued it first
					}
					if err != nil {
						fail(err)
						return
					}
					mu.Lock()
					dequeued[b.GetId()]++
					for _, id := range b.GetNotificationIds() {
						if first, ok := delivered[id]; ok {
							failures = append(failures, &duplicate{id, first, b.GetId()})
						}
						delivered[id] = b.GetId()
					}
					finished()
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	})
	mu.Lock()
	defer mu.Unlock()
	for _, err := range failures {
		t.Error(err)
	}
	for id, n := range dequeued {
		if n != 1 {
			t.Errorf("bundle %s dequeued %d times", id, n)
		}
	}
	for id := range saved {
		if _, ok := delivered[id]; !ok {
			t.Errorf("notification %s saved and never delivered", id)
		}
	}
	for id := range delivered {
		if !saved[id] {
			t.Errorf("notification %s delivered and never saved", id)
		}
	}
	t.Logf("%d notifications saved, %d delivered in %d bundles by %d pollers", len(saved), len(delivered), len(dequeued), pollers)
	nothingPending(t, h, recipient)
}

// duplicate is a notification delivered in two dequeued bundles.
type duplicate struct{ id, first, second string }

func (d *duplicate) Error() string {
	return "notification " + d.id + " delivered twice: in bundle " + d.first + " and in bundle " + d.second
}
