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
		{"pending, holding a later save back", holdBack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var now atomic.Int64
			now.Store(time.Now().UnixNano())
			hubOn := instancesOn(t, cosmos.Config{Database: cosmostest.UniqueID("db"), Lease: time.Minute,
				Now: func() time.Time { return time.Unix(0, now.Load()) }})
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

// holdBack has dying's process die at the commit of a save for r, its
// reservation left in r's head, and live save after it: it returns the ids
// of live's save, which the reservation holds back.
func holdBack(t *testing.T, f *faulty, dying, live *hub.Hub, r string) []string {
	t.Helper()
	f.dieAtCommit()
	if _, err := dying.Save(context.Background(), notifications(1, r, 1)); err == nil {
		t.Fatal("the save whose process died at its commit succeeded")
	}
	later := notifications(2, r, 1)
	if _, err := live.Save(context.Background(), later); err != nil {
		t.Fatal(err)
	}
	return ids(later)
}

// instancesOn returns a function that opens an instance on cfg's database
// through transport; without bells it rings and reads none.
func instancesOn(t *testing.T, cfg cosmos.Config) func(transport policy.Transporter, bells bool) (*hub.Hub, *cosmos.Store) {
	return func(transport policy.Transporter, bells bool) (*hub.Hub, *cosmos.Store) {
		cfg := cfg
		cfg.Transport = transport
		s := open(t, cfg)
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

// A save's process dies at its commit, its reservation holding back a
// later save of another instance, and a peek waits for the recipient.
// Nothing loads the recipient when the dead save's lease ends, and no Save
// follows: the waiting peek must still look again once the lease has
// ended, when the held-back notifications become deliverable, rather than
// sleep to the end of its wait (the peek's load settles the dead save).
func TestAPeekWaitingBehindADeadSavesReservationLooksAgainWhenItsLeaseEnds(t *testing.T) {
	ctx := context.Background()
	// The stores' clock runs ahead by shift once the saves are made, so
	// that the dead save's lease (twice the 30 s its Save may take) has
	// about 10 s left when the waiting peek first looks.
	var shift atomic.Int64
	hubOn := instancesOn(t, cosmos.Config{Database: cosmostest.UniqueID("db"), Lease: time.Second,
		Now: func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }})
	f := newFaulty()
	dying, dyingStore := hubOn(f, false)
	cosmos.SetFinalizeFor(dyingStore, 0)
	live, _ := hubOn(nil, false)
	waiting, _ := hubOn(nil, true)
	r := uuid.NewString()

	later := holdBack(t, f, dying, live, r)
	shift.Store(int64(50 * time.Second))
	until(t, "the waiting instance follows the bells", func() bool { ok, _ := waiting.FollowingOthers(); return ok })
	wake, stop, err := waiting.Watch(r)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if b, err := waiting.Peek(ctx, r, domain.GroupAll, ""); err != nil || b != nil {
		t.Fatalf("peek within the dead save's lease = %v, %v; want nothing yet", b, err)
	}
	select {
	case <-wake:
	case <-time.After(40 * time.Second):
		t.Fatal("the dead save's lease ended and the peek waiting behind its reservation was not woken")
	}
	if b, err := waiting.Peek(ctx, r, domain.GroupAll, ""); err != nil || b == nil || !slices.Equal(b.NotificationIDs, later) {
		t.Fatalf("the woken peek = %v, %v; want %v", b, err, later)
	}
}
