package cosmos_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/audit"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
)

// A flush of the audit log costs one write per recipient with events,
// however many events each has, and a page of a recipient's log one query
// in its partition (after the read of its primary's token). The charges are the test server's model (see
// TestModeledCostPerNotification); docs/cosmos.md, "The audit log", uses
// them.
func TestAuditFlushCostsOneWritePerRecipient(t *testing.T) {
	e := newCostEnv(t, hub.Options{})
	ctx := context.Background()
	const recipients = 50
	for _, perRecipient := range []int{1, 3, 20} {
		now := time.Now()
		var events []audit.Event
		var first string
		for range recipients {
			r := uuid.NewString()
			if first == "" {
				first = r
			}
			for i := range perRecipient {
				at := now.Add(time.Duration(i) * time.Millisecond)
				// As an actor's Peek or Dequeue records it.
				events = append(events, audit.Event{Key: audit.NewKey(at), At: at, Action: audit.ActionPeek,
					Subject: r, Recipient: r, BundleID: uuid.NewString()})
			}
		}
		byOp, total := e.measure(t, func() {
			if err := e.store.AppendAudit(ctx, events); err != nil {
				t.Fatal(err)
			}
		})
		if total.Requests != recipients {
			t.Fatalf("a flush of %d recipients with %d events each: %d requests (%s); want one per recipient",
				recipients, perRecipient, total.Requests, byOpCharges(byOp))
		}
		_, read := e.measure(t, func() {
			page, err := e.store.AuditEvents(ctx, audit.Range(first, time.Time{}, time.Time{}, "", 100))
			if err != nil || len(page.Events) != perRecipient {
				t.Fatalf("read back %d events (%v); want %d", len(page.Events), err, perRecipient)
			}
		})
		t.Logf("COST audit flush, %2d events per recipient: %.2f RU per recipient (%.2f per event); a page of them: %d request, %.2f RU",
			perRecipient, total.RequestCharge/recipients, total.RequestCharge/float64(len(events)), read.Requests, read.RequestCharge)
	}
	// What the audited calls cost themselves, for comparison: a Peek that
	// cuts a bundle of one notification, and its Dequeue.
	r := seeded(t, e)
	if _, err := e.repo.Save(ctx, notifications(1, r, 1)); err != nil {
		t.Fatal(err)
	}
	_, fetch := e.measure(t, func() {
		b, err := e.repo.Peek(ctx, r, domain.GroupAll, "")
		if err != nil || b == nil {
			t.Fatalf("peek: %v %v", b, err)
		}
		if err := e.repo.Dequeue(ctx, r, b.ID); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("COST a Peek of a bundle of one and its Dequeue: %d requests, %.2f RU", fetch.Requests, fetch.RequestCharge)
}
