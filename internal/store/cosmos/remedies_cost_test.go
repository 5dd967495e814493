package cosmos_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
)

// The remedies cost a bounded number of requests, all in the recipient's
// partitions: a release reads the recipient's state (2 requests) and writes
// one batch; acknowledging one bundle's worth on an actor's behalf costs
// the trace of the notification named, then what the actor's Peek and
// Dequeue would, and one more read of the state that finds the target
// reached. The figures are in docs/cosmos.md ("Admin remedies").
func TestRemediesCostABoundedNumberOfRequests(t *testing.T) {
	e := newCostEnv(t, hub.Options{})
	ctx := context.Background()
	r := uuid.NewString()
	ns := notifications(100, r, 1)
	if _, err := e.repo.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	var b *domain.Bundle
	_, peek := e.measure(t, func() {
		var err error
		if b, err = e.repo.Peek(ctx, r, domain.GroupAll, ""); err != nil || b == nil {
			t.Fatalf("peek: %v, %v", b, err)
		}
	})
	byOp, release := e.measure(t, func() {
		if _, err := e.repo.ReleaseBundle(ctx, r, b.ID); err != nil {
			t.Fatal(err)
		}
	})
	if release.Requests != 3 {
		t.Fatalf("a release made %d requests, want 3: %v", release.Requests, byOp)
	}
	byOp, ack := e.measure(t, func() {
		done, err := e.repo.AcknowledgeOnBehalf(ctx, r, domain.OriginTimeSeries, "rsm-014", ns[99].ID)
		if err != nil || len(done.Bundles) != 1 || done.Notifications != 100 {
			t.Fatalf("acknowledge: %+v, %v", done, err)
		}
	})
	if ack.Requests > 16 {
		t.Fatalf("acknowledging one bundle on the actor's behalf made %d requests: %v", ack.Requests, byOp)
	}
	if cross := e.audit.cross; len(cross) != 0 {
		t.Fatalf("cross-partition queries: %v", cross)
	}
	t.Logf("peek of 100: %d requests, %.1f RU; release: %d requests, %.1f RU; acknowledge of 100 on behalf: %d requests, %.1f RU (%v)",
		peek.Requests, peek.RequestCharge, release.Requests, release.RequestCharge, ack.Requests, ack.RequestCharge, byOp)
}
