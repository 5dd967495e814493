// Package crash kills the real messagehub binary with SIGKILL in the middle of
// a Save load, restarts it on the same data directory and checks, black-box
// over gRPC, that nothing acknowledged was lost, nothing is delivered twice,
// nothing of an unacknowledged Save is partly visible, order is kept and
// sequence numbers are not reused.
package crash

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

const (
	cycles        = 3
	workers       = 16
	maxPerSave    = 50
	loadFor       = 1500 * time.Millisecond // kill after this long under load ...
	maxSaves      = 6000                    // ... or after this many acknowledged Saves
	maxWorkerRuns = 20_000                  // bound on Saves per worker and cycle
	// A small bundle limit cuts many bundles, which makes the order checks
	// (they look at where bundles start) meaningful.
	maxBundleWeight = 1000
	maxWeight       = 10
	testBudget      = 60 * time.Second
	callTimeout     = 20 * time.Second
	maxDrainSteps   = 50_000 // bound on peek+dequeue rounds per recipient
)

// cabinet is (origin, content type); with the recipient it names a cabinet.
type cabinet struct {
	origin      messagehubv1.Domain
	contentType string
}

var cabinets = []cabinet{
	{messagehubv1.Domain_DOMAIN_TIME_SERIES, "ts-a"},
	{messagehubv1.Domain_DOMAIN_TIME_SERIES, "ts-b"},
	{messagehubv1.Domain_DOMAIN_AGGREGATIONS, "aggregation"},
	{messagehubv1.Domain_DOMAIN_CHARGES, "charges"},
	{messagehubv1.Domain_DOMAIN_MARKET_ROLES, "roles"},
}

func cabinetOf(n *messagehubv1.DataAvailable) cabinet {
	return cabinet{n.GetOrigin(), n.GetContentType()}
}

// saveRec is one Save as the client saw it.
type saveRec struct {
	notifications []*messagehubv1.DataAvailable
	start, end    time.Time // monotonic: request sent, answer received
	acked         bool
	err           error
	probe         bool // saved after the restart, before the drain
}

// bundleRec is one delivered bundle.
type bundleRec struct {
	id  string
	cab cabinet
	ids []string
}

// where a notification id comes from.
type origin struct {
	save int // index into the cycle's saves
	pos  int // index in that Save's request
}

func TestCrashRecovery(t *testing.T) {
	deadline := time.Now().Add(testBudget)
	recipients := make([]string, 4)
	for i := range recipients {
		recipients[i] = uuid.NewString()
	}
	dataDir := t.TempDir()
	serverArgs := []string{"--max-bundle-weight", fmt.Sprint(maxBundleWeight)}
	p := start(t, dataDir, serverArgs...)

	delivered := make(map[string]bool) // every id delivered in any cycle
	var ackedSample []*messagehubv1.DataAvailable
	for cycle := 1; cycle <= cycles; cycle++ {
		if time.Now().After(deadline) {
			t.Fatalf("cycle %d: out of the %s budget", cycle, testBudget)
		}
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(cycle)))
		killAfter := loadFor - time.Duration(rng.Int64N(int64(loadFor/2)))
		saves, killedAt := runLoad(t, p, recipients, killAfter)
		p = start(t, dataDir, serverArgs...)

		// Probe: one new notification per cabinet, not bundleable so that it
		// starts a bundle of its own. With sequence numbers reused it would be
		// peeked before older notifications of other cabinets.
		probe := saveRec{probe: true}
		for _, r := range recipients {
			for _, c := range cabinets {
				n := newNotification(r, c, 1, 0)
				n.SupportsBundling = false
				probe.notifications = append(probe.notifications, n)
			}
		}
		probe.start = time.Now()
		resp, err := p.client.Save(ctxT(t), &messagehubv1.SaveRequest{Notifications: probe.notifications})
		probe.end = time.Now()
		if err != nil || resp.GetSaved() != int32(len(probe.notifications)) {
			t.Fatalf("cycle %d: probe Save after restart = %v, %v; want %d saved", cycle, resp, err, len(probe.notifications))
		}
		probe.acked = true
		saves = append(saves, probe)

		bundles := drain(t, p, recipients)
		problems, stats := verify(recipients, saves, killedAt, bundles, delivered)
		t.Logf("cycle %d: killed after %s; %d Saves acknowledged (%d notifications); %d in flight at the kill, of which %d were stored; %d refused after it; %d bundles drained",
			cycle, killAfter.Round(time.Millisecond), stats.acked, stats.ackedNotifications, stats.unacked, stats.unackedCommitted, stats.afterKill, stats.bundles)
		for _, p := range problems {
			t.Errorf("cycle %d: %s", cycle, p)
		}
		if t.Failed() {
			return
		}
		if stats.acked == 0 {
			t.Fatalf("cycle %d: no Save was acknowledged before the kill", cycle)
		}

		// Re-saving acknowledged notifications of this and earlier cycles
		// (all dequeued by now) counts them as duplicates and stores nothing.
		for _, s := range saves {
			if s.acked && !s.probe && len(ackedSample) < 100*cycle {
				ackedSample = append(ackedSample, s.notifications[0])
			}
		}
		resp, err = p.client.Save(ctxT(t), &messagehubv1.SaveRequest{Notifications: ackedSample})
		if err != nil || resp.GetSaved() != 0 || resp.GetDuplicates() != int32(len(ackedSample)) {
			t.Fatalf("cycle %d: re-saving %d acknowledged notifications = %v, %v; want 0 saved, %d duplicates",
				cycle, len(ackedSample), resp, err, len(ackedSample))
		}
		for _, r := range recipients {
			pr, err := p.client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: r, Group: messagehubv1.PeekGroup_PEEK_GROUP_ALL})
			if err != nil || pr.GetBundle() != nil {
				t.Fatalf("cycle %d: peek after re-saving duplicates = %v, %v; want no bundle", cycle, pr.GetBundle(), err)
			}
		}
	}
	p.terminate(t)
}

// runLoad saves from many goroutines until killAfter has passed (or maxSaves
// were acknowledged), then SIGKILLs p while Saves are in flight. It returns
// every Save attempted and when the kill was sent.
func runLoad(t *testing.T, p *proc, recipients []string, killAfter time.Duration) ([]saveRec, time.Time) {
	t.Helper()
	stop := make(chan struct{})
	var acked atomic.Int64
	results := make([][]saveRec, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))
			ctx, cancel := context.WithTimeout(context.Background(), testBudget)
			defer cancel()
			for range maxWorkerRuns {
				select {
				case <-stop:
					return
				default:
				}
				ns := make([]*messagehubv1.DataAvailable, 1+rng.IntN(maxPerSave))
				for i := range ns {
					r := recipients[rng.IntN(len(recipients))]
					c := cabinets[rng.IntN(len(cabinets))]
					ns[i] = newNotification(r, c, 1+rng.Int64N(maxWeight), rng.IntN(2))
					ns[i].SupportsBundling = rng.IntN(500) != 0
				}
				rec := saveRec{notifications: ns, start: time.Now()}
				cctx, ccancel := context.WithTimeout(ctx, callTimeout)
				resp, err := p.client.Save(cctx, &messagehubv1.SaveRequest{Notifications: ns})
				ccancel()
				rec.end = time.Now()
				switch {
				case err != nil:
					rec.err = err
				case resp.GetSaved() != int32(len(ns)) || resp.GetDuplicates() != 0:
					rec.err = fmt.Errorf("saved %d, duplicates %d; want %d saved", resp.GetSaved(), resp.GetDuplicates(), len(ns))
				default:
					rec.acked = true
					acked.Add(1)
				}
				results[w] = append(results[w], rec)
			}
		})
	}
	began := time.Now()
	for time.Since(began) < killAfter && acked.Load() < maxSaves {
		time.Sleep(5 * time.Millisecond)
	}
	killedAt := time.Now()
	if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Errorf("SIGKILL: %v", err)
	}
	close(stop) // Saves in flight stay in flight; no new ones start
	p.kill(t)
	wg.Wait()
	if acked.Load() >= maxSaves {
		t.Logf("load reached %d acknowledged Saves after %s", maxSaves, killedAt.Sub(began).Round(time.Millisecond))
	}
	var all []saveRec
	for _, rs := range results {
		all = append(all, rs...)
	}
	return all, killedAt
}

func newNotification(recipient string, c cabinet, weight int64, docType int) *messagehubv1.DataAvailable {
	return &messagehubv1.DataAvailable{
		Id:               uuid.NewString(),
		Recipient:        recipient,
		Origin:           c.origin,
		ContentType:      c.contentType,
		DocumentType:     fmt.Sprintf("%s-doc%d", c.contentType, docType),
		SupportsBundling: true,
		Weight:           weight,
	}
}

// drain peeks (group ALL) and dequeues every recipient until nothing is left,
// one goroutine per recipient, and returns each recipient's bundles in
// delivery order.
func drain(t *testing.T, p *proc, recipients []string) map[string][]bundleRec {
	t.Helper()
	out := make(map[string][]bundleRec, len(recipients))
	var mu sync.Mutex
	errs := make(chan error, len(recipients))
	var wg sync.WaitGroup
	for _, r := range recipients {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), testBudget)
			defer cancel()
			var bundles []bundleRec
			defer func() {
				mu.Lock()
				out[r] = bundles
				mu.Unlock()
			}()
			for range maxDrainSteps {
				pr, err := p.client.Peek(ctx, &messagehubv1.PeekRequest{Recipient: r, Group: messagehubv1.PeekGroup_PEEK_GROUP_ALL})
				if err != nil {
					errs <- fmt.Errorf("recipient %s: peek after %d bundles: %w", r, len(bundles), err)
					return
				}
				b := pr.GetBundle()
				if b == nil {
					return
				}
				if b.GetRecipient() != r || len(b.GetNotificationIds()) == 0 {
					errs <- fmt.Errorf("recipient %s: peek returned bundle %s of recipient %s with %d notifications",
						r, b.GetId(), b.GetRecipient(), len(b.GetNotificationIds()))
					return
				}
				bundles = append(bundles, bundleRec{id: b.GetId(), cab: cabinet{b.GetOrigin(), b.GetContentType()}, ids: b.GetNotificationIds()})
				if _, err := p.client.Dequeue(ctx, &messagehubv1.DequeueRequest{Recipient: r, BundleId: b.GetId()}); err != nil {
					errs <- fmt.Errorf("recipient %s: dequeue bundle %s: %w", r, b.GetId(), err)
					return
				}
			}
			errs <- fmt.Errorf("recipient %s: still not drained after %d bundles", r, maxDrainSteps)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	return out
}

type cycleStats struct {
	acked, ackedNotifications int
	unacked, unackedCommitted int // in flight at the kill; of which stored
	afterKill                 int // started after the kill
	bundles                   int
}

// verify checks one cycle's deliveries against its Saves. delivered holds the
// ids delivered in earlier cycles and is updated.
// It returns what it found wrong (at most maxProblems, plus a last line
// saying how many more there were) and a summary.
func verify(recipients []string, saves []saveRec, killedAt time.Time,
	bundles map[string][]bundleRec, delivered map[string]bool) ([]string, cycleStats) {
	const maxProblems = 20
	var problems []string
	more := 0
	fail := func(format string, args ...any) {
		if len(problems) < maxProblems {
			problems = append(problems, fmt.Sprintf(format, args...))
		} else {
			more++
		}
	}
	defer func() {
		if more > 0 {
			problems = append(problems, fmt.Sprintf("%d more problems left out", more))
		}
	}()

	owner := make(map[string]origin)
	var st cycleStats
	for i, s := range saves {
		for j, n := range s.notifications {
			owner[n.GetId()] = origin{i, j}
		}
		switch {
		case s.acked:
			st.acked++
			st.ackedNotifications += len(s.notifications)
		case s.end.Before(killedAt):
			// Nothing in this load makes the service refuse a Save; only the
			// kill may.
			fail("a Save of %d notifications failed %s before the kill: %v", len(s.notifications), killedAt.Sub(s.end), s.err)
		case s.start.After(killedAt):
			st.afterKill++ // refused by a dead server; checked like any other below
		default:
			st.unacked++
			if c := status.Code(s.err); c != codes.Unavailable && c != codes.Canceled && c != codes.DeadlineExceeded {
				fail("an in-flight Save failed with %v at the kill, want UNAVAILABLE", s.err)
			}
		}
	}

	// count[i] is how many notifications of Save i were delivered.
	count := make([]int, len(saves))
	type place struct{ bundle, cabPos int }
	at := make(map[string]place)
	for _, r := range recipients {
		cabPos := make(map[cabinet]int)
		for k, b := range bundles[r] {
			st.bundles++
			for _, id := range b.ids {
				o, ok := owner[id]
				if !ok {
					fail("recipient %s: bundle %s delivers %s, which no Save of this cycle sent", r, b.id, id)
					continue
				}
				if delivered[id] {
					fail("recipient %s: notification %s delivered twice", r, id)
					continue
				}
				delivered[id] = true
				n := saves[o.save].notifications[o.pos]
				if n.GetRecipient() != r || cabinetOf(n) != b.cab {
					fail("bundle %s of recipient %s cabinet %v delivers %s of recipient %s cabinet %v",
						b.id, r, b.cab, id, n.GetRecipient(), cabinetOf(n))
					continue
				}
				at[id] = place{k, cabPos[b.cab]}
				cabPos[b.cab]++
				count[o.save]++
			}
		}
	}

	// No loss, no partial Save.
	for i, s := range saves {
		switch {
		case s.acked && count[i] != len(s.notifications):
			fail("acknowledged Save of %d notifications: %d delivered (probe: %v)", len(s.notifications), count[i], s.probe)
		case !s.acked && count[i] != 0 && count[i] != len(s.notifications):
			fail("unacknowledged Save (%v) partly visible: %d of %d notifications delivered", s.err, count[i], len(s.notifications))
		case !s.acked && count[i] > 0:
			st.unackedCommitted++
		}
	}

	// Request order, contiguous per cabinet: the notifications of one Save
	// in one cabinet of a recipient take consecutive places there.
	type cabKey struct {
		recipient string
		cab       cabinet
	}
	type span struct{ first, last int } // cabinet places of one Save in one cabinet
	spans := make(map[cabKey]map[int]*span)
	lastBundle := make(map[string]map[int]int) // recipient → Save → last bundle index holding it
	for i, s := range saves {
		if count[i] == 0 {
			continue
		}
		prev := make(map[cabKey]int)
		for _, n := range s.notifications {
			pl, ok := at[n.GetId()]
			if !ok {
				continue // reported above
			}
			c := cabinetOf(n)
			key := cabKey{n.GetRecipient(), c}
			if q, seen := prev[key]; seen && pl.cabPos != q+1 {
				fail("Save %d: notification %s is at place %d of cabinet %v of %s, want %d (request order, contiguous)",
					i, n.GetId(), pl.cabPos, c, n.GetRecipient(), q+1)
			}
			prev[key] = pl.cabPos
			if spans[key] == nil {
				spans[key] = make(map[int]*span)
			}
			if sp := spans[key][i]; sp == nil {
				spans[key][i] = &span{pl.cabPos, pl.cabPos}
			} else {
				sp.last = pl.cabPos
			}
			if lastBundle[n.GetRecipient()] == nil {
				lastBundle[n.GetRecipient()] = make(map[int]int)
			}
			lastBundle[n.GetRecipient()][i] = max(lastBundle[n.GetRecipient()][i], pl.bundle)
		}
	}

	// FIFO per cabinet: a Save acknowledged before another started is
	// delivered before it in every cabinet they share.
	for key, m := range spans {
		last := make(map[int]int, len(m))
		first := make(map[int]int, len(m))
		for i, sp := range m {
			last[i], first[i] = sp.last, sp.first
		}
		for _, v := range happenedBefore(saves, last, first) {
			fail("recipient %s cabinet %v: Save %d (acknowledged before Save %d started) ends at place %d, after Save %d starts at %d",
				key.recipient, key.cab, v.a, v.b, v.aValue, v.b, v.bValue)
		}
	}

	// FIFO per recipient across cabinets. A peek cuts from the cabinet with
	// the smallest unacknowledged sequence number, so the first notification
	// of every bundle is the smallest one left: when a bundle starts with a
	// notification of Save B, every Save A acknowledged before B started
	// (hence numbered lower) must be fully delivered in earlier bundles.
	for _, r := range recipients {
		firstBundle := make(map[int]int) // Save → first bundle index whose head is from it
		for k, b := range bundles[r] {
			if o, ok := owner[b.ids[0]]; ok {
				if _, seen := firstBundle[o.save]; !seen {
					firstBundle[o.save] = k
				}
			}
		}
		for _, v := range happenedBefore(saves, lastBundle[r], firstBundle) {
			fail("recipient %s: bundle %d starts with Save %d, but Save %d, acknowledged before Save %d started, is delivered up to bundle %d",
				r, v.bValue, v.b, v.a, v.b, v.aValue)
		}

		// Sequence numbers not reused: probes were saved after the restart,
		// so every bundle that starts with a probe comes after every bundle
		// holding a notification saved before the crash.
		lastOld, firstProbe := -1, -1
		for k, b := range bundles[r] {
			for _, id := range b.ids {
				if o, ok := owner[id]; ok && !saves[o.save].probe {
					lastOld = k
				}
			}
			if o, ok := owner[b.ids[0]]; ok && saves[o.save].probe && firstProbe < 0 {
				firstProbe = k
			}
		}
		if firstProbe >= 0 && firstProbe < lastOld {
			fail("recipient %s: bundle %d starts with a notification saved after the restart, but bundle %d still holds one saved before the crash (sequence numbers reused?)",
				r, firstProbe, lastOld)
		}
	}
	return problems, st
}

type violation struct{ a, b, aValue, bValue int }

// happenedBefore checks, for every Save b in first, that each acknowledged
// Save a in last that was acknowledged before b started has last[a] <
// first[b]. It runs in O(n log n) by sorting by acknowledgement time.
func happenedBefore(saves []saveRec, last, first map[int]int) []violation {
	type ackd struct {
		save int
		end  time.Time
	}
	var as []ackd
	for i := range last {
		if saves[i].acked {
			as = append(as, ackd{i, saves[i].end})
		}
	}
	slices.SortFunc(as, func(x, y ackd) int { return x.end.Compare(y.end) })
	// prefix[j]: the Save with the largest last value among as[:j+1].
	prefix := make([]int, len(as))
	for j, a := range as {
		prefix[j] = a.save
		if j > 0 && last[prefix[j-1]] > last[a.save] {
			prefix[j] = prefix[j-1]
		}
	}
	var out []violation
	bs := make([]int, 0, len(first))
	for b := range first {
		bs = append(bs, b)
	}
	slices.Sort(bs)
	for _, b := range bs {
		// as[:j] were acknowledged strictly before b started.
		j := sort.Search(len(as), func(j int) bool { return !as[j].end.Before(saves[b].start) })
		if j == 0 {
			continue
		}
		a := prefix[j-1]
		if last[a] >= first[b] && a != b {
			out = append(out, violation{a: a, b: b, aValue: last[a], bValue: first[b]})
		}
	}
	slices.SortFunc(out, func(x, y violation) int { return cmp.Compare(x.b, y.b) })
	return out
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}
