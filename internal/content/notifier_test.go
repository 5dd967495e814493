package content_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/repository"
	"github.com/energydatahub/messagehub/internal/repository/embedded"
)

// Every dequeue of a bundle of a domain with a provider is told to it, at
// least once, also when the provider fails at first; other domains' dequeues
// leave no notice.
func TestEveryDequeueIsToldToItsDomain(t *testing.T) {
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer { return contenttest.Answer{} })
	provider.FailDequeued(2)
	store, err := embedded.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	repo := repository.New(store, repository.Options{Announce: func(o domain.Origin) bool { return o == domain.OriginTimeSeries }}, nil)
	defer func() { repo.Close(); _ = store.Close() }()
	ctx := within(t, time.Minute)

	recipient := uuid.NewString()
	var notes []domain.Notification
	for _, origin := range []domain.Origin{domain.OriginTimeSeries, domain.OriginTimeSeries, domain.OriginCharges, domain.OriginTimeSeries} {
		notes = append(notes, domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: origin,
			ContentType: "c", DocumentType: "c", SupportsBundling: false, Weight: 1})
	}
	if _, err := repo.Save(ctx, notes); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{} // bundle id → its notification ids, time series only
	for range notes {
		b, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
		if err != nil || b == nil {
			t.Fatalf("peek: %v, %v", b, err)
		}
		if err := repo.Dequeue(ctx, recipient, b.ID); err != nil {
			t.Fatal(err)
		}
		if b.Origin == domain.OriginTimeSeries {
			want[b.ID] = b.NotificationIDs
		}
	}
	if n, _, err := store.NoticeBacklog(ctx); err != nil || n != 3 {
		t.Fatalf("%d notices (%v), want 3: one per time series dequeue", n, err)
	}

	notifier := content.StartNotifier(content.NotifierOptions{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)},
		Notices:   store,
		Bundle:    repo.DequeuedBundle,
		Interval:  time.Millisecond, RetryMax: 10 * time.Millisecond,
	})
	for range len(want) {
		select {
		case b := <-provider.Told():
			ids, ok := want[b.GetId()]
			if !ok || !slices.Equal(b.GetNotificationIds(), ids) || b.GetRecipient() != recipient {
				t.Fatalf("told of %v; want one of the dequeued time series bundles", b)
			}
			delete(want, b.GetId())
		case <-ctx.Done():
			t.Fatalf("%d dequeues were never told", len(want))
		}
	}
	notifier.Close()
	if n, _, err := store.NoticeBacklog(context.Background()); err != nil || n != 0 {
		left, _ := store.Notices(context.Background(), 10)
		t.Fatalf("%d notices left after delivery (%v): %+v", n, err, left)
	}
}
