package pebble

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
)

// modelCab is a cabinet of the model: an origin and a content type.
type modelCab struct {
	origin domain.Origin
	ct     string
}

type modelItem struct {
	n   domain.Notification
	seq int
}

type modelPending struct {
	id      string
	cab     modelCab
	ids     []string
	created int
}

type modelRecipient struct {
	items   map[modelCab][]modelItem
	acked   map[modelCab]int
	pending map[domain.PeekGroup]*modelPending
	seq     int
}

// The hub over a real store, driven by random Saves, Peeks, Dequeues,
// retention sweeps, restarts and crashes, answers every Peek as a model of
// the contract says it must: the pending bundle of the group, else the
// bundle the bundling rule cuts from the cabinet whose first unacknowledged
// notification was saved first; nothing is lost or delivered again.
func TestTheHubOverPebbleAnswersAsTheModel(t *testing.T) {
	const steps = 400
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Add(int64(time.Millisecond))) }
	const limit = 51_200
	open := func() *hub.Hub {
		return hub.New(s, hub.Options{Now: clock, SweepInterval: time.Hour, MaxBundleWeight: limit}, nil)
	}
	repo := open()
	defer func() { repo.Close(); _ = s.Close() }()
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // a test's spread
	recipients := []string{uuid.NewString(), uuid.NewString()}
	model := map[string]*modelRecipient{}
	for _, r := range recipients {
		model[r] = &modelRecipient{items: map[modelCab][]modelItem{}, acked: map[modelCab]int{}, pending: map[domain.PeekGroup]*modelPending{}}
	}
	cabs := []modelCab{
		{domain.OriginTimeSeries, "a"}, {domain.OriginTimeSeries, "b"}, {domain.OriginCharges, "a"},
		{domain.OriginMeteringPoints, "a"}, {domain.OriginAggregations, "a"},
	}
	created := 0
	var dequeued []string               // bundle ids, to dequeue again
	var resavable []domain.Notification // saved ones, not dequeued or not yet past retention

	expected := func(m *modelRecipient, g domain.PeekGroup) (*modelPending, []string) {
		var pend []*modelPending
		for pg, p := range m.pending {
			if g.IsAll() || pg == g {
				pend = append(pend, p)
			}
		}
		if len(pend) > 0 {
			slices.SortFunc(pend, func(a, b *modelPending) int { return a.created - b.created })
			return pend[0], pend[0].ids
		}
		var best *modelCab
		bestSeq := 0
		for _, c := range cabs {
			if !g.Contains(c.origin) || m.acked[c] >= len(m.items[c]) {
				continue
			}
			if seq := m.items[c][m.acked[c]].seq; best == nil || seq < bestSeq {
				best, bestSeq = &c, seq
			}
		}
		if best == nil {
			return nil, nil
		}
		var ids []string
		var weight int64
		for _, it := range m.items[*best][m.acked[*best]:] {
			if len(ids) == 0 {
				ids, weight = append(ids, it.n.ID), it.n.Weight
				if !it.n.SupportsBundling {
					break
				}
				continue
			}
			if !it.n.SupportsBundling || weight+it.n.Weight > limit {
				break
			}
			ids, weight = append(ids, it.n.ID), weight+it.n.Weight
		}
		return &modelPending{cab: *best, ids: ids}, ids
	}

	peek := func(step int, r string, g domain.PeekGroup) *domain.Bundle {
		m := model[r]
		want, wantIDs := expected(m, g)
		b, err := repo.Peek(ctx, r, g, "")
		if err != nil {
			t.Fatalf("step %d: peek: %v", step, err)
		}
		if want == nil {
			if b != nil {
				t.Fatalf("step %d: peek %v returned %d notifications, want none", step, g, len(b.NotificationIDs))
			}
			return nil
		}
		if b == nil || !slices.Equal(b.NotificationIDs, wantIDs) {
			t.Fatalf("step %d: peek %v returned %v, want %d notifications from %v", step, g, b, len(wantIDs), want.cab)
		}
		if want.id != "" && b.ID != want.id {
			t.Fatalf("step %d: peek %v returned bundle %s, want the pending %s", step, g, b.ID, want.id)
		}
		if want.id == "" {
			created++
			want.id, want.created = b.ID, created
			m.pending[domain.GroupOf(want.cab.origin)] = want
		}
		return b
	}

	for step := range steps {
		r := recipients[rnd.IntN(len(recipients))]
		m := model[r]
		switch op := rnd.IntN(100); {
		case op < 35: // save
			var ns []domain.Notification
			if rnd.IntN(20) == 0 { // a bulk save into one cabinet: drawers fill up
				c := cabs[rnd.IntN(len(cabs))]
				for range 2000 + rnd.IntN(8000) {
					ns = append(ns, domain.Notification{ID: uuid.NewString(), Recipient: r, Origin: c.origin,
						ContentType: c.ct, DocumentType: c.ct, SupportsBundling: true, Weight: 1})
				}
			} else {
				for range 1 + rnd.IntN(20) {
					c := cabs[rnd.IntN(len(cabs))]
					w := int64(1 + rnd.IntN(3000))
					if rnd.IntN(10) == 0 {
						w = limit - 1000 + int64(rnd.IntN(2000))
					}
					ns = append(ns, domain.Notification{ID: uuid.NewString(), Recipient: r, Origin: c.origin,
						ContentType: c.ct, DocumentType: fmt.Sprintf("d%d", rnd.IntN(3)), SupportsBundling: rnd.IntN(8) != 0, Weight: w})
				}
			}
			dups := 0
			for _, n := range resavable {
				if n.Recipient == r && rnd.IntN(4) == 0 {
					ns = append(ns, n)
					dups++
				}
				if dups == 3 {
					break
				}
			}
			res, err := repo.Save(ctx, slices.Clone(ns))
			if err != nil {
				t.Fatalf("step %d: save: %v", step, err)
			}
			if res.Saved != len(ns)-dups || res.Duplicates != dups {
				t.Fatalf("step %d: save of %d with %d duplicates: %+v", step, len(ns), dups, res)
			}
			for _, n := range ns[:len(ns)-dups] {
				m.seq++
				c := modelCab{n.Origin, n.ContentType}
				m.items[c] = append(m.items[c], modelItem{n: n, seq: m.seq})
				if rnd.IntN(50) == 0 {
					resavable = append(resavable, n)
				}
			}
		case op < 65: // peek
			peek(step, r, []domain.PeekGroup{domain.GroupAll, domain.GroupTimeSeries, domain.GroupAggregations, domain.GroupMasterData}[rnd.IntN(4)])
		case op < 90: // dequeue a pending bundle
			for _, g := range []domain.PeekGroup{domain.GroupTimeSeries, domain.GroupAggregations, domain.GroupMasterData}[rnd.IntN(3):] {
				p := m.pending[g]
				if p == nil {
					continue
				}
				if err := repo.Dequeue(ctx, r, p.id); err != nil {
					t.Fatalf("step %d: dequeue: %v", step, err)
				}
				m.acked[p.cab] += len(p.ids)
				delete(m.pending, g)
				dequeued = append(dequeued, r+"|"+p.id)
				break
			}
		case op < 93: // dequeue one dequeued already
			if len(dequeued) > 0 {
				d := dequeued[rnd.IntN(len(dequeued))]
				rr, id := d[:36], d[37:]
				if err := repo.Dequeue(ctx, rr, id); !errors.Is(err, domain.ErrNotFound) {
					t.Fatalf("step %d: a second dequeue of %s: %v", step, id, err)
				}
			}
		case op < 96: // retention, sometimes past everything dequeued so far
			if rnd.IntN(2) == 0 {
				now.Add(int64(8 * 24 * time.Hour))
				resavable = nil // the dequeued ones may be gone
			}
			if err := repo.SweepNow(ctx); err != nil {
				t.Fatalf("step %d: sweep: %v", step, err)
			}
		case op < 98: // a clean restart
			repo.Close()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s, err = Open(dir, nil); err != nil {
				t.Fatal(err)
			}
			repo = open()
		default: // a crash
			repo.Close()
			s = crashAndReopen(t, s, dir)
			repo = open()
		}
	}
	// Everything saved is delivered, once, in the model's order.
	for _, r := range recipients {
		for i := 0; ; i++ {
			if i > 100_000 {
				t.Fatal("draining does not end")
			}
			b := peek(steps, r, domain.GroupAll)
			if b == nil {
				break
			}
			if err := repo.Dequeue(ctx, r, b.ID); err != nil {
				t.Fatal(err)
			}
			for g, p := range model[r].pending {
				if p.id == b.ID {
					model[r].acked[p.cab] += len(p.ids)
					delete(model[r].pending, g)
				}
			}
		}
		for _, c := range cabs {
			if model[r].acked[c] != len(model[r].items[c]) {
				t.Fatalf("%s %v: %d of %d delivered", r, c, model[r].acked[c], len(model[r].items[c]))
			}
		}
	}
}
