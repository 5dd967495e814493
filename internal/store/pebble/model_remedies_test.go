package pebble

import (
	"context"
	"errors"
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
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Add(int64(time.Millisecond))) }
	const limit = 20
	open := func() *hub.Hub {
		return hub.New(s, hub.Options{Now: clock, SweepInterval: time.Hour, MaxBundleWeight: limit, MaxAcknowledgeBundles: 3}, nil)
	}
	repo := open()
	defer func() { repo.Close(); _ = s.Close() }()
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(seed, 7)) //nolint:gosec // a test's spread
	recipients := []string{uuid.NewString(), uuid.NewString()}
	model := map[string]*modelRecipient{}
	used := map[string]map[string]bool{} // per recipient: ids dequeued or released, kept by retention
	freed := map[string][]string{}       // per recipient: ids retention removed
	lastDequeue := map[string][]string{} // recipient|bundle -> notification ids
	for _, r := range recipients {
		model[r] = &modelRecipient{items: map[modelCab][]modelItem{}, acked: map[modelCab]int{}, pending: map[domain.PeekGroup]*modelPending{}}
		used[r] = map[string]bool{}
	}
	cabs := []modelCab{
		{domain.OriginTimeSeries, "a"}, {domain.OriginTimeSeries, "b"}, {domain.OriginCharges, "a"},
		{domain.OriginMeteringPoints, "a"}, {domain.OriginAggregations, "a"},
	}
	created := 0

	// cutFrom is the bundle the rule cuts from cabinet c at its cursor,
	// ended before position end.
	cutFrom := func(m *modelRecipient, c modelCab, end int) []string {
		var ids []string
		var weight int64
		for i := m.acked[c]; i < len(m.items[c]) && i < end; i++ {
			it := m.items[c][i]
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
	pendingOf := func(m *modelRecipient, g domain.PeekGroup) []*modelPending {
		var pend []*modelPending
		for pg, p := range m.pending {
			if g.IsAll() || pg == g {
				pend = append(pend, p)
			}
		}
		slices.SortFunc(pend, func(a, b *modelPending) int { return a.created - b.created })
		return pend
	}
	expected := func(m *modelRecipient, g domain.PeekGroup) (*modelPending, []string) {
		if pend := pendingOf(m, g); len(pend) > 0 {
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
		ids := cutFrom(m, *best, len(m.items[*best]))
		return &modelPending{cab: *best, ids: ids}, ids
	}
	dequeued := func(step int, r, id string, ids []string) {
		used[r][id] = true
		lastDequeue[r+"|"+id] = ids
		b, err := repo.DequeuedBundle(ctx, r, id)
		if err != nil || !slices.Equal(b.NotificationIDs, ids) {
			t.Fatalf("seed %d step %d: dequeued bundle %s reads back %v, %v; want %v", seed, step, id, b, err, ids)
		}
	}

	peek := func(step int, r string, g domain.PeekGroup, id string) {
		m := model[r]
		pend := pendingOf(m, g)
		var wantErr error
		switch {
		case id == "":
		case slices.ContainsFunc(pend, func(p *modelPending) bool { return p.id == id }):
		case len(pend) > 0:
			wantErr = domain.ErrOtherBundlePending
		case used[r][id] || slices.ContainsFunc(pendingOf(m, domain.GroupAll), func(p *modelPending) bool { return p.id == id }):
			wantErr = domain.ErrBundleIDInUse
		}
		want, wantIDs := expected(m, g)
		if id != "" && wantErr == nil {
			if i := slices.IndexFunc(pend, func(p *modelPending) bool { return p.id == id }); i >= 0 {
				want, wantIDs = pend[i], pend[i].ids
			}
		}
		b, err := repo.Peek(ctx, r, g, id)
		if wantErr != nil {
			if !errors.Is(err, wantErr) {
				t.Fatalf("seed %d step %d: peek %v %s: %v, %v; want %v", seed, step, g, id, b, err, wantErr)
			}
			return
		}
		if err != nil {
			t.Fatalf("seed %d step %d: peek %v %s: %v", seed, step, g, id, err)
		}
		if want == nil {
			if b != nil {
				t.Fatalf("seed %d step %d: peek %v returned %d notifications, want none", seed, step, g, len(b.NotificationIDs))
			}
			return
		}
		if b == nil || !slices.Equal(b.NotificationIDs, wantIDs) {
			t.Fatalf("seed %d step %d: peek %v %s returned %v, want %v from %v", seed, step, g, id, b, wantIDs, want.cab)
		}
		if want.id != "" && b.ID != want.id {
			t.Fatalf("seed %d step %d: peek %v returned bundle %s, want the pending %s", seed, step, g, b.ID, want.id)
		}
		if id != "" && b.ID != id {
			t.Fatalf("seed %d step %d: peek %v with id %s returned bundle %s", seed, step, g, id, b.ID)
		}
		if want.id == "" {
			created++
			want.id, want.created = b.ID, created
			m.pending[domain.GroupOf(want.cab.origin)] = want
		}
	}

	for step := range steps {
		r := recipients[rnd.IntN(len(recipients))]
		m := model[r]
		groups := []domain.PeekGroup{domain.GroupTimeSeries, domain.GroupAggregations, domain.GroupMasterData}
		switch op := rnd.IntN(100); {
		case op < 30: // save
			var ns []domain.Notification
			for range 1 + rnd.IntN(12) {
				c := cabs[rnd.IntN(len(cabs))]
				ns = append(ns, domain.Notification{ID: uuid.NewString(), Recipient: r, Origin: c.origin,
					ContentType: c.ct, DocumentType: "d", SupportsBundling: rnd.IntN(8) != 0, Weight: int64(1 + rnd.IntN(limit+2))})
			}
			if _, err := repo.Save(ctx, slices.Clone(ns)); err != nil {
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
				if p := pendingOf(m, domain.GroupAll); len(p) > 0 {
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
				if err := repo.Dequeue(ctx, r, p.id); err != nil {
					t.Fatalf("seed %d step %d: dequeue: %v", seed, step, err)
				}
				m.acked[p.cab] += len(p.ids)
				delete(m.pending, g)
				dequeued(step, r, p.id, p.ids)
				break
			}
		case op < 78: // an operator releases a pending bundle
			for _, g := range groups[rnd.IntN(3):] {
				p := m.pending[g]
				if p == nil {
					continue
				}
				if _, err := repo.ReleaseBundle(ctx, r, p.id); err != nil {
					t.Fatalf("seed %d step %d: release: %v", seed, step, err)
				}
				delete(m.pending, g)
				used[r][p.id] = true
				delete(lastDequeue, r+"|"+p.id)
				break
			}
		case op < 88: // an operator acknowledges a cabinet up to a notification
			c := cabs[rnd.IntN(len(cabs))]
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
						ids := cutFrom(&modelRecipient{items: m.items, acked: map[modelCab]int{c: acked}}, c, k+1)
						want = append(want, ids)
						acked += len(ids)
					}
				}
			}
			var got []hub.Acknowledged
			for {
				a, err := repo.AcknowledgeOnBehalf(ctx, r, c.origin, c.ct, m.items[c][k].n.ID)
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
					b, err := repo.DequeuedBundle(ctx, r, rec.ID)
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
			if err := repo.SweepNow(ctx); err != nil {
				t.Fatalf("seed %d step %d: sweep: %v", seed, step, err)
			}
		case op < 96: // a dequeued bundle read back
			for key, ids := range lastDequeue {
				rr, id := key[:36], key[37:]
				if !used[rr][id] {
					continue
				}
				b, err := repo.DequeuedBundle(ctx, rr, id)
				if err != nil || !slices.Equal(b.NotificationIDs, ids) {
					t.Fatalf("seed %d step %d: dequeued bundle %s reads back %v, %v; want %v", seed, step, id, b, err, ids)
				}
				break
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
	for _, r := range recipients {
		for i := 0; ; i++ {
			if i > 100_000 {
				t.Fatal("draining does not end")
			}
			m := model[r]
			want, _ := expected(m, domain.GroupAll)
			peek(steps, r, domain.GroupAll, "")
			if want == nil {
				break
			}
			p := pendingOf(m, domain.GroupAll)[0]
			if err := repo.Dequeue(ctx, r, p.id); err != nil {
				t.Fatal(err)
			}
			m.acked[p.cab] += len(p.ids)
			delete(m.pending, domain.GroupOf(p.cab.origin))
		}
		for _, c := range cabs {
			if model[r].acked[c] != len(model[r].items[c]) {
				t.Fatalf("%s %v: %d of %d delivered", r, c, model[r].acked[c], len(model[r].items[c]))
			}
		}
	}
}
