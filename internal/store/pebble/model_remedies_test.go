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

// The hub over a real store, driven by random Saves, Peeks (with bundle ids:
// new, pending, used and freed by retention), Dequeues, an operator's
// releases and acknowledgements on an actor's behalf, retention sweeps,
// restarts and crashes, answers as the model says: every Peek, every
// refusal, every acknowledgement's notifications, and every dequeued
// bundle read back.
func TestTheHubOverPebbleWithRemediesAndBundleIDsAnswersAsTheModel(t *testing.T) {
	for seed := range uint64(4) {
		runRemedyModel(t, seed, 500)
	}
}

func runRemedyModel(t *testing.T, seed uint64, steps int) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Add(int64(time.Millisecond))) }
	const limit = 20
	h := openModelHub(t, hub.Options{Now: clock, SweepInterval: time.Hour, MaxBundleWeight: limit, MaxAcknowledgeBundles: 3})
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(seed, 7)) //nolint:gosec // a test's spread
	recipients := []string{uuid.NewString(), uuid.NewString()}
	model := map[string]*modelRecipient{}
	used := map[string]map[string]bool{} // per recipient: ids dequeued or released, kept by retention
	freed := map[string][]string{}       // per recipient: ids retention removed
	lastDequeue := map[string][]string{} // recipient|bundle -> notification ids
	for _, r := range recipients {
		model[r] = newModelRecipient()
		used[r] = map[string]bool{}
	}
	created := 0

	dequeued := func(step int, r, id string, ids []string) {
		used[r][id] = true
		lastDequeue[r+"|"+id] = ids
		b, err := h.repo.DequeuedBundle(ctx, r, id)
		if err != nil || !slices.Equal(b.NotificationIDs, ids) {
			t.Fatalf("seed %d step %d: dequeued bundle %s reads back %v, %v; want %v", seed, step, id, b, err, ids)
		}
	}

	peek := func(step int, r string, g domain.PeekGroup, id string) *domain.Bundle {
		m := model[r]
		pend := m.pendingIn(g)
		var wantErr error
		switch {
		case id == "":
		case slices.ContainsFunc(pend, func(p *modelPending) bool { return p.id == id }):
		case len(pend) > 0:
			wantErr = domain.ErrOtherBundlePending
		case used[r][id] || slices.ContainsFunc(m.pendingIn(domain.GroupAll), func(p *modelPending) bool { return p.id == id }):
			wantErr = domain.ErrBundleIDInUse
		}
		want := m.next(g, limit)
		if i := slices.IndexFunc(pend, func(p *modelPending) bool { return p.id == id }); id != "" && i >= 0 {
			want = pend[i]
		}
		b, err := h.repo.Peek(ctx, r, g, id)
		if wantErr != nil {
			if !errors.Is(err, wantErr) {
				t.Fatalf("seed %d step %d: peek %v %s: %v, %v; want %v", seed, step, g, id, b, err, wantErr)
			}
			return nil
		}
		if err != nil {
			t.Fatalf("seed %d step %d: peek %v %s: %v", seed, step, g, id, err)
		}
		if b != nil && id != "" && b.ID != id {
			t.Fatalf("seed %d step %d: peek %v with id %s returned bundle %s", seed, step, g, id, b.ID)
		}
		m.peeked(t, fmt.Sprintf("seed %d step %d: peek %v %q", seed, step, g, id), b, want, &created)
		return b
	}

	for step := range steps {
		r := recipients[rnd.IntN(len(recipients))]
		m := model[r]
		groups := []domain.PeekGroup{domain.GroupTimeSeries, domain.GroupAggregations, domain.GroupMasterData}
		switch op := rnd.IntN(100); {
		case op < 30: // save
			var ns []domain.Notification
			for range 1 + rnd.IntN(12) {
				c := modelCabs[rnd.IntN(len(modelCabs))]
				ns = append(ns, domain.Notification{ID: uuid.NewString(), Recipient: r, Origin: c.origin,
					ContentType: c.ct, DocumentType: "d", SupportsBundling: rnd.IntN(8) != 0, Weight: int64(1 + rnd.IntN(limit+2))})
			}
			if _, err := h.repo.Save(ctx, slices.Clone(ns)); err != nil {
				t.Fatalf("seed %d step %d: save: %v", seed, step, err)
			}
			for _, n := range ns {
				m.seq++
				c := modelCab{n.Origin, n.ContentType}
				m.items[c] = append(m.items[c], modelItem{n: n, seq: m.seq})
			}
		case op < 55: // peek, with an id or not
			g := append(groups, domain.GroupAll)[rnd.IntN(4)]
			id := ""
			switch rnd.IntN(5) {
			case 0:
				id = uuid.NewString()
			case 1:
				if p := m.pendingIn(domain.GroupAll); len(p) > 0 {
					id = p[rnd.IntN(len(p))].id
				}
			case 2:
				for u := range used[r] {
					id = u
					break
				}
			case 3:
				if f := freed[r]; len(f) > 0 {
					id = f[rnd.IntN(len(f))]
				}
			}
			peek(step, r, g, id)
		case op < 72: // dequeue a pending bundle
			for _, g := range groups[rnd.IntN(3):] {
				p := m.pending[g]
				if p == nil {
					continue
				}
				if err := h.repo.Dequeue(ctx, r, p.id); err != nil {
					t.Fatalf("seed %d step %d: dequeue: %v", seed, step, err)
				}
				m.dequeued(p.id)
				dequeued(step, r, p.id, p.ids)
				break
			}
		case op < 78: // an operator releases a pending bundle
			for _, g := range groups[rnd.IntN(3):] {
				p := m.pending[g]
				if p == nil {
					continue
				}
				if _, err := h.repo.ReleaseBundle(ctx, r, p.id); err != nil {
					t.Fatalf("seed %d step %d: release: %v", seed, step, err)
				}
				delete(m.pending, g)
				used[r][p.id] = true
				delete(lastDequeue, r+"|"+p.id)
				break
			}
		case op < 88: // an operator acknowledges a cabinet up to a notification
			c := modelCabs[rnd.IntN(len(modelCabs))]
			if len(m.items[c]) == 0 {
				continue
			}
			k := rnd.IntN(len(m.items[c]))
			g := domain.GroupOf(c.origin)
			var want [][]string
			var wantErr error
			acked := m.acked[c]
			if acked <= k {
				if p := m.pending[g]; p != nil && p.cab != c {
					wantErr = domain.ErrOtherBundlePending
				} else {
					if p != nil {
						want = append(want, p.ids)
						acked += len(p.ids)
					}
					for acked <= k {
						ids := (&modelRecipient{items: m.items, acked: map[modelCab]int{c: acked}}).cut(c, k+1, limit)
						want = append(want, ids)
						acked += len(ids)
					}
				}
			}
			var got []hub.Acknowledged
			for {
				a, err := h.repo.AcknowledgeOnBehalf(ctx, r, c.origin, c.ct, m.items[c][k].n.ID)
				if m.acked[c] > k && errors.Is(err, domain.ErrNotFound) {
					break // dequeued, and retention may have removed it
				}
				if wantErr != nil {
					if !errors.Is(err, wantErr) {
						t.Fatalf("seed %d step %d: acknowledge: %v, want %v", seed, step, err, wantErr)
					}
					break
				}
				if err != nil {
					t.Fatalf("seed %d step %d: acknowledge: %v", seed, step, err)
				}
				got = append(got, a)
				if !a.More {
					break
				}
			}
			if wantErr != nil {
				continue
			}
			var gotIDs [][]string
			for _, a := range got {
				for _, rec := range a.Bundles {
					b, err := h.repo.DequeuedBundle(ctx, r, rec.ID)
					if err != nil {
						t.Fatalf("seed %d step %d: acknowledged bundle %s: %v", seed, step, rec.ID, err)
					}
					gotIDs = append(gotIDs, b.NotificationIDs)
					used[r][rec.ID] = true
					lastDequeue[r+"|"+rec.ID] = b.NotificationIDs
				}
			}
			if !slices.EqualFunc(gotIDs, want, slices.Equal) {
				t.Fatalf("seed %d step %d: acknowledged %v up to %d of %v (acked %d), want %v", seed, step, gotIDs, k, c, m.acked[c], want)
			}
			m.acked[c] = acked
			if want != nil {
				delete(m.pending, g)
			}
		case op < 93: // retention, sometimes past everything dequeued or released so far
			if rnd.IntN(2) == 0 {
				now.Add(int64(8 * 24 * time.Hour))
				for _, rr := range recipients { // every id used so far is past its retention
					for u := range used[rr] {
						freed[rr] = append(freed[rr], u)
					}
					used[rr] = map[string]bool{}
				}
			}
			if err := h.repo.SweepNow(ctx); err != nil {
				t.Fatalf("seed %d step %d: sweep: %v", seed, step, err)
			}
		case op < 96: // a dequeued bundle read back
			for key, ids := range lastDequeue {
				rr, id := key[:36], key[37:]
				if !used[rr][id] {
					continue
				}
				b, err := h.repo.DequeuedBundle(ctx, rr, id)
				if err != nil || !slices.Equal(b.NotificationIDs, ids) {
					t.Fatalf("seed %d step %d: dequeued bundle %s reads back %v, %v; want %v", seed, step, id, b, err, ids)
				}
				break
			}
		case op < 98: // a clean restart
			h.restart(t)
		default: // a crash
			h.crash(t)
		}
	}
	for _, r := range recipients {
		h.drain(t, r, model[r], func() *domain.Bundle { return peek(steps, r, domain.GroupAll, "") })
	}
}
