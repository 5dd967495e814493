package cosmos_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// A save's process dies with the save's reservation in the recipient's
// head: committed before its finalize (its notifications wait for it), or
// still pending (its reservation holds back a later save of another
// instance). Once its lease ends, another instance's peek finds the
// reservation and settles the save, which makes notifications visible. No
// Save wakes anyone then: the settle must ring the recipient's bell, so
// that the peeks waiting for the recipient on another instance, and on the
// settler itself, look again, rather than sleep until their wait ends
// while the data is there.
func TestSettlingADeadInstancesSaveWakesThePeeksWaitingEverywhere(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// strand has the dying process save for r, and a live one after it
		// when needed; it returns the ids the settle makes visible.
		strand func(t *testing.T, f *faulty, dying, live *hub.Hub, r string) []string
	}{
		{"committed before its finalize", func(t *testing.T, f *faulty, dying, _ *hub.Hub, r string) []string {
			committed := f.goneAfterCommit()
			ns := notifications(2, r, 1)
			_, _ = dying.Save(ctx, ns) // its answer never reaches the producer
			if !committed.Load() {
				t.Fatal("the dying save never committed")
			}
			return ids(ns)
		}},
		{"pending, holding a later save back", func(t *testing.T, f *faulty, dying, live *hub.Hub, r string) []string {
			f.dieAtCommit()
			if _, err := dying.Save(ctx, notifications(1, r, 1)); err == nil {
				t.Fatal("the save whose process died at its commit succeeded")
			}
			later := notifications(2, r, 1)
			if _, err := live.Save(ctx, later); err != nil {
				t.Fatal(err)
			}
			return ids(later)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var now atomic.Int64
			now.Store(time.Now().UnixNano())
			db := cosmostest.UniqueID("db")
			// hubOn opens an instance; without bells it rings and reads none.
			hubOn := func(transport policy.Transporter, bells bool) (*hub.Hub, *cosmos.Store) {
				s := open(t, cosmos.Config{Database: db, Transport: transport, Lease: time.Minute,
					Now: func() time.Time { return time.Unix(0, now.Load()) }})
				t.Cleanup(func() { _ = s.Close() })
				var h *hub.Hub
				if bells {
					h = hub.New(s, hub.Options{SweepInterval: time.Hour}, nil)
				} else {
					h = hub.New(withoutBells{s}, hub.Options{SweepInterval: time.Hour}, nil)
				}
				t.Cleanup(h.Close)
				return h, s
			}
			f := newFaulty()
			dying, dyingStore := hubOn(f, false)
			cosmos.SetFinalizeFor(dyingStore, 0)
			live, _ := hubOn(nil, false)
			waiting, _ := hubOn(nil, true)
			settler, _ := hubOn(nil, true)
			r := uuid.NewString()
			want := tc.strand(t, f, dying, live, r)
			if b, err := waiting.Peek(ctx, r, domain.GroupAll, ""); err != nil || b != nil {
				t.Fatalf("peek before the settle = %v, %v; want nothing yet", b, err)
			}
			var wakes []<-chan struct{}
			for _, h := range []*hub.Hub{waiting, settler} {
				until(t, "both instances follow the bells", func() bool { ok, _ := h.FollowingOthers(); return ok })
				wake, stop, err := h.Watch(r)
				if err != nil {
					t.Fatal(err)
				}
				defer stop()
				wakes = append(wakes, wake)
			}

			now.Add(int64(2 * time.Minute)) // the dying save's lease ends
			if b, err := settler.Peek(ctx, r, domain.GroupAll, ""); err != nil || b == nil || !slices.Equal(b.NotificationIDs, want) {
				t.Fatalf("the settler's peek = %v, %v; want %v", b, err, want)
			}
			for i, who := range []string{"another instance", "the settler"} {
				select {
				case <-wakes[i]:
				case <-time.After(30 * time.Second):
					t.Fatalf("the settle made the notifications visible and the peek waiting on %s was not woken within 30 s", who)
				}
			}
			if b, err := waiting.Peek(ctx, r, domain.GroupAll, ""); err != nil || b == nil || !slices.Equal(b.NotificationIDs, want) {
				t.Fatalf("the woken peek = %v, %v; want %v", b, err, want)
			}
		})
	}
}

// until waits for cond, checking every few milliseconds, for at most 30 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
