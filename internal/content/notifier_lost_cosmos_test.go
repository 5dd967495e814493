package content_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// The answer of a dequeue's batch (with its notice) is lost after the batch
// applied, in each way an answer goes missing, and so is the answer of the
// notice's removal: the dequeue succeeds (its replay is recognised as its
// own), its domain is told at once (the notice is this instance's own,
// however long the grace), once, and no notice is left.
func TestLostAnswersOfADequeueAndItsNoticesRemovalTellTheDomainOnce(t *testing.T) {
	for _, kind := range []cosmostest.FaultKind{cosmostest.LostTimeout, cosmostest.LostUnavailable, cosmostest.LostReset} {
		t.Run(string(kind), func(t *testing.T) {
			srv := cosmostest.Start(t)
			db := cosmostest.UniqueID("db")
			ctx := within(t, time.Minute)
			s, err := cosmos.Open(ctx, cosmos.Config{Endpoint: srv.Endpoint, Key: srv.Key, Provision: true, Database: db, Transport: cosmostest.NewHTTPClient()})
			if err != nil {
				t.Fatal(err)
			}
			signal := content.NewNoticeSignal()
			repo := hub.New(s, hub.Options{Notices: func(domain.Origin) bool { return true }, OnNotice: signal.Send}, nil)
			t.Cleanup(func() { repo.Close(); _ = s.Close() })
			provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer { return contenttest.Answer{} })
			client := &gatedProvider{BundleContentProviderClient: provider.Client(t), gate: closedGate(), started: make(chan struct{}), calls: map[string]int{}}
			notifier := content.StartNotifier(content.NotifierOptions{
				Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginCharges: client},
				Notices:   s,
				Bundle:    repo.NoticedBundle,
				Signal:    signal,
				Grace:     time.Hour,
				Interval:  50 * time.Millisecond,
			})
			defer notifier.Close()

			recipient := uuid.NewString()
			n := domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges, ContentType: "c", DocumentType: "c", Weight: 1}
			if _, err := repo.Save(ctx, []domain.Notification{n}); err != nil {
				t.Fatal(err)
			}
			b, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
			if err != nil || b == nil {
				t.Fatalf("peek: %v, %v", b, err)
			}
			err = srv.AddFaults(
				cosmostest.Fault{Kind: kind, Count: 1, Ops: []string{"batch"}, DB: db, Coll: "recipients", ID: "^n:" + b.ID + ":"},
				cosmostest.Fault{Kind: kind, Count: 1, Ops: []string{"batch", "delete"}, DB: db, Coll: "recipients", ID: "^n:" + b.ID + ":"},
			)
			if err != nil {
				t.Fatal(err)
			}
			if err := repo.Dequeue(ctx, recipient, b.ID); err != nil {
				t.Fatalf("dequeue whose batch's answer was lost: %v", err)
			}
			select {
			case told := <-provider.Told():
				if told.GetId() != b.ID {
					t.Fatalf("told of %s, want %s", told.GetId(), b.ID)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the dequeue was not told at once")
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				left, err := s.Notices(ctx, domain.Origins, 10)
				if err == nil && len(left) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("notices left: %+v (%v)", left, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond) // a few more looks
			notifier.Close()
			if rules, err := srv.Faults(); err != nil || len(rules) != 2 || rules[0].Fired != 1 || rules[1].Fired != 1 {
				t.Fatalf("faults %+v, %v: an answer was not lost; the test tested less", rules, err)
			}
			client.mu.Lock()
			defer client.mu.Unlock()
			if c := client.calls[b.ID]; c != 1 {
				t.Fatalf("the domain was called %d times for one dequeue", c)
			}
		})
	}
}

func closedGate() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
