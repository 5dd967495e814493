package pebble

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/drawer"
	"github.com/energydatahub/messagehub/internal/hub"
)

// edgeModel is one run of the model at the contract's edges.
type edgeModel struct {
	limit    int64      // the bundle weight limit
	drawers  int        // the cabinets' bound on drawers (0: the default)
	cabs     []modelCab // the cabinets saved to
	bulk     bool       // some saves fill most of a drawer of the last cabinet
	maxSteps int
}

// The hub over a real store answers as the model at the contract's edges:
// Saves holding the same notification twice (a duplicate) or two under one
// id (refused whole, storing nothing), weights of exactly the limit, one
// over it and 2^31-1, notifications that do not support bundling, fifteen
// cabinets of every domain, cabinets bound to one to three drawers (a Save
// refused for the bound stores nothing, and is refused only when it does
// not fit), and bundles of the highest weight limit over many drawers;
// amid Peeks of every group, Dequeues, retention, restarts and crashes.
// With bulk saves, one cabinet takes the small saves and the other runs of
// up to 10,000 light notifications that bundle: its drawers fill, and its
// bundles span them.
func TestTheHubOverPebbleAnswersAsTheModelAtTheEdges(t *testing.T) {
	var many []modelCab
	for _, o := range domain.Origins {
		for i := range 3 {
			many = append(many, modelCab{o, fmt.Sprintf("ct-%d", i)})
		}
	}
	two := []modelCab{{domain.OriginTimeSeries, "a"}, {domain.OriginCharges, "a"}}
	for _, c := range []struct {
		name string
		m    edgeModel
	}{
		{"ManyCabinets", edgeModel{limit: 100, cabs: many, maxSteps: 600}},
		{"BoundedCabinets", edgeModel{limit: 30_000, drawers: 1, cabs: two, bulk: true, maxSteps: 250}},
		{"CabinetsOfThreeDrawers", edgeModel{limit: 30_000, drawers: 3, cabs: two, bulk: true, maxSteps: 250}},
		{"HighestLimit", edgeModel{limit: domain.HighestMaxBundleWeight, cabs: two, bulk: true, maxSteps: 200}},
	} {
		t.Run(c.name, func(t *testing.T) { runEdgeModel(t, 0, c.m) })
	}
}

func runEdgeModel(t *testing.T, seed uint64, cfg edgeModel) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Add(int64(time.Millisecond))) }
	h := openModelHub(t, hub.Options{Now: clock, SweepInterval: time.Hour, MaxBundleWeight: cfg.limit, MaxCabinetDrawers: cfg.drawers})
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(seed, 11)) //nolint:gosec // a test's spread
	r := uuid.NewString()
	m := newModelRecipient(cfg.cabs...)
	created := 0
	var resavable []domain.Notification // saved, and kept by retention
	stored := map[string]bool{}
	groups := []domain.PeekGroup{domain.GroupAll, domain.GroupTimeSeries, domain.GroupAggregations, domain.GroupMasterData}
	note := func(c modelCab, w int64, bundling bool) domain.Notification {
		return domain.Notification{ID: uuid.NewString(), Recipient: r, Origin: c.origin, ContentType: c.ct,
			DocumentType: fmt.Sprintf("d%d", rnd.IntN(3)), SupportsBundling: bundling, Weight: w}
	}
	peek := func(step int, g domain.PeekGroup) *domain.Bundle {
		want := m.next(g, cfg.limit)
		b, err := h.repo.Peek(ctx, r, g, "")
		if err != nil {
			t.Fatalf("seed %d step %d: peek %v: %v", seed, step, g, err)
		}
		m.peeked(t, fmt.Sprintf("seed %d step %d: peek %v", seed, step, g), b, want, &created)
		return b
	}
	for step := range cfg.maxSteps {
		switch op := rnd.IntN(100); {
		case op < 35:
			var ns []domain.Notification
			for range 1 + rnd.IntN(8) {
				w := int64(1 + rnd.IntN(40))
				switch rnd.IntN(12) {
				case 0:
					w = math.MaxInt32
				case 1:
					w = cfg.limit
				case 2:
					w = cfg.limit + 1
				}
				c := cfg.cabs[rnd.IntN(len(cfg.cabs))]
				if cfg.bulk {
					c = cfg.cabs[0]
				}
				ns = append(ns, note(c, w, rnd.IntN(6) != 0))
			}
			if cfg.bulk && rnd.IntN(3) == 0 { // the last cabinet takes these alone: long bundles
				for range 1000 + rnd.IntN(8990) {
					ns = append(ns, note(cfg.cabs[len(cfg.cabs)-1], int64(1+rnd.IntN(3)), rnd.IntN(20_000) != 0))
				}
			}
			dups := 0
			if rnd.IntN(3) == 0 { // the same notification twice in one Save
				ns = append(ns, ns[rnd.IntN(len(ns))])
				dups++
			}
			if rnd.IntN(3) == 0 && len(resavable) > 0 {
				ns = append(ns, resavable[rnd.IntN(len(resavable))])
				dups++
			}
			conflicting := rnd.IntN(8) == 0
			if conflicting { // two notifications under one id
				twin := ns[rnd.IntN(len(ns))]
				twin.Weight = twin.Weight%math.MaxInt32 + 1
				ns = append(ns, twin)
			}
			rnd.Shuffle(len(ns), func(i, j int) { ns[i], ns[j] = ns[j], ns[i] })
			res, err := h.repo.Save(ctx, slices.Clone(ns))
			switch {
			case conflicting:
				if !errors.Is(err, domain.ErrNotificationConflict) {
					t.Fatalf("seed %d step %d: a Save of two notifications under one id: %+v, %v", seed, step, res, err)
				}
				continue
			case errors.Is(err, domain.ErrCabinetFull) && cfg.drawers > 0:
				checkFull(t, h, r, slices.DeleteFunc(slices.Clone(ns), func(n domain.Notification) bool { return stored[n.ID] }), cfg.drawers)
				continue
			case err != nil:
				t.Fatalf("seed %d step %d: save: %v", seed, step, err)
			}
			if res.Saved != len(ns)-dups || res.Duplicates != dups {
				t.Fatalf("seed %d step %d: save of %d with %d duplicates: %+v", seed, step, len(ns), dups, res)
			}
			for _, n := range ns {
				if stored[n.ID] {
					continue
				}
				stored[n.ID] = true
				m.seq++
				c := modelCab{n.Origin, n.ContentType}
				m.items[c] = append(m.items[c], modelItem{n: n, seq: m.seq})
				if rnd.IntN(20) == 0 {
					resavable = append(resavable, n)
				}
			}
		case op < 65:
			peek(step, groups[rnd.IntN(len(groups))])
		case op < 92:
			for _, g := range groups[1+rnd.IntN(3):] {
				if p := m.pending[g]; p != nil {
					if err := h.repo.Dequeue(ctx, r, p.id); err != nil {
						t.Fatalf("seed %d step %d: dequeue: %v", seed, step, err)
					}
					m.dequeued(p.id)
					break
				}
			}
		case op < 96:
			if rnd.IntN(2) == 0 {
				now.Add(int64(8 * 24 * time.Hour))
				resavable = nil // the dequeued ones may be gone
			}
			if err := h.repo.SweepNow(ctx); err != nil {
				t.Fatalf("seed %d step %d: sweep: %v", seed, step, err)
			}
		case op < 98:
			h.restart(t)
		default:
			h.crash(t)
		}
	}
	h.drain(t, r, m, func() *domain.Bundle { return peek(cfg.maxSteps, domain.GroupAll) })
}

// checkFull fails the test unless a cabinet of the refused Save has no
// room within bound drawers for ns, its notifications not stored before
// (refused saves store nothing: the model's drain finds any that was).
func checkFull(t *testing.T, h *modelHub, r string, ns []domain.Notification, bound int) {
	t.Helper()
	state, err := h.s.LoadRecipient(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	need := map[catalog.Key]map[string]bool{}
	for _, n := range ns {
		k := catalog.Key{Origin: n.Origin, ContentType: n.ContentType}
		if need[k] == nil {
			need[k] = map[string]bool{}
		}
		need[k][n.ID] = true
	}
	for k, ids := range need {
		room := bound * drawer.Capacity
		if i := slices.IndexFunc(state.Entries, func(e catalog.Entry) bool { return e.Key() == k }); i >= 0 && len(state.Entries[i].Drawers) > 0 {
			ds := state.Entries[i].Drawers
			room = (bound-len(ds))*drawer.Capacity + drawer.Capacity - ds[len(ds)-1].Count
		}
		if len(ids) > room {
			return
		}
	}
	counts := map[catalog.Key]int{}
	for k, ids := range need {
		counts[k] = len(ids)
	}
	t.Fatalf("a Save of new notifications %v (by cabinet) was refused for the cabinet bound, but every cabinet has room", counts)
}

// Callers that Save overlapping notifications at once store each once:
// every notification saved is delivered exactly once, as many as the
// Saves counted saved; of two Saves that race with one id for different
// notifications, exactly one stores it and the other is refused whole.
func TestConcurrentSavesOfOverlappingIDsStoreEachOnce(t *testing.T) {
	h := openModelHub(t, hub.Options{})
	ctx := context.Background()
	r := uuid.NewString()
	rnd := rand.New(rand.NewPCG(3, 4)) //nolint:gosec // a test's spread
	note := func(weight int64) domain.Notification {
		return domain.Notification{ID: uuid.NewString(), Recipient: r, Origin: domain.OriginCharges,
			ContentType: "c", DocumentType: "c", SupportsBundling: true, Weight: weight}
	}
	var pool []domain.Notification
	for range 2000 {
		pool = append(pool, note(1))
	}
	// Each round: callers Save overlapping draws from the pool, and two
	// of them each a notification of their own under one shared id.
	const callers, rounds = 8, 20
	saved := 0
	weights := map[string]int64{} // the raced ids, by the weight stored
	for range rounds {
		batches := make([][]domain.Notification, callers)
		for c := range batches {
			for range 1 + rnd.IntN(200) {
				batches[c] = append(batches[c], pool[rnd.IntN(len(pool))])
			}
		}
		raced := note(2) // alone in its cabinet and its bundle
		raced.ContentType, raced.DocumentType, raced.SupportsBundling = "raced", "raced", false
		twin := raced
		twin.Weight = 3
		batches[0] = append(batches[0], raced)
		batches[1] = append(batches[1], twin)
		results := make([]domain.SaveResult, callers)
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for c := range batches {
			wg.Go(func() { results[c], errs[c] = h.repo.Save(ctx, slices.Clone(batches[c])) })
		}
		wg.Wait()
		for c := 2; c < callers; c++ {
			if errs[c] != nil {
				t.Fatal(errs[c])
			}
		}
		switch {
		case errs[0] == nil && errors.Is(errs[1], domain.ErrNotificationConflict):
			weights[raced.ID] = raced.Weight
		case errs[1] == nil && errors.Is(errs[0], domain.ErrNotificationConflict):
			weights[raced.ID] = twin.Weight
		default:
			t.Fatalf("two Saves of one id for different notifications: %v and %v, want one refused", errs[0], errs[1])
		}
		for c := range batches {
			saved += results[c].Saved
		}
	}
	delivered := map[string]bool{}
	for {
		b, err := h.repo.Peek(ctx, r, domain.GroupAll, "")
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			break
		}
		for _, id := range b.NotificationIDs {
			if delivered[id] {
				t.Fatalf("%s delivered twice", id)
			}
			delivered[id] = true
		}
		if w, ok := weights[b.NotificationIDs[0]]; ok && b.Weight != w {
			t.Fatalf("raced id %s delivered with weight %d, the refused Save's", b.NotificationIDs[0], b.Weight)
		}
		if err := h.repo.Dequeue(ctx, r, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	if len(delivered) != saved {
		t.Fatalf("the Saves counted %d saved, %d were delivered", saved, len(delivered))
	}
	for id := range weights {
		if !delivered[id] {
			t.Fatalf("raced id %s stored by one Save was not delivered", id)
		}
	}
}
