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
	cabs    []modelCab // the cabinets it is saved to
	items   map[modelCab][]modelItem
	acked   map[modelCab]int
	pending map[domain.PeekGroup]*modelPending
	seq     int
}

// modelCabs are the cabinets the model tests save to: two of one domain,
// and one of each other group.
var modelCabs = []modelCab{
	{domain.OriginTimeSeries, "a"}, {domain.OriginTimeSeries, "b"}, {domain.OriginCharges, "a"},
	{domain.OriginMeteringPoints, "a"}, {domain.OriginAggregations, "a"},
}

// newModelRecipient is a recipient saved to cabs, modelCabs when none.
func newModelRecipient(cabs ...modelCab) *modelRecipient {
	if len(cabs) == 0 {
		cabs = modelCabs
	}
	return &modelRecipient{cabs: cabs, items: map[modelCab][]modelItem{}, acked: map[modelCab]int{}, pending: map[domain.PeekGroup]*modelPending{}}
}

// pendingIn is the recipient's pending bundles that a Peek of g sees, the
// first cut first.
func (m *modelRecipient) pendingIn(g domain.PeekGroup) []*modelPending {
	var pend []*modelPending
	for pg, p := range m.pending {
		if g.IsAll() || pg == g {
			pend = append(pend, p)
		}
	}
	slices.SortFunc(pend, func(a, b *modelPending) int { return a.created - b.created })
	return pend
}

// cut is the bundle the bundling rule cuts from cabinet c at its cursor
// with the weight limit, ended before position end.
func (m *modelRecipient) cut(c modelCab, end int, limit int64) []string {
	var ids []string
	var weight int64
	for _, it := range m.items[c][m.acked[c]:min(end, len(m.items[c]))] {
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
	return ids
}

// next is what a Peek of g returns: the pending bundle of g cut first,
// else a new bundle (no id yet) cut from the cabinet whose first
// unacknowledged notification was saved first; nil when there is none.
func (m *modelRecipient) next(g domain.PeekGroup, limit int64) *modelPending {
	if pend := m.pendingIn(g); len(pend) > 0 {
		return pend[0]
	}
	var best *modelCab
	bestSeq := 0
	for _, c := range m.cabs {
		if !g.Contains(c.origin) || m.acked[c] >= len(m.items[c]) {
			continue
		}
		if seq := m.items[c][m.acked[c]].seq; best == nil || seq < bestSeq {
			best, bestSeq = &c, seq
		}
	}
	if best == nil {
		return nil
	}
	return &modelPending{cab: *best, ids: m.cut(*best, len(m.items[*best]), limit)}
}

// peeked checks a Peek's answer b (what names the Peek) against want, the
// model's, and records a bundle cut anew as pending, the created-th.
func (m *modelRecipient) peeked(t *testing.T, what string, b *domain.Bundle, want *modelPending, created *int) {
	t.Helper()
	if want == nil {
		if b != nil {
			t.Fatalf("%s returned %d notifications, want none", what, len(b.NotificationIDs))
		}
		return
	}
	if b == nil || !slices.Equal(b.NotificationIDs, want.ids) {
		t.Fatalf("%s returned %v, want %v from %v", what, b, want.ids, want.cab)
	}
	if want.id != "" && b.ID != want.id {
		t.Fatalf("%s returned bundle %s, want the pending %s", what, b.ID, want.id)
	}
	if want.id == "" {
		*created++
		want.id, want.created = b.ID, *created
		m.pending[domain.GroupOf(want.cab.origin)] = want
	}
}

// dequeued records the dequeue of the recipient's pending bundle id.
func (m *modelRecipient) dequeued(id string) {
	for g, p := range m.pending {
		if p.id == id {
			m.acked[p.cab] += len(p.ids)
			delete(m.pending, g)
		}
	}
}

// modelHub is a hub over the store in dir, which the model tests restart
// and crash.
type modelHub struct {
	dir  string
	s    *Store
	repo *hub.Hub
	opts hub.Options
}

func openModelHub(t *testing.T, opts hub.Options) *modelHub {
	t.Helper()
	h := &modelHub{dir: t.TempDir(), opts: opts}
	var err error
	if h.s, err = Open(h.dir, nil); err != nil {
		t.Fatal(err)
	}
	h.repo = hub.New(h.s, opts, nil)
	t.Cleanup(func() { h.repo.Close(); _ = h.s.Close() })
	return h
}

// restart closes the hub and the store cleanly and opens them again.
func (h *modelHub) restart(t *testing.T) {
	t.Helper()
	h.repo.Close()
	if err := h.s.Close(); err != nil {
		t.Fatal(err)
	}
	var err error
	if h.s, err = Open(h.dir, nil); err != nil {
		t.Fatal(err)
	}
	h.repo = hub.New(h.s, h.opts, nil)
}

// crash stops the store as a crash would and opens it again.
func (h *modelHub) crash(t *testing.T) {
	t.Helper()
	h.repo.Close()
	h.s = crashAndReopen(t, h.s, h.dir)
	h.repo = hub.New(h.s, h.opts, nil)
}

// drain peeks (ALL) and dequeues the recipient's bundles until none is
// left, and checks that every notification the model holds was delivered.
func (h *modelHub) drain(t *testing.T, r string, m *modelRecipient, peek func() *domain.Bundle) {
	t.Helper()
	for i := 0; ; i++ {
		if i > 100_000 {
			t.Fatal("draining does not end")
		}
		b := peek()
		if b == nil {
			break
		}
		if err := h.repo.Dequeue(context.Background(), r, b.ID); err != nil {
			t.Fatal(err)
		}
		m.dequeued(b.ID)
	}
	for _, c := range m.cabs {
		if m.acked[c] != len(m.items[c]) {
			t.Fatalf("%s %v: %d of %d delivered", r, c, m.acked[c], len(m.items[c]))
		}
	}
}

// The hub over a real store, driven by random Saves, Peeks, Dequeues,
// retention sweeps, restarts and crashes, answers every Peek as a model of
// the contract says it must: the pending bundle of the group, else the
// bundle the bundling rule cuts from the cabinet whose first unacknowledged
// notification was saved first; nothing is lost or delivered again.
func TestTheHubOverPebbleAnswersAsTheModel(t *testing.T) {
	const steps = 400
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Add(int64(time.Millisecond))) }
	const limit = 51_200
	h := openModelHub(t, hub.Options{Now: clock, SweepInterval: time.Hour, MaxBundleWeight: limit})
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // a test's spread
	recipients := []string{uuid.NewString(), uuid.NewString()}
	model := map[string]*modelRecipient{}
	for _, r := range recipients {
		model[r] = newModelRecipient()
	}
	created := 0
	var dequeued []string               // bundle ids, to dequeue again
	var resavable []domain.Notification // saved ones, not dequeued or not yet past retention

	peek := func(step int, r string, g domain.PeekGroup) *domain.Bundle {
		m := model[r]
		want := m.next(g, limit)
		b, err := h.repo.Peek(ctx, r, g, "")
		if err != nil {
			t.Fatalf("step %d: peek: %v", step, err)
		}
		m.peeked(t, fmt.Sprintf("step %d: peek %v", step, g), b, want, &created)
		return b
	}

	for step := range steps {
		r := recipients[rnd.IntN(len(recipients))]
		m := model[r]
		switch op := rnd.IntN(100); {
		case op < 35: // save
			var ns []domain.Notification
			if rnd.IntN(20) == 0 { // a bulk save into one cabinet: drawers fill up
				c := modelCabs[rnd.IntN(len(modelCabs))]
				for range 2000 + rnd.IntN(8000) {
					ns = append(ns, domain.Notification{ID: uuid.NewString(), Recipient: r, Origin: c.origin,
						ContentType: c.ct, DocumentType: c.ct, SupportsBundling: true, Weight: 1})
				}
			} else {
				for range 1 + rnd.IntN(20) {
					c := modelCabs[rnd.IntN(len(modelCabs))]
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
			res, err := h.repo.Save(ctx, slices.Clone(ns))
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
				if err := h.repo.Dequeue(ctx, r, p.id); err != nil {
					t.Fatalf("step %d: dequeue: %v", step, err)
				}
				m.dequeued(p.id)
				dequeued = append(dequeued, r+"|"+p.id)
				break
			}
		case op < 93: // dequeue one dequeued already
			if len(dequeued) > 0 {
				d := dequeued[rnd.IntN(len(dequeued))]
				rr, id := d[:36], d[37:]
				if err := h.repo.Dequeue(ctx, rr, id); !errors.Is(err, domain.ErrNotFound) {
					t.Fatalf("step %d: a second dequeue of %s: %v", step, id, err)
				}
			}
		case op < 96: // retention, sometimes past everything dequeued so far
			if rnd.IntN(2) == 0 {
				now.Add(int64(8 * 24 * time.Hour))
				resavable = nil // the dequeued ones may be gone
			}
			if err := h.repo.SweepNow(ctx); err != nil {
				t.Fatalf("step %d: sweep: %v", step, err)
			}
		case op < 98: // a clean restart
			h.restart(t)
		default: // a crash
			h.crash(t)
		}
	}
	// Everything saved is delivered, once, in the model's order.
	for _, r := range recipients {
		h.drain(t, r, model[r], func() *domain.Bundle { return peek(steps, r, domain.GroupAll) })
	}
}
