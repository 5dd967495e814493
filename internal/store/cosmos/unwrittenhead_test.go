package cosmos_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// Instance A's save reserves the position after a cabinet's acknowledged
// ones and is held before it writes its page; instance B's later save of
// the cabinet writes its page after it, in the same drawer or, past a hole
// that ends A's drawer, in the next one. Both are above the watermark, so
// the cabinet's head is not written yet: Peeks answer the recipient's other
// cabinet, then nothing, never UNAVAILABLE (with B's page in the next
// drawer, every Peek took the read that missed A's position for a lagging
// one until A's save ended, or its lease ran out). Once A's save completes,
// its notification comes first.
func TestAPeekBesideASaveWhosePageIsNotWrittenYetAnswersTheOtherCabinets(t *testing.T) {
	for _, nextDrawer := range []bool{false, true} {
		name := "the later save in the same drawer"
		if nextDrawer {
			name = "the later save in the next drawer"
		}
		t.Run(name, func(t *testing.T) {
			db := cosmostest.UniqueID("db")
			holding, held := make(chan struct{}), make(chan struct{})
			release := sync.OnceFunc(func() { close(held) })
			var armed atomic.Bool
			var once sync.Once
			fa := newFaulty()
			fa.set(func(req *http.Request) int {
				// The save's page batch: its reservation holds.
				if armed.Load() && isBatch(req, "drawers", "") {
					once.Do(func() {
						close(holding)
						<-held
					})
				}
				return 0
			})
			a, b, sb, fb := twoHubs(t, db, fa, hub.Options{})
			t.Cleanup(release) // before the hubs close: a failed test leaves A's save held
			ctx := context.Background()
			r := uuid.NewString()

			// The cabinet is acknowledged up to position 1, and its
			// drawer's sequence numbers do not tell the next one (the
			// other cabinet's is between): the Peek reads it.
			first := notifications(1, r, 1)
			if _, err := b.Save(ctx, first); err != nil {
				t.Fatal(err)
			}
			drainExactly(t, b, r, ids(first))
			other := notifications(1, r, 1)
			other[0].ContentType = "rsm-012"
			if _, err := b.Save(ctx, other); err != nil {
				t.Fatal(err)
			}

			inFlight := notifications(1, r, 1) // position 1
			armed.Store(true)
			fromA := saveHeld(t, a, inFlight, holding)
			if nextDrawer {
				abortSave(t, fb, b, notifications(1, r, 1)) // position 2: a hole that ends A's drawer
			}
			later := notifications(1, r, 1)
			if _, err := b.Save(ctx, later); err != nil {
				t.Fatal(err)
			}
			state, err := sb.LoadRecipient(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(state.Entries, func(e catalog.Entry) bool { return e.ContentType == inFlight[0].ContentType })
			d := state.Entries[i].Drawers
			sameDrawer := len(d) == 1 && d[0].End() == 3
			otherDrawer := len(d) == 2 && d[0].End() == 2 && d[1].Start == 3 && d[1].ID != d[0].ID
			if nextDrawer && !otherDrawer || !nextDrawer && !sameDrawer {
				t.Fatalf("the cabinet's runs are %+v: the test tested something else", d)
			}

			got, err := b.Peek(ctx, r, domain.GroupAll, "")
			if err != nil || got == nil || !slices.Equal(got.NotificationIDs, ids(other)) {
				t.Fatalf("Peek while A's save is in flight = %v, %v; want the other cabinet's %v", got, err, ids(other))
			}
			if err := b.Dequeue(ctx, r, got.ID); err != nil {
				t.Fatal(err)
			}
			if got, err := b.Peek(ctx, r, domain.GroupAll, ""); err != nil || got != nil {
				t.Fatalf("Peek while A's save is in flight = %v, %v; want nothing", got, err)
			}

			release()
			if err := <-fromA; err != nil {
				t.Fatalf("A's save: %v", err)
			}
			drainExactly(t, b, r, ids(slices.Concat(inFlight, later)))
		})
	}
}

// A drawer's latest read sees the pages another instance wrote though the
// replicas are an hour behind and the reader carries no token of them,
// where its ordinary read does not: that read is what tells the hub a
// position not written yet from one a lagging read missed.
func TestALatestDrawerReadSeesAnotherInstancesPagesOnLaggingReplicas(t *testing.T) {
	stores, repos := twoInstances(t, laggingServer(t))
	ctx := context.Background()
	r := uuid.NewString()
	ns := notifications(3, r, 1)
	if _, err := repos[0].Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	state, err := stores[0].LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	d := state.Entries[0].Drawers[0]
	if items, err := stores[1].ReadDrawer(ctx, d.ID, d.Start, d.End(), 10); err != nil || len(items) != 0 {
		t.Fatalf("the other instance's read = %d items, %v; want none from its lagging replica: the test tests nothing", len(items), err)
	}
	items, err := stores[1].ReadDrawerLatest(ctx, d.ID, d.Start, d.End(), 10)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(items))
	for i, it := range items {
		got[i] = it.ID
	}
	if !slices.Equal(got, ids(ns)) {
		t.Fatalf("the other instance's latest read = %v, want %v", got, ids(ns))
	}
}
