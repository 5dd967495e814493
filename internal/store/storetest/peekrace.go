package storetest

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/bundle"
	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
)

// holdingCreate holds the first CreateBundle of a bundle in group between
// the peek's reading and its write: reached says it arrived, and it writes
// once release is closed. Every other call goes straight to the store.
type holdingCreate struct {
	store.Store
	group   domain.PeekGroup
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

func (s *holdingCreate) CreateBundle(ctx context.Context, recipient string, rec bundle.Record, cursor catalog.Cursor) error {
	held := false
	if rec.Group == s.group {
		s.once.Do(func() { held = true })
	}
	if held {
		close(s.reached)
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Store.CreateBundle(ctx, recipient, rec, cursor)
}

// racingPeeks is a recipient with a time series notification saved before
// an aggregation, over a hub whose first CreateBundle in group is held.
type racingPeeks struct {
	*env
	hold    *holdingCreate
	r       string
	ts, agg domain.Notification
}

func (h *harness) racingPeeks(t *testing.T, group domain.PeekGroup) *racingPeeks {
	t.Helper()
	hold := &holdingCreate{group: group, reached: make(chan struct{}), release: make(chan struct{})}
	e := h.envOver(t, hub.Options{}, func(s store.Store) store.Store {
		hold.Store = s
		return hold
	})
	t.Cleanup(func() {
		select {
		case <-hold.release:
		default:
			close(hold.release) // a failed test leaves no peek held
		}
	})
	r := newRecipient()
	ts, agg := note(r, domain.OriginTimeSeries, "t"), note(r, domain.OriginAggregations, "a")
	e.save(ts)
	e.save(agg)
	return &racingPeeks{env: e, hold: hold, r: r, ts: ts, agg: agg}
}

// peekHeld starts a peek of group, waits until its CreateBundle is held and
// returns where its answer arrives once released.
func (p *racingPeeks) peekHeld(group domain.PeekGroup, bundleID string) <-chan peekAnswer {
	p.t.Helper()
	out := make(chan peekAnswer, 1)
	go func() {
		b, err := p.repo.Peek(ctx(p.t), p.r, group, bundleID)
		out <- peekAnswer{b, err}
	}()
	select {
	case <-p.hold.reached:
	case a := <-out:
		p.t.Fatalf("the peek ended (%+v, %v) without reaching CreateBundle in group %d", a.b, a.err, p.hold.group)
	}
	return out
}

type peekAnswer struct {
	b   *domain.Bundle
	err error
}

func (p *racingPeeks) answer(out <-chan peekAnswer) *domain.Bundle {
	p.t.Helper()
	close(p.hold.release)
	a := <-out
	if a.err != nil {
		p.t.Fatalf("held peek: %v", a.err)
	}
	return a.b
}

// pendingIDs lists the recipient's pending bundles as the store holds them.
func (p *racingPeeks) pendingIDs() []string {
	p.t.Helper()
	state, err := p.store.LoadRecipient(ctx(p.t), p.r)
	if err != nil {
		p.t.Fatal(err)
	}
	var out []string
	for _, rec := range state.Pending {
		out = append(out, rec.ID)
	}
	slices.Sort(out)
	return out
}

// expectSame fails unless got is want: same id, same notifications.
func expectSame(t *testing.T, what string, got, want *domain.Bundle) {
	t.Helper()
	if got == nil || got.ID != want.ID || !slices.Equal(got.NotificationIDs, want.NotificationIDs) {
		t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
}

// settle dequeues the two bundles an ALL peek and an aggregations peek
// were shown (ts under tsBundle, agg under aggBundle), aggregations first,
// and checks that each dequeue takes exactly its own notification: the
// other bundle stays pending and peeks as it was shown, a second dequeue
// is not found, and nothing is delivered again.
func (p *racingPeeks) settle(t *testing.T, tsBundle, aggBundle *domain.Bundle) {
	t.Helper()
	expectIDs(t, "time series bundle", tsBundle.NotificationIDs, []string{p.ts.ID})
	expectIDs(t, "aggregations bundle", aggBundle.NotificationIDs, []string{p.agg.ID})
	if tsBundle.ID == aggBundle.ID {
		t.Fatalf("both notifications were shown under one id %s", tsBundle.ID)
	}
	if got, want := p.pendingIDs(), sortedIDs(tsBundle.ID, aggBundle.ID); !slices.Equal(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
	expectSame(t, "time series peek", p.peek(p.r, domain.GroupTimeSeries, ""), tsBundle)
	expectSame(t, "aggregations peek", p.peek(p.r, domain.GroupAggregations, ""), aggBundle)
	expectSame(t, "ALL peek naming the time series bundle", p.peek(p.r, domain.GroupAll, tsBundle.ID), tsBundle)
	expectSame(t, "ALL peek naming the aggregations bundle", p.peek(p.r, domain.GroupAll, aggBundle.ID), aggBundle)

	p.dequeue(p.r, aggBundle.ID)
	expectErr(t, p.repo.Dequeue(ctx(t), p.r, aggBundle.ID), domain.ErrNotFound)
	if b := p.peek(p.r, domain.GroupAggregations, ""); b != nil {
		t.Fatalf("dequeued aggregation delivered again: %+v", b)
	}
	expectSame(t, "ALL peek after the aggregations dequeue", p.peek(p.r, domain.GroupAll, ""), tsBundle)
	p.dequeue(p.r, tsBundle.ID)
	expectErr(t, p.repo.Dequeue(ctx(t), p.r, tsBundle.ID), domain.ErrNotFound)
	if b := p.peek(p.r, domain.GroupAll, ""); b != nil {
		t.Fatalf("dequeued notifications delivered again: %+v", b)
	}
	if got := p.pendingIDs(); len(got) != 0 {
		t.Fatalf("pending after both dequeues: %v", got)
	}
}

func sortedIDs(ids ...string) []string {
	slices.Sort(ids)
	return ids
}

// An ALL peek cuts the time series notification (the oldest) and is held
// before storing it; an aggregations peek stores its bundle meanwhile. Both
// stand: a bundle is pending per group, so the ALL peek's write still
// succeeds. The actor holds two bundles with no notification in common;
// ALL keeps answering its own (cut first), and each dequeue takes its own.
func (h *harness) allPeekHeldWhileAGroupPeeks(t *testing.T) {
	p := h.racingPeeks(t, domain.GroupTimeSeries)
	all := p.peekHeld(domain.GroupAll, "")
	agg := p.peek(p.r, domain.GroupAggregations, "")
	ts := p.answer(all)
	expectSame(t, "ALL peek again", p.peek(p.r, domain.GroupAll, ""), ts)
	p.settle(t, ts, agg)
}

// An aggregations peek cuts its bundle and is held before storing it; an
// ALL peek meanwhile cuts and stores the time series one, and repeats
// answer it. Once the aggregations bundle is stored, ALL answers that one:
// the earliest cut of the two pending (bundle.Record.CreatedAt). The actor
// was shown the time series notification under one id and the aggregation
// under another, never one notification under two, and each dequeue
// takes exactly its own.
func (h *harness) groupPeekHeldWhileAllPeeks(t *testing.T) {
	p := h.racingPeeks(t, domain.GroupAggregations)
	held := p.peekHeld(domain.GroupAggregations, "")
	ts := p.peek(p.r, domain.GroupAll, "")
	expectIDs(t, "ALL peek", ts.NotificationIDs, []string{p.ts.ID})
	expectSame(t, "ALL peek again", p.peek(p.r, domain.GroupAll, ""), ts)
	agg := p.answer(held)
	expectSame(t, "ALL peek once the aggregations bundle is stored", p.peek(p.r, domain.GroupAll, ""), agg)
	p.settle(t, ts, agg)
}

// An ALL peek and a time series peek cut the same notification; the one
// held loses the create race (a bundle is pending in its group) and
// re-reads: an unnamed peek answers the winner's bundle, a peek naming
// another id is refused as the contract says. One bundle is pending.
func (h *harness) peeksOfOneGroupRacingShareTheWinner(t *testing.T) {
	for _, c := range []struct {
		name          string
		held, winner  domain.PeekGroup
		heldBundleID  string
		refusedWithin error
	}{
		{name: "ALL held", held: domain.GroupAll, winner: domain.GroupTimeSeries},
		{name: "time series held", held: domain.GroupTimeSeries, winner: domain.GroupAll},
		{name: "ALL naming an id held", held: domain.GroupAll, winner: domain.GroupTimeSeries, heldBundleID: uuid.NewString(), refusedWithin: domain.ErrOtherBundlePending},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := h.racingPeeks(t, domain.GroupTimeSeries)
			held := p.peekHeld(c.held, c.heldBundleID)
			won := p.peek(p.r, c.winner, "")
			expectIDs(t, "winner", won.NotificationIDs, []string{p.ts.ID})
			close(p.hold.release)
			a := <-held
			if c.refusedWithin != nil {
				expectErr(t, a.err, c.refusedWithin)
				if p.bundleExists(p.r, c.heldBundleID) {
					t.Fatalf("the refused peek's id %s was used", c.heldBundleID)
				}
			} else {
				if a.err != nil {
					t.Fatalf("held peek: %v", a.err)
				}
				expectSame(t, "held peek", a.b, won)
			}
			if got := p.pendingIDs(); !slices.Equal(got, []string{won.ID}) {
				t.Fatalf("pending %v, want only %s", got, won.ID)
			}
			p.dequeue(p.r, won.ID)
			if got := p.drain(p.r, domain.GroupAll); !slices.Equal(got, []string{p.agg.ID}) {
				t.Fatalf("after the dequeue ALL delivered %v, want only the aggregation", got)
			}
		})
	}
}
