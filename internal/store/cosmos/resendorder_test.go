package cosmos_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// Two instances save the same ids for one recipient: B reserves first and
// is held before writing its id documents; A reserves after B, finds no
// other save of the ids, commits, and its process dies before its
// finalize. A's reservation holds the watermark below its notifications
// until its lease ends. B's look-up then finds A's ids committed, but B's
// reservation was written before A's, so the head B wrote does not show
// that A is unfinalized: B must still not answer them as duplicates while
// they are not visible (a Save that returned is visible). It is told to
// try again, and once the lease has ended the resend answers them as
// duplicates, visible.
func TestAResendReservedBeforeTheSaveItMeetsIsNotAnsweredStoredBeforeVisible(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) } // the lease ends when the test says
	// Replicas that never lag: B's first look-up reads A's commit record as
	// committed (a replica behind A's commit shows it pending: B tries
	// again, and reserves then on a head that holds A's reservation).
	db := cosmostest.UniqueID("db")
	opts := cosmostest.Default()
	opts.Lag = 0
	srv := cosmostest.StartWith(t, opts)
	openOn := func(transport policy.Transporter) *cosmos.Store {
		s, err := cosmos.Open(context.Background(), cosmos.Config{
			Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: transport, Now: clock, Lease: time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	// Every one of B's id documents waits (one per bucket its ids fall
	// in): A must find none of them.
	held := holdRequests(func(req *http.Request) bool {
		return toContainer(req, "ids") && req.Method == http.MethodPost && cosmos.Classify(req) == cosmos.OpCreate
	})
	b := hub.New(openOn(held), hub.Options{}, nil)
	t.Cleanup(b.Close)
	f := newFaulty()
	dying := openOn(f)
	cosmos.SetFinalizeFor(dying, 0)
	a := hub.New(dying, hub.Options{}, nil)
	t.Cleanup(a.Close)
	ctx := context.Background()
	r := uuid.NewString()
	ns := notifications(3, r, 1)
	fromB := saveUntil(ctx, t, b, ns, held.holding, "B's save answered before writing its id documents")
	committed := f.goneAfterCommit()
	_, _ = a.Save(ctx, ns) // its answer never reaches the producer
	if !committed.Load() {
		t.Fatal("A's save never committed; the test tested nothing")
	}
	close(held.release)
	got := <-fromB
	if held.tooLong.Load() {
		t.Fatal("B's id document was held past its save's deadline: the test tested something else")
	}
	wantDuplicatesVisible(t, b, ns, got, func() { now.Add(int64(2 * time.Minute)) })
}
