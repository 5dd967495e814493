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

// The inspection calls cost a bounded number of requests in the
// recipient's partitions and its drawers', none across partitions: the
// backlog reads the state and the drawers of the waiting notifications'
// weights, a preview what a Peek reads, a trace the id's record, the state
// and the notification's drawer. The figures are in docs/cosmos.md
// ("Admin calls").
func TestInspectionCostsABoundedNumberOfRequests(t *testing.T) {
	e := newCostEnv(t, hub.Options{})
	ctx := context.Background()
	r := uuid.NewString()
	ns := notifications(100, r, 1)
	if _, err := e.repo.Save(ctx, ns); err != nil {
		t.Fatal(err)
	}
	_, backlog := e.measure(t, func() {
		if b, err := e.repo.Backlog(ctx, r); err != nil || len(b.Cabinets) != 1 || b.Cabinets[0].Weight != 100 {
			t.Fatalf("backlog: %+v, %v", b, err)
		}
	})
	_, preview := e.measure(t, func() {
		if p, err := e.repo.PreviewNextBundle(ctx, r, domain.GroupAll); err != nil || p == nil {
			t.Fatalf("preview: %+v, %v", p, err)
		}
	})
	_, trace := e.measure(t, func() {
		if tr, err := e.repo.TraceNotification(ctx, r, ns[50].ID); err != nil || tr.State != hub.TraceWaiting {
			t.Fatalf("trace: %+v, %v", tr, err)
		}
	})
	for name, op := range map[string]int64{"backlog": backlog.Requests, "preview": preview.Requests, "trace": trace.Requests} {
		if op > 8 {
			t.Fatalf("%s made %d requests", name, op)
		}
	}
	if cross := e.audit.cross; len(cross) != 0 {
		t.Fatalf("cross-partition queries: %v", cross)
	}
	t.Logf("backlog of 100 waiting: %d requests, %.1f RU; preview: %d requests, %.1f RU; trace: %d requests, %.1f RU",
		backlog.Requests, backlog.RequestCharge, preview.Requests, preview.RequestCharge, trace.Requests, trace.RequestCharge)
}
