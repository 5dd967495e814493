package cosmos_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// The traces below name a notification whose save is at one step of its
// protocol. A trace never tells the operator something false: the
// notifications of a save that may still abort are not found (not stored,
// not another recipient's), those of an aborted save are not found, those
// of a committed save are where they are; and AcknowledgeOnBehalf, which
// traces its target first, acts on no notification of a save that is not
// committed.

// wantTrace traces id of recipient r through repo and fails unless it is
// in state want.
func wantTrace(t *testing.T, repo *hub.Hub, r, id string, want hub.TraceState, when string) {
	t.Helper()
	got, err := repo.TraceNotification(context.Background(), r, id)
	if err != nil || got.State != want {
		t.Fatalf("trace %s = %+v, %v; want state %d", when, got, err, want)
	}
}

// wantNoAcknowledge asks repo to acknowledge r's cabinet up to id, which no
// committed save holds: it must answer not found, having dequeued nothing.
func wantNoAcknowledge(t *testing.T, repo *hub.Hub, r, id, when string) {
	t.Helper()
	got, err := repo.AcknowledgeOnBehalf(context.Background(), r, domain.OriginTimeSeries, "rsm-014", id)
	if !errors.Is(err, domain.ErrNotFound) || len(got.Bundles) != 0 {
		t.Fatalf("acknowledge up to a notification %s = %+v, %v; want not found, nothing dequeued", when, got, err)
	}
}

// death is a hub whose process a test has die part-way through a save
// (through f), on a database whose instances share a clock the test moves
// past the saves' leases.
type death struct {
	db    string
	clock *costClock
	f     *faulty
	dying *hub.Hub
}

func newDeath(t *testing.T) *death {
	d := &death{db: cosmostest.UniqueID("db"), clock: &costClock{now: time.Now()}, f: newFaulty()}
	s := open(t, cosmos.Config{Database: d.db, Transport: d.f, Now: d.clock.Now, Lease: time.Minute})
	cosmos.SetFinalizeFor(s, 0) // a committed save is left as its process dying leaves it
	d.dying = hub.New(s, hub.Options{}, nil)
	t.Cleanup(d.dying.Close)
	return d
}

// survivor is another instance on the database, with the same clock.
func (d *death) survivor(t *testing.T) *hub.Hub {
	h := hub.New(open(t, cosmos.Config{Database: d.db, Now: d.clock.Now, Lease: time.Minute}), hub.Options{}, nil)
	t.Cleanup(h.Close)
	return h
}

// (a) A save held before its commit: its id documents are written, its
// record is pending. Neither instance reports its notifications.
func TestATraceOfASaveInFlightBeforeItsCommitFindsNothing(t *testing.T) {
	held, a, b := heldAtCommit(t)
	r := uuid.NewString()
	ns := notifications(3, r, 1)
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fromA := saveUntil(sctx, t, a, ns, held.holding, "the save answered before its commit")
	for _, repo := range []*hub.Hub{a, b} {
		wantTrace(t, repo, r, ns[1].ID, hub.TraceNotFound, "of a save before its commit")
		wantNoAcknowledge(t, repo, r, ns[1].ID, "of a save before its commit")
	}
	close(held.release)
	if got := <-fromA; got.err != nil || got.res.Saved != len(ns) {
		t.Fatalf("the save = %+v, %v; want %d saved", got.res, got.err, len(ns))
	}
	if held.tooLong.Load() {
		t.Fatal("the commit was held past its deadline: the test tested something else")
	}
	wantTrace(t, a, r, ns[1].ID, hub.TraceWaiting, "once the save answered")
	drainExactly(t, a, r, ids(ns))
}

// (b, d) The saving process dies right after its commit applied: the save
// is committed, not finalized (its reservation holds the watermark until
// its lease ends). Until then its notifications are not visible to a Peek;
// once the lease ends, the load the trace makes settles the save
// (finalized) and the trace finds them waiting.
func TestATraceOfASaveCommittedByADeadProcessIsTrueBeforeAndAfterItIsSettled(t *testing.T) {
	d := newDeath(t)
	ctx := context.Background()
	r := uuid.NewString()
	committed := d.f.goneAfterCommit()
	ns := notifications(3, r, 1)
	_, _ = d.dying.Save(ctx, ns)
	if !committed.Load() {
		t.Fatal("the save never committed; the test tested something else")
	}
	survivor := d.survivor(t)
	got, err := survivor.TraceNotification(ctx, r, ns[1].ID)
	t.Logf("trace of a committed save not finalized: %+v, %v", got, err)
	if err == nil && got.State != hub.TraceWaiting {
		t.Fatalf("trace of a committed save not finalized = %+v; want waiting (or to be told to try again)", got)
	}
	// Nothing of the save can be dequeued before it is finalized: the
	// remedy is told to try again, or (were it finalized meanwhile) does
	// what the actor's Peek and Dequeue would.
	ack, err := survivor.AcknowledgeOnBehalf(ctx, r, domain.OriginTimeSeries, "rsm-014", ns[1].ID)
	if err != nil && (!errors.Is(err, domain.ErrUnavailable) || len(ack.Bundles) != 0) {
		t.Fatalf("acknowledge up to a notification of a committed save not finalized = %+v, %v; want unavailable, nothing dequeued", ack, err)
	}
	d.clock.advance(2 * time.Minute) // the lease ends
	if err == nil {
		t.Logf("acknowledged %+v before the lease ended", ack)
		wantTrace(t, survivor, r, ns[1].ID, hub.TraceDequeued, "once acknowledged")
		return
	}
	wantTrace(t, survivor, r, ns[1].ID, hub.TraceWaiting, "once the lease ended")
	drainExactly(t, survivor, r, ids(ns))
	wantTrace(t, survivor, r, ns[1].ID, hub.TraceDequeued, "once dequeued")
}

// (d) The saving process dies before its commit: the record stays pending
// until another instance settles the save after its lease (aborted, rolled
// back). Its notifications are found neither before nor after.
func TestATraceOfASaveWhoseProcessDiedBeforeItsCommitFindsNothing(t *testing.T) {
	d := newDeath(t)
	ctx := context.Background()
	r := uuid.NewString()
	d.f.dieAtCommit()
	ns := notifications(3, r, 1)
	if _, err := d.dying.Save(ctx, ns); err == nil {
		t.Fatal("a save whose process died at its commit succeeded")
	}
	survivor := d.survivor(t)
	wantTrace(t, survivor, r, ns[1].ID, hub.TraceNotFound, "of a save pending in a dead process")
	wantNoAcknowledge(t, survivor, r, ns[1].ID, "of a save pending in a dead process")
	d.clock.advance(2 * time.Minute) // the lease ends: the next load aborts the save
	if b, err := survivor.Peek(ctx, r, domain.GroupAll, ""); err != nil || b != nil {
		t.Fatalf("peek after the lease = %v, %v; want nothing", b, err)
	}
	if n := savesIn(t, d.db, stateAborted); n != 1 {
		t.Fatalf("%d aborted saves; the settler did not abort the dead one", n)
	}
	wantTrace(t, survivor, r, ns[1].ID, hub.TraceNotFound, "of a save settled as aborted")
	wantNoAcknowledge(t, survivor, r, ns[1].ID, "of a save settled as aborted")
}

// (c) A save's commit is refused, so it aborts, and its rollback cannot
// delete its id documents: they stay behind, naming an aborted save. Its
// notifications are not found, on either instance.
func TestATraceOfAnAbortedSaveWhoseIDDocumentsStayFindsNothing(t *testing.T) {
	db := cosmostest.UniqueID("db")
	f := newFaulty()
	a := hub.New(open(t, cosmos.Config{Database: db, Transport: f}), hub.Options{}, nil)
	t.Cleanup(a.Close)
	b := hub.New(open(t, cosmos.Config{Database: db}), hub.Options{}, nil)
	t.Cleanup(b.Close)
	ctx := context.Background()
	r := uuid.NewString()
	ns := notifications(3, r, 1)
	inject(t, db, cosmostest.Fault{Kind: cosmostest.Refuse503, Ops: []string{"replace"}, Coll: "saves", Body: `"state":"committed"`})
	var idDeletes atomic.Int32
	f.set(func(req *http.Request) int {
		if toContainer(req, "ids") && req.Method == http.MethodDelete {
			idDeletes.Add(1)
			return http.StatusForbidden
		}
		return 0
	})
	if _, err := a.Save(ctx, ns); err == nil {
		t.Fatal("a save whose commit was refused succeeded")
	}
	f.set(func(*http.Request) int { return 0 })
	clearFaults(t, db)
	if idDeletes.Load() == 0 || countDocs(t, db, "ids") == 0 {
		t.Fatal("the rollback left no id document; the test tested something else")
	}
	if n := savesIn(t, db, stateAborted); n != 1 {
		t.Fatalf("%d aborted saves; want the refused one", n)
	}
	for _, repo := range []*hub.Hub{b, a} {
		wantTrace(t, repo, r, ns[1].ID, hub.TraceNotFound, "of an aborted save")
		wantNoAcknowledge(t, repo, r, ns[1].ID, "of an aborted save")
	}
}

// A save is committed and finalized on instance A; instance B traces its
// notifications at once. Every read without a session token lags an hour
// here: B's replicas know neither A's id documents nor A's commit. The
// notifications are stored (A's Save answered so), so B must not answer
// that they are not.
func TestATraceOnAnotherInstanceFindsAStoredNotificationWhoseReplicasLag(t *testing.T) {
	_, repos := twoInstances(t, laggingServer(t))
	a, b := repos[0], repos[1]
	ctx := context.Background()
	r := uuid.NewString()
	ns := notifications(3, r, 1)
	if res, err := a.Save(ctx, ns); err != nil || res.Saved != len(ns) {
		t.Fatalf("save = %+v, %v", res, err)
	}
	wantTrace(t, b, r, ns[1].ID, hub.TraceWaiting, "on another instance")
	bundle, err := a.Peek(ctx, r, domain.GroupAll, "")
	if err != nil || bundle == nil {
		t.Fatalf("peek = %v, %v", bundle, err)
	}
	wantTrace(t, b, r, ns[1].ID, hub.TracePending, "on another instance once peeked")
	if err := a.Dequeue(ctx, r, bundle.ID); err != nil {
		t.Fatal(err)
	}
	wantTrace(t, b, r, ns[1].ID, hub.TraceDequeued, "on another instance once dequeued")
}
