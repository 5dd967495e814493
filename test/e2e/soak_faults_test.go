package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"

	"github.com/energydatahub/messagehub/test/cosmostest"
)

// The three-process soak with faults: the two-process soak's load on three
// messagehub processes sharing one database of the faithful Cosmos test
// server, with everything a real account does to its clients switched on:
// replica lag (reads served up to 200 ms in the past unless a session token
// says otherwise), limits (every container at 400 RU/s, throttled with 429s
// per partition key range, two ranges per container, and the fullest range
// of each container split twice while the hubs run), and faults all through
// the run: writes whose answers are lost after they applied (408, 503, a cut
// connection), writes refused without applying (503, 449), and reads
// answered 404/1002 (no replica has caught up with the session token). The
// same invariants: every acknowledged notification delivered exactly once,
// in order, never handed out again after its Dequeue; no notification of a
// Save refused for good delivered; a Save that failed in transit is resent
// with the same ids until it is acknowledged, so it too is delivered exactly
// once. And no cabinet stuck: once saving has ended, each recipient's
// backlog drains with a Dequeue at least every soakStuckAfter.
//
// By default the savers make soakSavesPerSaver Saves each (CI-sized, a
// minute or two). MESSAGEHUB_SOAK_DURATION (a Go duration, e.g. 10m) makes
// them save until that time has passed instead; the consumers drain as
// before, the checks are the same, and the run may take the duration plus
// soakBudget. Run it with a test timeout to match:
//
//	MESSAGEHUB_SOAK_DURATION=10m nice go test -count=1 -timeout 30m -run TestThreeProcessSoakWithFaultsOnCosmos -v ./test/e2e/
const (
	soakFaultHubs = 3
	// soakFaultEvery: about one in soakFaultEvery writes of each operation
	// on each data container is lost or refused, the kinds in turn;
	// soakReadFaultEvery: one in soakReadFaultEvery reads (point reads and
	// queries) is answered 404/1002. The SDK retries a 404/1002 once, so
	// the store meets one when the retry is picked too.
	soakFaultEvery     = 6
	soakReadFaultEvery = 5
	// soakStuckAfter bounds the time between two Dequeues of a recipient
	// once saving has ended: a consumer's call is retried soakMaxAttempts
	// times with backoffs of 100 ms × attempt (≈ 19 s in all) on top of
	// soakCallTimeout for the call that finally gets through, and a bundle
	// build another instance abandoned is taken over after the content
	// lease (30 s, the default).
	soakStuckAfter = soakCallTimeout + 20*time.Second + 30*time.Second
	// soakSplits is how many times each container's fullest partition key
	// range is split while the savers run: in a CI-sized soak after every
	// soakSplitAfterSaves acknowledged Saves, in a timed one at each
	// (soakSplits+1)-th of its duration.
	soakSplits          = 2
	soakSplitAfterSaves = 10
	// soakDurationEnv names the variable that makes the savers save for a
	// time instead of a number of Saves.
	soakDurationEnv = "MESSAGEHUB_SOAK_DURATION"
	// soakDiagnoseBundles bounds the bundles a failed soak's diagnosis
	// takes out of one recipient.
	soakDiagnoseBundles = 200
)

// soakWriteFaults are the faults injected into writes: a write that applied
// answered 408 or 503, or its connection cut (no answer at all), and both
// refusals.
var soakWriteFaults = []cosmostest.FaultKind{
	cosmostest.LostTimeout, cosmostest.LostUnavailable, cosmostest.LostReset,
	cosmostest.Refuse503, cosmostest.RefuseRetryWith,
}

// soakDataContainers hold what Save, Peek and Dequeue read and write: the
// faults are theirs. The bells (wake-ups of waiting Peeks) and the audit
// log get none, so that their writes do not use up the faults the data's
// are meant to meet; a fault there would delay a wake-up or an audit record
// and prove nothing about delivery.
var soakDataContainers = []string{"recipients", "drawers", "ids", "saves"}

// soakWriteOps are the write operations as the test server's fault rules
// name them.
var soakWriteOps = []string{"create", "replace", "upsert", "patch", "delete", "batch"}

// soakFaultRules are the rules of database db: for every data container
// and write operation one rule per kind, each firing on one in
// soakFaultEvery × len(soakWriteFaults) of the writes it sees, staggered so
// that the kinds take turns; and for every data container a rule answering
// one read in soakReadFaultEvery with 404/1002. None runs out: the faults
// recur however long the soak runs.
func soakFaultRules(db string) []cosmostest.Fault {
	var rules []cosmostest.Fault
	for _, coll := range soakDataContainers {
		for _, op := range soakWriteOps {
			for k, kind := range soakWriteFaults {
				rules = append(rules, cosmostest.Fault{Kind: kind, Ops: []string{op}, DB: db, Coll: coll,
					Skip: soakFaultEvery*(k+1) - 1, Every: soakFaultEvery * len(soakWriteFaults)})
			}
		}
		rules = append(rules, cosmostest.Fault{Kind: cosmostest.ReadSessionNotAvailable, Ops: []string{"read", "query"},
			DB: db, Coll: coll, Skip: soakReadFaultEvery - 1, Every: soakReadFaultEvery})
	}
	return rules
}

// soakLength is how long the soak with faults runs.
type soakLength struct {
	saving   time.Duration // how long the savers save; 0: soakSavesPerSaver Saves each
	budget   time.Duration // the whole run's bound
	maxSteps int           // each consumer's bound in Peek rounds
}

// soakLengthFromEnv reads soakDurationEnv: unset, the CI-sized soak;
// otherwise a positive Go duration.
func soakLengthFromEnv() (soakLength, error) {
	v := os.Getenv(soakDurationEnv)
	if v == "" {
		return soakLength{budget: soakBudget, maxSteps: soakMaxSteps}, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return soakLength{}, fmt.Errorf("%s=%q: want a positive Go duration such as 10m", soakDurationEnv, v)
	}
	// Draining what is left when saving ends takes no longer than a
	// CI-sized soak does; an empty Peek round takes at least its 50 ms
	// poll interval, so soakMaxSteps per soakBudget outlasts the budget.
	budget := d + soakBudget
	return soakLength{saving: d, budget: budget, maxSteps: int(int64(soakMaxSteps) * int64(budget) / int64(soakBudget))}, nil
}

// keepSaving is the savers' bound: their count in a CI-sized soak, else
// until the saving time since began has passed.
func (n soakLength) keepSaving(began time.Time) func(i int) bool {
	if n.saving == 0 {
		return soakCounted
	}
	until := began.Add(n.saving)
	return func(int) bool { return time.Now().Before(until) }
}

// splitSignals are closed at the moments to split at: after every
// soakSplitAfterSaves acknowledged Saves, or at each (soakSplits+1)-th of
// the saving time.
func (n soakLength) splitSignals(l *soakLog) []<-chan struct{} {
	out := make([]<-chan struct{}, soakSplits)
	for i := range out {
		if n.saving == 0 {
			out[i] = l.savesReached(soakSplitAfterSaves * (i + 1))
			continue
		}
		ch := make(chan struct{})
		time.AfterFunc(n.saving*time.Duration(i+1)/(soakSplits+1), func() { close(ch) })
		out[i] = ch
	}
	return out
}

func TestThreeProcessSoakWithFaultsOnCosmos(t *testing.T) {
	length, err := soakLengthFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	opts := cosmostest.Faithful()
	if opts.Lag == 0 || opts.Ranges < 2 || opts.RUPerSecond == 0 {
		t.Fatalf("the faithful test server %+v lacks lag, ranges or throttling: the soak is meant to run under all three", opts)
	}
	srv := cosmostest.StartWith(t, opts)
	db := cosmostest.UniqueID("soakfaults")
	args := []string{"--store", "cosmos", "--cosmos-endpoint", srv.Endpoint, "--cosmos-key", srv.Key,
		"--cosmos-database", db, "--cosmos-throughput", "manual=400",
		"--max-bundle-weight", fmt.Sprint(soakBundleWeight), "--http-addr", "127.0.0.1:0"}
	hubs := make([]*hub, soakFaultHubs)
	for i := range hubs {
		hubs[i] = startHub(t, args...)
	}
	// Faults only once the hubs have created their containers.
	if err := srv.AddFaults(soakFaultRules(db)...); err != nil {
		t.Fatal(err)
	}

	recipients := make([]string, soakRecipients)
	for i := range recipients {
		recipients[i] = uuid.NewString()
	}
	ctx, cancel := context.WithTimeout(context.Background(), length.budget)
	defer cancel()
	began := time.Now()
	l := newSoakLog()
	var savers sync.WaitGroup
	for w := range soakSavers {
		savers.Go(func() { soakSaver(ctx, l, hubs, recipients, w, true, length.keepSaving(began)) })
	}
	savingDone := make(chan struct{})
	go func() { savers.Wait(); close(savingDone) }()
	splitRounds := make(chan int, 1)
	signals := length.splitSignals(l)
	go func() { splitRounds <- splitWhileSaving(ctx, t, srv, db, signals, savingDone) }()
	var consumers sync.WaitGroup
	for ci := range 2 * soakRecipients {
		consumers.Go(func() {
			soakConsumer(ctx, l, hubs, recipients[ci/2], ci, savingDone, soakStuckAfter, length.maxSteps)
		})
	}
	consumers.Wait()
	savers.Wait()
	split := <-splitRounds
	took := time.Since(began)
	if err := ctx.Err(); err != nil {
		t.Errorf("soak did not finish within %s: %v", length.budget, err)
	}
	for _, p := range l.problems {
		t.Error(p)
	}
	problems := verifySoak(l)
	for _, p := range problems {
		t.Error(p)
	}
	if len(problems) > 0 {
		diagnoseUndelivered(t, l, hubs)
	}

	// The soak means nothing unless it ran under what it is meant to run
	// under: faults on the data's writes and reads, throttling, splits.
	states, err := srv.Faults()
	if err != nil {
		t.Fatal(err)
	}
	byKind, byTarget := map[cosmostest.FaultKind]int{}, map[string]int{}
	for _, s := range states {
		byKind[s.Kind] += s.Fired
		byTarget[s.Coll+"/"+strings.Join(s.Ops, "+")] += s.Fired
	}
	var writeFaults int
	for _, k := range soakWriteFaults {
		writeFaults += byKind[k]
	}
	if writeFaults == 0 {
		t.Error("no write fault fired: the soak ran without the faults it is meant to run under")
	}
	if byKind[cosmostest.ReadSessionNotAvailable] == 0 {
		t.Error("no read was answered 404/1002: the soak ran without the lagging replicas it is meant to meet")
	}
	if l.rejected == 0 {
		t.Error("no Save was refused: the soak did not check that refused Saves are not delivered")
	}
	throttled := 0
	for _, h := range hubs {
		throttled += storeRequests(t, h, "429")
	}
	if throttled == 0 {
		t.Error("Cosmos throttled no request: the soak ran without the low RU/s it is meant to run under")
	}
	if split == 0 {
		t.Error("no partition key range was split while the hubs ran")
	}
	ranges := map[string]int{}
	for _, c := range soakSplitContainers {
		rs, err := srv.Ranges(db, c)
		if err != nil {
			t.Fatal(err)
		}
		ranges[c] = len(rs)
	}
	n := 0
	for _, s := range l.saves {
		n += len(s.ns)
	}
	t.Logf("%d notifications in %d Saves (%d more refused), %d bundles dequeued (%d after a Dequeue failed in transit) in %s (saving %s); retried attempts by code: %v; Cosmos answered 429 to %d requests; replica lag up to %s; %d rounds of splits, partition key ranges now %v; faults fired by kind: %v; by container/operation: %v",
		n, len(l.saves), l.rejected, len(l.dequeued)+len(l.uncertain), len(l.uncertain), took.Round(time.Millisecond),
		savingFor(length), l.retries, throttled, opts.Lag, split, ranges, byKind, byTarget)
}

// soakSplitContainers are every container of the database: the data's and
// the bells', whose change feed the hubs read across ranges.
var soakSplitContainers = append(slices.Clone(soakDataContainers), "bells")

// splitWhileSaving splits the fullest partition key range of every
// container of db at each signal, as Cosmos DB splits a physical partition
// that grows, until saving ends; it returns how many rounds it made.
func splitWhileSaving(ctx context.Context, t *testing.T, srv *cosmostest.Server, db string, signals []<-chan struct{}, savingDone <-chan struct{}) int {
	rounds := 0
	for _, at := range signals {
		select {
		case <-at:
		case <-savingDone:
			return rounds
		case <-ctx.Done():
			return rounds
		}
		for _, c := range soakSplitContainers {
			if _, err := srv.Split(db, c, ""); err != nil {
				t.Errorf("split a partition key range of %s: %v", c, err)
			}
		}
		rounds++
	}
	return rounds
}

func savingFor(n soakLength) string {
	if n.saving == 0 {
		return fmt.Sprintf("%d Saves per saver", soakSavesPerSaver)
	}
	return n.saving.String()
}

// diagnoseUndelivered tells a lost notification from one a Peek did not
// see: it logs the Save of every acknowledged notification no bundle
// delivered, then peeks and dequeues its recipient on every instance until
// each answers empty (at most soakDiagnoseBundles bundles), logging what
// comes out.
func diagnoseUndelivered(t *testing.T, l *soakLog, hubs []*hub) {
	t.Helper()
	delivered := map[string]bool{}
	for id, b := range l.bundles {
		if _, ok := l.dequeued[id]; ok || l.uncertain[id] {
			for _, n := range b.GetNotificationIds() {
				delivered[n] = true
			}
		}
	}
	missing := map[string]bool{}
	recipients := map[string]bool{}
	for i, s := range l.saves {
		for _, n := range s.ns {
			if !delivered[n.GetId()] {
				missing[n.GetId()], recipients[n.GetRecipient()] = true, true
				t.Logf("undelivered %s (recipient %s, %s/%s) of Save %d: sent %s, acknowledged %s",
					n.GetId(), n.GetRecipient(), n.GetOrigin(), n.GetContentType(), i,
					s.start.Format(time.RFC3339Nano), s.end.Format(time.RFC3339Nano))
				for _, p := range l.peeks {
					if slices.Contains(p.bundle.GetNotificationIds(), n.GetId()) {
						id := p.bundle.GetId()
						t.Logf("  handed out in bundle %s by a Peek %s–%s; its Dequeue answered NOT_FOUND at first at %s",
							id, p.start.Format(time.RFC3339Nano), p.end.Format(time.RFC3339Nano), l.notFound[id].Format(time.RFC3339Nano))
					}
				}
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	groups := []messagehubv1.PeekGroup{messagehubv1.PeekGroup_PEEK_GROUP_ALL, messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES,
		messagehubv1.PeekGroup_PEEK_GROUP_AGGREGATIONS, messagehubv1.PeekGroup_PEEK_GROUP_MASTER_DATA}
	for r := range recipients {
		for bundles, empty := 0, 0; bundles < soakDiagnoseBundles && empty < len(hubs)*len(groups); {
			h, g := hubs[(bundles+empty)%len(hubs)], groups[empty%len(groups)]
			resp, _, err := soakCall(ctx, l, func(ctx context.Context) (*messagehubv1.PeekResponse, error) {
				return h.client.Peek(ctx, &messagehubv1.PeekRequest{Recipient: r, Group: g})
			})
			if err != nil {
				t.Logf("diagnosis: Peek(%s): %v", r, err)
				return
			}
			b := resp.GetBundle()
			if b == nil {
				empty++
				continue
			}
			bundles, empty = bundles+1, 0
			held := slices.DeleteFunc(slices.Clone(b.GetNotificationIds()), func(n string) bool { return !missing[n] })
			t.Logf("diagnosis: Peek(%s, %s) after the soak: bundle %s of %s/%s, %d notifications, %d of them undelivered %v",
				r, g, b.GetId(), b.GetOrigin(), b.GetContentType(), len(b.GetNotificationIds()), len(held), held)
			if _, _, err := soakCall(ctx, l, func(ctx context.Context) (*messagehubv1.DequeueResponse, error) {
				return h.client.Dequeue(ctx, &messagehubv1.DequeueRequest{Recipient: r, BundleId: b.GetId()})
			}); err != nil {
				t.Logf("diagnosis: Dequeue(%s): %v", b.GetId(), err)
				return
			}
		}
	}
}
