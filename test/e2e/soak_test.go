package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// The two-process soak: two messagehub processes on one
// database of a faithful Cosmos test server (limits, charges, TTL, reads
// lagging up to 200 ms, every container provisioned at 400 RU/s and
// throttled with 429s beyond it), with savers and consumers running at once
// on both. Bounded: soakSavers × soakSavesPerSaver Saves, consumers that stop
// once everything is delivered or after soakMaxSteps rounds, every call
// retried at most soakMaxAttempts times, and soakBudget for the whole run.
const (
	soakSavers        = 4
	soakSavesPerSaver = 12
	soakRecipients    = 3
	soakMaxPerSave    = 4
	soakMaxWeight     = 4
	soakBundleWeight  = 10 // small, so that a cabinet's backlog is cut into many bundles
	// soakBudget bounds a run that hangs; it is no speed target. A run is
	// bound by the throughput: each container's 400 RU/s are split over its
	// two partition key ranges, and the consumers' Peeks use what the Saves
	// leave. When the random recipients all hash to one range of the
	// recipients container (one run in four), half the throughput serves
	// everything: on a 2-core machine such a run took 135–175 s where the
	// others took 60–77 s, and longer beside other test packages.
	soakBudget      = 8 * time.Minute
	soakCallTimeout = 30 * time.Second
	soakMaxAttempts = 20
	// Peek rounds per consumer: an empty round waits 50 ms, so this outlasts
	// soakBudget, and a round that finds a bundle dequeues one of at most
	// soakSavers × soakSavesPerSaver × soakMaxPerSave notifications.
	soakMaxSteps = 10000
)

var soakCabinets = []cabinet{
	{messagehubv1.Domain_DOMAIN_TIME_SERIES, "SoakSeries"},
	{messagehubv1.Domain_DOMAIN_AGGREGATIONS, "SoakAggregation"},
	{messagehubv1.Domain_DOMAIN_CHARGES, "SoakCharges"},
	{messagehubv1.Domain_DOMAIN_MARKET_ROLES, "SoakRoles"}, // the same group as charges
}

// cabinet is (origin, content type); with the recipient it names a cabinet.
type cabinet struct {
	origin      messagehubv1.Domain
	contentType string
}

// soakSave is one logical Save: its distinct notifications in request order,
// when its first attempt was sent and when the first successful answer to it
// arrived (on either instance, for a Save sent to both at once).
type soakSave struct {
	ns         []*messagehubv1.DataAvailable
	start, end time.Time
}

// soakPeek is one Peek that returned a bundle.
type soakPeek struct {
	start, end time.Time
	bundle     *messagehubv1.Bundle
}

// soakLog is what the clients saw, shared by savers and consumers.
type soakLog struct {
	mu        sync.Mutex
	saves     []soakSave
	peeks     []soakPeek
	dequeued  map[string]time.Time // bundle id → when its successful Dequeue returned
	uncertain map[string]bool      // bundle ids whose Dequeue failed in transit, then was NOT_FOUND
	// notFound are the bundles whose Dequeue was NOT_FOUND at its first
	// attempt (the other consumer's, as a rule), when it answered.
	notFound map[string]time.Time
	bundles  map[string]*messagehubv1.Bundle
	retries  map[string]int // gRPC code → attempts retried
	problems []string
	// progress is, per recipient, when a Dequeue of one of its bundles last
	// returned (OK, or NOT_FOUND after a failed attempt).
	progress map[string]time.Time
	rejected int // Saves refused for good, as they were meant to be
	// waiting are the channels savesReached handed out, closed once as
	// many Saves are acknowledged as each asks for.
	waiting []savesWaiter
}

type savesWaiter struct {
	n  int
	ch chan struct{}
}

// addSave records an acknowledged Save.
func (l *soakLog) addSave(s soakSave) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.saves = append(l.saves, s)
	l.waiting = slices.DeleteFunc(l.waiting, func(w savesWaiter) bool {
		if len(l.saves) >= w.n {
			close(w.ch)
			return true
		}
		return false
	})
}

// savesReached returns a channel closed once n Saves are acknowledged.
func (l *soakLog) savesReached(n int) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan struct{})
	if len(l.saves) >= n {
		close(ch)
	} else {
		l.waiting = append(l.waiting, savesWaiter{n: n, ch: ch})
	}
	return ch
}

func newSoakLog() *soakLog {
	return &soakLog{dequeued: map[string]time.Time{}, uncertain: map[string]bool{}, notFound: map[string]time.Time{},
		bundles: map[string]*messagehubv1.Bundle{}, retries: map[string]int{}, progress: map[string]time.Time{}}
}

func (l *soakLog) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.problems) < 30 {
		l.problems = append(l.problems, fmt.Sprintf(format, args...))
	}
}

// retryable reports whether a failed call may be sent again: throttling the
// hub could not ride out (UNAVAILABLE, RESOURCE_EXHAUSTED) or a call that
// ran out of its own deadline. Save is idempotent, so repeating one only
// turns what the first attempt stored into duplicates; a repeated Dequeue of
// a bundle the first attempt acknowledged is NOT_FOUND.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded:
		return true
	}
	return false
}

// soakCall runs call until it succeeds, fails for good, the test's context
// ends or soakMaxAttempts were made; it reports how many attempts failed.
func soakCall[T any](ctx context.Context, l *soakLog, call func(context.Context) (T, error)) (T, int, error) {
	var failed int
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, soakCallTimeout)
		resp, err := call(cctx)
		cancel()
		if err == nil || !retryable(err) || attempt == soakMaxAttempts || ctx.Err() != nil {
			return resp, failed, err
		}
		failed++
		l.mu.Lock()
		l.retries[status.Code(err).String()]++
		l.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
}

func TestTwoProcessSoakOnCosmos(t *testing.T) {
	// A server of its own, faithful whatever COSMOSTEST_OPTIONS says, and
	// containers at the smallest manual throughput.
	srv := cosmostest.StartWith(t, cosmostest.Faithful())
	args := []string{"--store", "cosmos", "--cosmos-endpoint", srv.Endpoint, "--cosmos-key", srv.Key,
		"--cosmos-database", cosmostest.UniqueID("soak"), "--cosmos-throughput", "manual=400",
		"--max-bundle-weight", fmt.Sprint(soakBundleWeight), "--http-addr", "127.0.0.1:0"}
	hubs := []*hub{startHub(t, args...), startHub(t, args...)}
	recipients := make([]string, soakRecipients)
	for i := range recipients {
		recipients[i] = uuid.NewString()
	}
	ctx, cancel := context.WithTimeout(context.Background(), soakBudget)
	defer cancel()
	began := time.Now()

	l := newSoakLog()
	var savers sync.WaitGroup
	for w := range soakSavers {
		savers.Go(func() { soakSaver(ctx, l, hubs, recipients, w, false, soakCounted) })
	}
	savingDone := make(chan struct{})
	go func() { savers.Wait(); close(savingDone) }()

	// Two consumers per recipient, one peeking group ALL, the other each
	// group in turn; each peeks on one instance and dequeues on the other.
	var consumers sync.WaitGroup
	for ci := range 2 * soakRecipients {
		consumers.Go(func() { soakConsumer(ctx, l, hubs, recipients[ci/2], ci, savingDone, 0, soakMaxSteps) })
	}
	consumers.Wait()
	savers.Wait()
	took := time.Since(began)
	if err := ctx.Err(); err != nil {
		t.Errorf("soak did not finish within %s: %v", soakBudget, err)
	}
	for _, p := range l.problems {
		t.Error(p)
	}
	for _, p := range verifySoak(l) {
		t.Error(p)
	}
	n := 0
	for _, s := range l.saves {
		n += len(s.ns)
	}
	throttled := 0
	for _, h := range hubs {
		throttled += storeRequests(t, h, "429")
	}
	if throttled == 0 {
		t.Error("Cosmos throttled no request: the soak ran without the low RU/s it is meant to run under")
	}
	t.Logf("%d notifications in %d Saves, %d bundles dequeued (%d after a Dequeue failed in transit) in %s; retried attempts by code: %v; Cosmos answered 429 to %d requests",
		n, len(l.saves), len(l.dequeued)+len(l.uncertain), len(l.uncertain), took.Round(time.Millisecond), l.retries, throttled)
}

// soakCounted is the savers' bound of a CI-sized soak: soakSavesPerSaver
// Saves each.
func soakCounted(i int) bool { return i < soakSavesPerSaver }

// soakSaver sends Saves while more(i) says so for the i-th (counting from
// 0), alternating the instances. Most
// are new notifications spread over the recipients and cabinets; some carry
// one notification twice; some are sent to both instances at once; some
// repeat an acknowledged Save on the other instance, which must count every
// notification as a duplicate.
//
// With faulty, the store loses and refuses writes, so a Save's counts are
// only whole (saved + duplicates), not exact; and every fourth Save is
// first sent with one invalid notification among valid new ones, which the
// hub must refuse for good (INVALID_ARGUMENT) and never deliver any of.
func soakSaver(ctx context.Context, l *soakLog, hubs []*hub, recipients []string, w int, faulty bool, more func(i int) bool) {
	type acked struct {
		ns []*messagehubv1.DataAvailable
		on int // the instance that answered
	}
	var mine []acked // this saver's acknowledged Saves
	for i := 0; more(i) && ctx.Err() == nil; i++ {
		on := (w + i) % len(hubs)
		h := hubs[on]
		if i%4 == 3 && len(mine) > 0 {
			again := mine[(w+i)%len(mine)]
			other := hubs[(again.on+1)%len(hubs)]
			resp, _, err := soakCall(ctx, l, func(ctx context.Context) (*messagehubv1.SaveResponse, error) {
				return other.client.Save(ctx, &messagehubv1.SaveRequest{Notifications: again.ns})
			})
			if err != nil {
				l.fail("saver %d: repeating an acknowledged Save: %v", w, err)
				return
			}
			if resp.GetSaved() != 0 || resp.GetDuplicates() != int32(len(again.ns)) {
				l.fail("saver %d: repeating an acknowledged Save of %d notifications = %v, want all duplicates", w, len(again.ns), resp)
			}
			continue
		}
		k := 1 + (w*7+i*3)%soakMaxPerSave
		fresh := func() []*messagehubv1.DataAvailable {
			ns := make([]*messagehubv1.DataAvailable, k)
			for j := range ns {
				c := soakCabinets[(w+i+j)%len(soakCabinets)]
				ns[j] = &messagehubv1.DataAvailable{
					Id: uuid.NewString(), Recipient: recipients[(w+i*j)%len(recipients)],
					Origin: c.origin, ContentType: c.contentType, DocumentType: c.contentType + "Doc",
					SupportsBundling: (w+i+j)%7 != 0, Weight: int64(1 + (w+i+j)%soakMaxWeight),
				}
			}
			return ns
		}
		ns := fresh()
		if faulty && i%4 == 2 {
			bad := append(slices.Clone(ns), &messagehubv1.DataAvailable{Id: uuid.NewString(), // no recipient
				Origin: ns[0].Origin, ContentType: ns[0].ContentType, DocumentType: ns[0].DocumentType, Weight: 1})
			_, _, err := soakCall(ctx, l, func(ctx context.Context) (*messagehubv1.SaveResponse, error) {
				return h.client.Save(ctx, &messagehubv1.SaveRequest{Notifications: bad})
			})
			if status.Code(err) != codes.InvalidArgument {
				l.fail("saver %d: Save with a notification without recipient: %v, want INVALID_ARGUMENT", w, err)
				return
			}
			l.mu.Lock()
			l.rejected++
			l.mu.Unlock()
			// Those notifications are not in l.saves: verifySoak reports
			// any of them delivered. New ids for the real Save.
			ns = fresh()
		}
		req := ns
		if i%4 == 1 {
			req = append(slices.Clone(ns), ns[0]) // the same notification twice in one Save
		}
		dups := int32(len(req) - len(ns))
		rec := soakSave{ns: ns, start: time.Now()}
		both := i%6 == 5
		targets := []*hub{h}
		if both {
			targets = hubs
		}
		type answer struct {
			resp   *messagehubv1.SaveResponse
			failed int
			err    error
			end    time.Time
		}
		answers := make([]answer, len(targets))
		var wg sync.WaitGroup
		for ti, target := range targets {
			wg.Go(func() {
				a := &answers[ti]
				a.resp, a.failed, a.err = soakCall(ctx, l, func(ctx context.Context) (*messagehubv1.SaveResponse, error) {
					return target.client.Save(ctx, &messagehubv1.SaveRequest{Notifications: req})
				})
				a.end = time.Now()
			})
		}
		wg.Wait()
		var saved, failed int32
		for _, a := range answers {
			if a.err != nil {
				l.fail("saver %d: Save of %d notifications: %v", w, len(req), a.err)
				return
			}
			if a.resp.GetSaved()+a.resp.GetDuplicates() != int32(len(req)) {
				l.fail("saver %d: Save of %d notifications = %v, want them all saved or counted as duplicates", w, len(req), a.resp)
			}
			saved += a.resp.GetSaved()
			failed += int32(a.failed)
			if rec.end.IsZero() || a.end.Before(rec.end) {
				rec.end = a.end
			}
		}
		// Retried attempts may have stored what the answers count as
		// duplicates; without them the counts are exact.
		if !faulty && failed == 0 && (saved != int32(len(ns)) || (!both && answers[0].resp.GetDuplicates() != dups)) {
			l.fail("saver %d: Save of %d notifications (%d repeated, on %d instances) saved %d in all: %v",
				w, len(req), dups, len(targets), saved, answers)
		}
		mine = append(mine, acked{ns: ns, on: on})
		l.addSave(rec)
	}
}

// soakConsumer peeks and dequeues one recipient's bundles until saving has
// ended and a Peek that began after it finds nothing, at most maxSteps
// rounds. Consumer ci peeks on
// one instance and dequeues on the other, changing sides every round.
//
// With stuckAfter > 0, once saving has ended a recipient must see a bundle
// of its dequeued (by either of its consumers) at least every stuckAfter,
// until it has none left.
func soakConsumer(ctx context.Context, l *soakLog, hubs []*hub, recipient string, ci int, savingDone <-chan struct{}, stuckAfter time.Duration, maxSteps int) {
	var drainFrom time.Time
	groups := []messagehubv1.PeekGroup{messagehubv1.PeekGroup_PEEK_GROUP_ALL}
	if ci%2 == 1 {
		groups = []messagehubv1.PeekGroup{messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES,
			messagehubv1.PeekGroup_PEEK_GROUP_AGGREGATIONS, messagehubv1.PeekGroup_PEEK_GROUP_MASTER_DATA}
	}
	for step := range maxSteps {
		if ctx.Err() != nil {
			return
		}
		peekOn, dequeueOn := hubs[(ci+step)%len(hubs)], hubs[(ci+step+1)%len(hubs)]
		// ALL only, once saving has ended: nothing pending and nothing left.
		group := groups[step%len(groups)]
		var done bool
		select {
		case <-savingDone:
			if !done && drainFrom.IsZero() {
				drainFrom = time.Now()
			}
			done, group = true, messagehubv1.PeekGroup_PEEK_GROUP_ALL
		default:
		}
		start := time.Now()
		resp, _, err := soakCall(ctx, l, func(ctx context.Context) (*messagehubv1.PeekResponse, error) {
			return peekOn.client.Peek(ctx, &messagehubv1.PeekRequest{Recipient: recipient, Group: group})
		})
		if err != nil {
			l.fail("consumer %d: Peek(%s): %v", ci, group, err)
			return
		}
		b := resp.GetBundle()
		if done && stuckAfter > 0 {
			l.mu.Lock()
			last := l.progress[recipient]
			l.mu.Unlock()
			if last.Before(drainFrom) {
				last = drainFrom
			}
			if idle := time.Since(last); idle > stuckAfter {
				l.fail("consumer %d: recipient %s: no bundle dequeued for %s since saving ended (bound %s): a cabinet is stuck (peeked %v)",
					ci, recipient, idle.Round(time.Millisecond), stuckAfter, b)
				return
			}
		}
		if b == nil {
			if done {
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond): // poll interval
			}
			continue
		}
		l.mu.Lock()
		l.peeks = append(l.peeks, soakPeek{start: start, end: time.Now(), bundle: b})
		l.mu.Unlock()
		_, failed, err := soakCall(ctx, l, func(ctx context.Context) (*messagehubv1.DequeueResponse, error) {
			return dequeueOn.client.Dequeue(ctx, &messagehubv1.DequeueRequest{Recipient: recipient, BundleId: b.GetId()})
		})
		end := time.Now()
		switch {
		case err == nil:
			l.mu.Lock()
			l.progress[recipient] = end
			_, twice := l.dequeued[b.GetId()]
			l.dequeued[b.GetId()] = end
			l.bundles[b.GetId()] = b
			l.mu.Unlock()
			if twice {
				l.fail("consumer %d: bundle %s: two Dequeues succeeded", ci, b.GetId())
				return // the bundle stays: peeking on would only repeat it
			}
		case status.Code(err) == codes.NotFound && failed > 0:
			// Our failed attempt may have acknowledged it, or the other
			// consumer did; verifySoak sorts it out.
			l.mu.Lock()
			l.progress[recipient] = end
			l.uncertain[b.GetId()] = true
			l.bundles[b.GetId()] = b
			l.mu.Unlock()
		case status.Code(err) == codes.NotFound:
			// The recipient's other consumer dequeued it first.
			l.mu.Lock()
			l.notFound[b.GetId()] = end
			l.mu.Unlock()
		default:
			l.fail("consumer %d: Dequeue(%s): %v", ci, b.GetId(), err)
			return
		}
	}
	l.fail("consumer %d: still consuming after %d rounds", ci, maxSteps)
}

// verifySoak checks the deliveries against the Saves: every saved
// notification in exactly one dequeued bundle, of its recipient and cabinet;
// per cabinet, each Save's notifications together and in request order, and
// a Save acknowledged before another was sent delivered before it; and no
// Peek that began after a bundle's Dequeue returned handing out that bundle
// or any of its notifications.
func verifySoak(l *soakLog) []string {
	var problems []string
	fail := func(format string, args ...any) {
		if len(problems) < 30 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	saved := map[string]*messagehubv1.DataAvailable{}
	saveOf := map[string]int{}
	for i, s := range l.saves {
		for _, n := range s.ns {
			saved[n.GetId()], saveOf[n.GetId()] = n, i
		}
	}
	// A bundle whose Dequeue is uncertain counts as delivered unless one of
	// its notifications was handed out again in another bundle.
	delivered := map[string]string{} // notification → bundle
	for _, id := range slices.Sorted(maps.Keys(l.dequeued)) {
		for _, n := range l.bundles[id].GetNotificationIds() {
			if other, twice := delivered[n]; twice {
				fail("notification %s delivered in bundles %s and %s", n, other, id)
			}
			delivered[n] = id
		}
	}
	for _, id := range slices.Sorted(maps.Keys(l.uncertain)) {
		if _, ok := l.dequeued[id]; ok {
			continue
		}
		b := l.bundles[id]
		if !slices.ContainsFunc(b.GetNotificationIds(), func(n string) bool { _, ok := delivered[n]; return ok }) {
			for _, n := range b.GetNotificationIds() {
				delivered[n] = id
			}
		}
	}
	for id := range delivered {
		if _, ok := saved[id]; !ok {
			fail("notification %s delivered, but no Save sent it", id)
		}
	}
	for id := range saved {
		if _, ok := delivered[id]; !ok {
			fail("notification %s saved, never delivered", id)
		}
	}

	// Each cabinet's delivery order. A group has at most one pending
	// bundle, so a cabinet's next bundle is cut only after its previous one
	// was dequeued: the first Peek to return a bundle ended after the
	// Dequeue of the one before began, hence after the first Peek of that
	// one ended. The first Peek's end orders a cabinet's bundles.
	type cabKey struct {
		recipient string
		cab       cabinet
	}
	firstSeen := map[string]time.Time{}
	for _, p := range l.peeks {
		id := p.bundle.GetId()
		if at, ok := firstSeen[id]; !ok || p.end.Before(at) {
			firstSeen[id] = p.end
		}
	}
	var order []string
	for id, b := range l.bundles {
		if delivered[b.GetNotificationIds()[0]] == id {
			order = append(order, id)
		}
	}
	slices.SortFunc(order, func(a, b string) int { return firstSeen[a].Compare(firstSeen[b]) })
	pos := map[string]int{} // notification → place in its cabinet
	next := map[cabKey]int{}
	for _, id := range order {
		b := l.bundles[id]
		key := cabKey{b.GetRecipient(), cabinet{b.GetOrigin(), b.GetContentType()}}
		for _, n := range b.GetNotificationIds() {
			if s, ok := saved[n]; ok && (s.GetRecipient() != key.recipient || (cabinet{s.GetOrigin(), s.GetContentType()}) != key.cab) {
				fail("bundle %s of %v delivers %s of another cabinet", id, key, n)
			}
			pos[n] = next[key]
			next[key]++
		}
	}
	// first and last place of each Save in each cabinet; request order.
	type span struct{ first, last int }
	spans := map[cabKey]map[int]span{}
	for i, s := range l.saves {
		prev := map[cabKey]int{}
		for _, n := range s.ns {
			p, ok := pos[n.GetId()]
			if !ok {
				continue
			}
			key := cabKey{n.GetRecipient(), cabinet{n.GetOrigin(), n.GetContentType()}}
			if q, seen := prev[key]; seen && p != q+1 {
				fail("Save %d: %s is at place %d of its cabinet, want %d (request order, together)", i, n.GetId(), p, q+1)
			}
			prev[key] = p
			if spans[key] == nil {
				spans[key] = map[int]span{}
			}
			sp, seen := spans[key][i]
			if !seen {
				sp.first = p
			}
			sp.last = p
			spans[key][i] = sp
		}
	}
	for key, m := range spans {
		for a, sa := range m {
			for b, sb := range m {
				if l.saves[a].end.Before(l.saves[b].start) && sa.last > sb.first {
					fail("recipient %s cabinet %v: Save %d, acknowledged before Save %d was sent, is delivered up to place %d, after Save %d from place %d",
						key.recipient, key.cab, a, b, sa.last, b, sb.first)
				}
			}
		}
	}

	// No redelivery after Dequeue.
	for _, p := range l.peeks {
		for _, n := range p.bundle.GetNotificationIds() {
			if at, acked := l.dequeued[delivered[n]]; acked && at.Before(p.start) {
				fail("a Peek that began %s after Dequeue(%s) returned handed out %s again (in bundle %s)",
					p.start.Sub(at), delivered[n], n, p.bundle.GetId())
			}
		}
	}
	return problems
}

// storeRequests is how many requests to the store h answered with status
// code, from its /metrics.
func storeRequests(t *testing.T, h *hub, code string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, "http://"+httpAddrOf(t, h)+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "messagehub_store_requests") && strings.Contains(line, `status_code="`+code+`"`) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			n += int(v)
		}
	}
	return n
}
