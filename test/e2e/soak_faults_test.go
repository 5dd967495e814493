package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/test/cosmostest"
)

// The three-process soak with faults: the two-process soak's load on three
// messagehub processes sharing one database of the faithful Cosmos test
// server (limits, charges, TTL, lag, 429s), while the server loses the
// answers of writes that applied (408, 503) and refuses
// writes without applying them (503, 449) all through the run. The same
// invariants: every acknowledged notification delivered exactly once, in
// order, never handed out again after its Dequeue; no notification of a
// Save refused for good delivered; a Save that failed in transit is resent
// with the same ids until it is acknowledged, so it too is delivered exactly
// once. And no cabinet stuck: once saving has ended, each recipient's
// backlog drains with a Dequeue at least every soakStuckAfter.
const (
	soakFaultHubs = 3
	// soakFaultEvery is roughly how many writes of one operation pass
	// between two faults on it; soakFaultRounds how many faults of each
	// kind each operation gets (they stop once used up).
	soakFaultEvery  = 6
	soakFaultRounds = 60
	// soakStuckAfter bounds the time between two Dequeues of a recipient
	// once saving has ended: a consumer's call is retried soakMaxAttempts
	// times with backoffs of 100 ms × attempt (≈ 19 s in all) on top of
	// soakCallTimeout for the call that finally gets through, and a bundle
	// build another instance abandoned is taken over after the content
	// lease (30 s, the default).
	soakStuckAfter = soakCallTimeout + 20*time.Second + 30*time.Second
)

// soakFaultKinds are the faults injected: a write that applied answered 408
// or 503, or its connection cut (no answer at all), and both refusals.
var soakFaultKinds = []cosmostest.FaultKind{
	cosmostest.LostTimeout, cosmostest.LostUnavailable, cosmostest.LostReset,
	cosmostest.Refuse503, cosmostest.RefuseRetryWith,
}

func TestThreeProcessSoakWithFaultsOnCosmos(t *testing.T) {
	srv := cosmostest.StartWith(t, cosmostest.Faithful())
	db := cosmostest.UniqueID("soakfaults")
	args := []string{"--store", "cosmos", "--cosmos-endpoint", srv.Endpoint, "--cosmos-key", srv.Key,
		"--cosmos-database", db, "--cosmos-throughput", "manual=400",
		"--max-bundle-weight", fmt.Sprint(soakBundleWeight), "--http-addr", "127.0.0.1:0"}
	hubs := make([]*hub, soakFaultHubs)
	for i := range hubs {
		hubs[i] = startHub(t, args...)
	}
	// Faults only once the hubs have created their containers: each rule
	// lets its operation's writes pass a few at a time, then fires once;
	// the rules of one operation are staggered so that its faults recur
	// through the run, kinds in turn.
	var rules []cosmostest.Fault
	for _, op := range []string{"create", "replace", "upsert", "patch", "delete", "batch"} {
		for r := range soakFaultRounds {
			rules = append(rules, cosmostest.Fault{
				Kind: soakFaultKinds[r%len(soakFaultKinds)], Ops: []string{op}, DB: db,
				Skip: soakFaultEvery, Count: 1,
			})
		}
	}
	if err := srv.AddFaults(rules...); err != nil {
		t.Fatal(err)
	}

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
		savers.Go(func() { soakSaver(ctx, l, hubs, recipients, w, true) })
	}
	savingDone := make(chan struct{})
	go func() { savers.Wait(); close(savingDone) }()
	var consumers sync.WaitGroup
	for ci := range 2 * soakRecipients {
		consumers.Go(func() { soakConsumer(ctx, l, hubs, recipients[ci/2], ci, savingDone, soakStuckAfter) })
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

	states, err := srv.Faults()
	if err != nil {
		t.Fatal(err)
	}
	fired := map[string]int{}
	for _, s := range states {
		fired[s.Ops[0]+"/"+string(s.Kind)] += s.Fired
	}
	// The soak means nothing unless faults hit the writes Save and Dequeue
	// make; which operations those are is the store's business, so only
	// the total is required.
	total := 0
	for _, n := range fired {
		total += n
	}
	if total == 0 {
		t.Error("no fault fired: the soak ran without the faults it is meant to run under")
	}
	if l.rejected == 0 {
		t.Error("no Save was refused: the soak did not check that refused Saves are not delivered")
	}
	n := 0
	for _, s := range l.saves {
		n += len(s.ns)
	}
	throttled := 0
	for _, h := range hubs {
		throttled += storeRequests(t, h, "429")
	}
	t.Logf("%d notifications in %d Saves (%d more refused), %d bundles dequeued (%d after a Dequeue failed in transit) in %s; retried attempts by code: %v; Cosmos answered 429 to %d requests; faults fired (op/kind): %v",
		n, len(l.saves), l.rejected, len(l.dequeued)+len(l.uncertain), len(l.uncertain), took.Round(time.Millisecond), l.retries, throttled, fired)
}
