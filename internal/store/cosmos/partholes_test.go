package cosmos_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/catalog"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// A failed save of more cabinets than one reserve batch takes is rolled
// back part by part: the positions of a part become holes before the batch
// that drops the reservation. When that batch fails, the reservation stays
// until its lease ends, while the cabinets of the part hold nothing but a
// hole: retention takes them out, and a save starts one again at position
// 0. The settler that finishes the rollback after the lease must not
// record the part's holes a second time, in the cabinet started since:
// they are that save's positions now, and its acknowledged notifications
// would be skipped as holes.
func TestARollbackTakenUpAgainRecordsNoHoleInACabinetStartedSince(t *testing.T) {
	const cabinets = 100 // > maxReserveEntries: the last cabinets are in a part
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) } // the store's: leases
	hubClock := &costClock{now: time.Now()}                       // the hub's: retention
	db := cosmostest.UniqueID("db")
	f := newFaulty()
	s := openLarge(t, cosmos.Config{Database: db, Transport: f, Now: clock, Lease: time.Minute})
	repo := hub.New(s, hub.Options{Retention: time.Hour, SweepInterval: time.Hour, Now: hubClock.Now}, nil)
	t.Cleanup(repo.Close)
	ctx := context.Background()
	r := uuid.NewString()
	// A bundle dequeued and due brings retention to the recipient.
	drained := notifications(1, r, 1)
	drained[0].ContentType = "drained"
	if _, err := repo.Save(ctx, drained); err != nil {
		t.Fatal(err)
	}
	drainExactly(t, repo, r, ids(drained))

	ns := notifications(cabinets, r, 1)
	for i := range ns {
		ns[i].ContentType = fmt.Sprintf("ct-%03d", i)
	}
	// The batch that drops the reservation with the holes of its first
	// batch's cabinets (the only batch writing the head and holes) fails.
	inject(t, db, cosmostest.Fault{Kind: cosmostest.Refuse503, Ops: []string{"batch"}, Coll: "recipients", Type: "head", Body: `"h":\[\[`})
	abortSave(t, f, repo, ns)
	if fired(t, db) == 0 {
		t.Fatal("the reservation's drop did not fail; the test tested nothing")
	}
	clearFaults(t, db)

	hubClock.advance(2 * time.Hour)
	if err := repo.SweepNow(ctx); err != nil {
		t.Fatal(err)
	}
	state, err := s.LoadRecipient(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(state.Entries, func(e catalog.Entry) bool { return e.ContentType == ns[cabinets-1].ContentType }) {
		t.Fatal("retention left the part's cabinet, which holds a hole alone; the test tests nothing")
	}
	again := notifications(2, r, 1)
	for i := range again {
		again[i].ContentType = ns[cabinets-1].ContentType
	}
	if res, err := repo.Save(ctx, again); err != nil || res.Saved != len(again) {
		t.Fatalf("save in the part's cabinet = %+v, %v", res, err)
	}
	now.Add(int64(2 * time.Minute)) // the failed save's lease ends: a load settles it
	drainExactly(t, repo, r, ids(again))
}
