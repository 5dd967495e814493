package cosmos_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// firedOn returns how often the rules of srv fired.
func firedOn(t *testing.T, srv *cosmostest.Server) int {
	t.Helper()
	rules, err := srv.Faults()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rules {
		n += r.Fired
	}
	return n
}

// Instance A stores ids; instance B, whose replicas are an hour behind,
// saves the same ids again, and the answer to B's id document's create is
// lost: the resend answers 409 (the document is B's own). B's look-up
// after it must still see A's document, written before B's: it reads
// with the token of B's own write, which the 409 does not give B's
// store. Without it the look-up reads a replica from before A's save, B
// commits the id a second time and it is delivered twice.
func TestAnIDDocumentsResendKeepsItsTokenForTheLookUp(t *testing.T) {
	srv := laggingServer(t)
	_, repos := twoInstances(t, srv)
	a, b := repos[0], repos[1]
	ctx := context.Background()
	r := uuid.NewString()
	// One id: one id document, so B writes nothing else to the ids
	// container whose token would cover A's.
	ns := notifications(1, r, 1)
	if res, err := a.Save(ctx, ns); err != nil || res.Saved != len(ns) {
		t.Fatalf("save through A = %+v, %v", res, err)
	}
	if err := srv.AddFaults(cosmostest.Fault{Kind: cosmostest.LostUnavailable, Count: 1, Ops: []string{"create"}, Coll: "ids"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.ClearFaults("") })
	res, err := b.Save(ctx, ns)
	if firedOn(t, srv) != 1 {
		t.Fatal("no id document's answer was lost; the test tested nothing")
	}
	if err == nil && res.Duplicates != len(ns) {
		t.Fatalf("the same ids saved again through B = %+v; want %d duplicates", res, len(ns))
	}
	if err := srv.ClearFaults(""); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		if res, err = b.Save(ctx, ns); err != nil || res.Duplicates != len(ns) {
			t.Fatalf("the resend through B = %+v, %v; want %d duplicates", res, err, len(ns))
		}
	}
	drainExactly(t, b, r, ids(ns))
}

// A save's process dies right after its commit applied: its reservation
// stays in the recipient's head, holding the watermark below its
// notifications, until its lease ends and a load settles it. The
// producer, told nothing, resends the Save to another instance within the
// lease. Its ids are the committed save's, but the resend must not answer
// them as duplicates while they are not visible: a Save that returned is
// visible. It is told to try again (the save is in flight), and once the
// lease has ended the resend answers them as duplicates, visible.
func TestAResendOfASaveCommittedByADeadProcessIsVisibleOnceAnswered(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) } // the lease never ends
	db := cosmostest.UniqueID("db")
	f := newFaulty()
	dying := open(t, cosmos.Config{Database: db, Transport: f, Now: clock, Lease: time.Minute})
	cosmos.SetFinalizeFor(dying, 0)
	repo := hub.New(dying, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	// The process is gone from the moment its commit applied.
	committed := f.goneAfterCommit()
	ns := notifications(3, r, 1)
	_, _ = repo.Save(ctx, ns) // its answer never reaches the producer
	if !committed.Load() {
		t.Fatal("the save never committed; the test tested nothing")
	}
	survivor := hub.New(open(t, cosmos.Config{Database: db, Now: clock, Lease: time.Minute}), hub.Options{}, nil)
	t.Cleanup(survivor.Close)
	if b, err := survivor.Peek(ctx, r, domain.GroupAll, ""); err != nil || b != nil {
		t.Fatalf("peek before the resend = %v, %v; want nothing (the dead save is not finalized)", b, err)
	}
	res, err := survivor.Save(ctx, ns)
	wantDuplicatesVisible(t, survivor, ns, saveAnswer{res, err}, func() { now.Add(int64(2 * time.Minute)) })
}

// heldRequests is a transport that holds every request match picks until
// release is closed; holding is closed when it holds the first. tooLong
// says that one was held until its deadline.
type heldRequests struct {
	hookTransport
	holding, release chan struct{}
	tooLong          atomic.Bool
}

func holdRequests(match func(*http.Request) bool) *heldRequests {
	h := &heldRequests{holding: make(chan struct{}), release: make(chan struct{})}
	var once sync.Once
	h.next = cosmostest.NewHTTPClient()
	h.before = func(req *http.Request) {
		if !match(req) {
			return
		}
		once.Do(func() { close(h.holding) })
		select {
		case <-h.release:
		case <-req.Context().Done():
			h.tooLong.Store(true)
		}
	}
	return h
}

// heldAtCommit opens two instances on one database: a, whose replaces of
// commit records (a save's commit, or its abort) held holds, and b.
func heldAtCommit(t *testing.T) (held *heldRequests, a, b *hub.Hub) {
	db := cosmostest.UniqueID("db")
	held = holdRequests(func(req *http.Request) bool { return toContainer(req, "saves") && req.Method == http.MethodPut })
	a = hub.New(open(t, cosmos.Config{Database: db, Transport: held}), hub.Options{}, nil)
	t.Cleanup(a.Close)
	b = hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
	t.Cleanup(b.Close)
	return held, a, b
}

// saveAnswer is what a Save answered.
type saveAnswer struct {
	res domain.SaveResult
	err error
}

// saveUntil starts repo.Save of ns and waits until held is closed (the save
// reached a request the test holds); the test fails with why when the
// save answers first. The answer comes on the channel.
func saveUntil(ctx context.Context, t *testing.T, repo *hub.Hub, ns []domain.Notification, held <-chan struct{}, why string) <-chan saveAnswer {
	t.Helper()
	answer := make(chan saveAnswer, 1)
	go func() {
		res, err := repo.Save(ctx, ns)
		answer <- saveAnswer{res, err}
	}()
	select {
	case <-held:
	case got := <-answer:
		t.Fatalf("%s: %+v, %v", why, got.res, got.err)
	}
	return answer
}

// wantDuplicatesVisible checks got, the answer to a resend of ns whose
// ids a committed save holds that is not finalized yet: a Save that
// returned is visible, so the resend answers them as duplicates only once
// they are, and is else told to try again (unavailable); once endLease has
// ended the committed save's lease, a resend answers them as duplicates.
// They are delivered once.
func wantDuplicatesVisible(t *testing.T, repo *hub.Hub, ns []domain.Notification, got saveAnswer, endLease func()) {
	t.Helper()
	ctx := context.Background()
	r := ns[0].Recipient
	res, err := got.res, got.err
	if err != nil {
		if !errors.Is(err, domain.ErrUnavailable) {
			t.Fatalf("the resend within the lease: %v; want success or unavailable", err)
		}
		t.Logf("the resend within the lease: %v", err)
		endLease()
		res, err = repo.Save(ctx, ns)
	}
	if err != nil || res.Duplicates != len(ns) {
		t.Fatalf("the resend = %+v, %v; want %d duplicates", res, err, len(ns))
	}
	b, err := repo.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || b == nil || !slices.Equal(b.NotificationIDs, ids(ns)) {
		t.Fatalf("peek after the resend answered %+v = %v, %v; want its %d notifications", res, b, err, len(ns))
	}
	drainExactly(t, repo, r, ids(ns))
}

// A save's commit applies and its answer is lost: the resend meets the
// committed record (412), and the read on the primary that would tell a
// replay from a settler's abort fails, as does the abort's own read after
// it. The save is committed but not finalized: its reservation holds the
// watermark below its notifications until its lease ends. The Save must
// not answer success (by a retry that finds its ids stored) while they are
// not visible: it answers unavailable, or success with them visible. Nor
// is it replanned as if its commit had been refused: that would write
// save after save, each aborted, before answering.
func TestACommitWhoseReplayCheckFailsIsNotAnsweredAsStoredBeforeVisible(t *testing.T) {
	clock := &costClock{now: time.Now()}
	db := cosmostest.UniqueID("db")
	repo := hub.New(open(t, cosmos.Config{Database: db, Now: clock.Now, Lease: time.Minute}), hub.Options{}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	ns := notifications(3, r, 1)
	inject(t, db,
		cosmostest.Fault{Kind: cosmostest.LostUnavailable, Count: 1, Ops: []string{"replace"}, Coll: "saves", Body: `"state":"committed"`},
		// Every read of the record on the primary (the commit's check, the
		// abort's) fails until the Save has answered.
		cosmostest.Fault{Kind: cosmostest.Refuse503, Ops: []string{"batch"}, Coll: "saves"},
	)
	res, err := repo.Save(ctx, ns)
	if n := firedEach(t, db); len(n) != 2 || n[0] != 1 || n[1] < 2 {
		t.Fatalf("faults fired %v (the commit's answer lost, the reads refused); the test tested something else", n)
	}
	clearFaults(t, db)
	if n := countDocs(t, db, "saves"); n != 1 {
		t.Fatalf("%d commit records; want the save's one (it was replanned as refused)", n)
	}
	if err == nil {
		b, perr := repo.Peek(ctx, r, domain.GroupAll, "")
		if perr != nil || b == nil || !slices.Equal(b.NotificationIDs, ids(ns)) {
			t.Fatalf("peek after the save answered %+v = %v, %v; want its %d notifications", res, b, perr, len(ns))
		}
	} else if !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("a save whose commit's outcome is unknown answered %v; want unavailable", err)
	}
	t.Logf("the save answered %+v, %v", res, err)
	clock.advance(2 * time.Minute) // the lease ends: a load settles the save
	saveAsTheHub(t, repo, db, ns, err)
	drainExactly(t, repo, r, ids(ns))
}

// A save's finalize applies and its answer is lost: the resend is refused
// (412) by its own effect, and the head is read again to see. That read
// must see the finalize, this instance's own write: from a replica behind
// it the head still holds the reservation, the replace on that version is
// refused again, and the finalize goes round until the replica catches up
// (here an hour), holding the Save, and every later Save of the recipient
// on this instance, though the save is done.
func TestAFinalizeWhoseAnswerIsLostReadsItsOwnWrite(t *testing.T) {
	srv := laggingServer(t)
	stores, repos := twoInstances(t, srv)
	// Long enough for many rounds, short enough for the test to end.
	cosmos.SetFinalizeFor(stores[0], 3*time.Second)
	ctx := context.Background()
	r := uuid.NewString()
	ns := notifications(2, r, 1)
	if err := srv.AddFaults(cosmostest.Fault{Kind: cosmostest.LostUnavailable, Count: 1, Ops: []string{"replace"}, Coll: "recipients", ID: "^head$"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.ClearFaults("") })
	byOp, _ := (&costEnv{store: stores[0]}).measure(t, func() {
		if res, err := repos[0].Save(ctx, ns); err != nil || res.Saved != len(ns) {
			t.Fatalf("save = %+v, %v", res, err)
		}
	})
	if firedOn(t, srv) != 1 {
		t.Fatal("the finalize's answer was not lost; the test tested nothing")
	}
	// The commit record's replace, the finalize's and the transport's
	// resend of it, then one read of the head that shows it done: three
	// (four would be one round more).
	t.Logf("the save's requests: %v", byOpCharges(byOp))
	if n := byOp[cosmos.OpReplace].Requests; n > 4 {
		t.Fatalf("the save made %d replaces: its finalize went round on a head read behind its own write", n)
	}
	drainExactly(t, repos[0], r, ids(ns))
}

// A save of more cabinets than one reserve batch takes writes the rest of
// its reservation in part batches (a part document, the head and the
// entries it lists). The first reserve batch meets every fault in
// TestEveryWriteSurvivesALostOrRefusedAnswer; here the part batch does.
// A lost answer's resend finds its own part; a failure the save cannot
// see through aborts it, and the rollback gives back the positions of
// both batches (the part's was written); either way the notifications
// are delivered exactly once after the hub's resend, and the recipient
// is not held up. Three of writeFaults' cases, one per outcome (each
// drains a hundred bundles): its answer lost once, lost on every attempt
// (applied, the outcome unknown), refused on every attempt.
func TestAReservePartBatchSurvivesALostOrRefusedAnswer(t *testing.T) {
	const cabinets = 100 // > maxReserveEntries: two reserve batches
	for _, f := range []struct {
		kind  cosmostest.FaultKind
		count int
	}{{cosmostest.LostUnavailable, 1}, {cosmostest.LostUnavailable, 6}, {cosmostest.RefuseRetryWith, 6}} {
		t.Run(faultCase("reserve part", f.kind, f.count), func(t *testing.T) {
			db := cosmostest.UniqueID("db")
			repo := hub.New(openLarge(t, cosmos.Config{Database: db}), hub.Options{}, nil)
			t.Cleanup(repo.Close)
			r := uuid.NewString()
			ns := notifications(cabinets, r, 1)
			for i := range ns {
				ns[i].ContentType = fmt.Sprintf("ct-%03d", i)
			}
			inject(t, db, cosmostest.Fault{Kind: f.kind, Count: f.count, Ops: []string{"batch"}, Coll: "recipients", Type: "respart"})
			_, err := repo.Save(context.Background(), ns)
			if fired(t, db) == 0 {
				t.Fatal("the part batch met no fault; the test tested nothing")
			}
			clearFaults(t, db)
			if err != nil && refused(f.kind) {
				if b, perr := repo.Peek(context.Background(), r, domain.GroupAll, ""); perr != nil || b != nil {
					t.Fatalf("peek after a refused save (%v) = %v, %v; want nothing", err, b, perr)
				}
			}
			saveAsTheHub(t, repo, db, ns, err)
			drainExactly(t, repo, r, ids(ns))
		})
	}
}

// Instance A's save of some ids is held just before its commit; instance
// B saves the same ids meanwhile. B's look-up finds A's ids in a save
// still pending: B gives way, and must neither store them a second time
// nor answer them as duplicates of a save that may yet fail. It is told to
// try again; once A has committed, B's resend counts them as duplicates,
// and they are delivered once.
func TestASaveMeetingTheSameIDsPendingOnAnotherInstanceGivesWay(t *testing.T) {
	held, a, b := heldAtCommit(t)
	r := uuid.NewString()
	ns := notifications(3, r, 1)
	// A's save may take its hub's longest time: B's attempts run meanwhile.
	actx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fromA := saveUntil(actx, t, a, ns, held.holding, "A's save answered before its commit")
	ctx := context.Background()
	res, err := b.Save(ctx, ns)
	close(held.release)
	got := <-fromA
	if held.tooLong.Load() {
		t.Fatal("A's commit was held past its deadline: the test tested something else")
	}
	if err == nil {
		t.Fatalf("B's save of ids A's pending save holds answered %+v; want to be told to try again", res)
	}
	if !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("B's save of ids A's pending save holds: %v; want unavailable", err)
	}
	if got.err != nil || got.res.Saved != len(ns) {
		t.Fatalf("A's save = %+v, %v; want %d saved", got.res, got.err, len(ns))
	}
	if res, err := b.Save(ctx, ns); err != nil || res.Duplicates != len(ns) {
		t.Fatalf("B's resend after A's commit = %+v, %v; want %d duplicates", res, err, len(ns))
	}
	drainExactly(t, b, r, ids(ns))
}

// A save is slow, not dead: its page batch is held until its lease has
// ended (by the instances' clocks), and another instance's load settles
// the save meanwhile: aborted, its positions recorded as holes, its
// reservation dropped. Then the saver carries on. Its commit must be
// refused (the record says aborted), its late pages must never show, and
// the hub's retry stores the notifications once.
func TestASaverStillWritingAfterASettlerAbortedItStoresItsNotificationsOnce(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	db := cosmostest.UniqueID("db")
	holding, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var armed, heldTooLong atomic.Bool
	transport := &hookTransport{
		next: cosmostest.NewHTTPClient(),
		before: func(req *http.Request) {
			if !armed.Load() || !isBatch(req, "drawers", "") {
				return
			}
			first := false
			once.Do(func() { first = true; close(holding) })
			if !first {
				return
			}
			select {
			case <-release:
			case <-req.Context().Done():
				heldTooLong.Store(true)
			}
		},
	}
	slow := hub.New(open(t, cosmos.Config{Database: db, Transport: transport, Now: clock, Lease: time.Minute}), hub.Options{}, nil)
	t.Cleanup(slow.Close)
	settler := hub.New(open(t, cosmos.Config{Database: db, Now: clock, Lease: time.Minute}), hub.Options{}, nil)
	t.Cleanup(settler.Close)
	r := uuid.NewString()
	before := notifications(2, r, 1)
	ctx := context.Background()
	if _, err := slow.Save(ctx, before); err != nil {
		t.Fatal(err)
	}
	ns := notifications(3, r, 1)
	armed.Store(true)
	// The save may take its hub's longest time, in real time: the lease
	// ends by the clock the stores are given.
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	fromSlow := saveUntil(sctx, t, slow, ns, holding, "the save answered before its pages were written")
	now.Add(int64(10 * time.Minute)) // past the lease: twice the deadline the save was given
	// The settler's Peek loads the recipient: the expired reservation is
	// settled, and only what was saved before shows.
	b, err := settler.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || b == nil || !slices.Equal(b.NotificationIDs, ids(before)) {
		t.Fatalf("peek while the save is settled = %v, %v; want the %d saved before", b, err, len(before))
	}
	if err := settler.Dequeue(ctx, r, b.ID); err != nil {
		t.Fatal(err)
	}
	if n := savesIn(t, db, stateAborted); n != 1 {
		t.Fatalf("%d aborted saves; the settler did not abort the slow one", n)
	}
	close(release)
	got := <-fromSlow
	if heldTooLong.Load() {
		t.Fatal("the page batch was held past the save's deadline: the test tested something else")
	}
	t.Logf("the slow save answered %+v, %v", got.res, got.err)
	saveAsTheHub(t, slow, db, ns, got.err)
	drainExactly(t, settler, r, ids(ns))
}

const stateAborted = "aborted"

// savesIn counts the commit records of db in a state.
func savesIn(t *testing.T, db, state string) int {
	t.Helper()
	waitOutLag() // the query carries no session token
	pager := containerOf(t, db, "saves").NewQueryItemsPager("SELECT c.id FROM c WHERE c.state = @state",
		azcosmos.NewPartitionKey(), &azcosmos.QueryOptions{QueryParameters: []azcosmos.QueryParameter{{Name: "@state", Value: state}}})
	n := 0
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Items)
	}
	return n
}
