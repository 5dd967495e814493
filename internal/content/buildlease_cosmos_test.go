package content_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/apiconv"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
)

// watchedLease is an instance's lease of builds (its store) that says on
// taken, for its first take that the store answers, whether the caller
// holds the lease afterwards.
type watchedLease struct {
	content.Lease
	taken chan bool
}

func (l watchedLease) AcquireBuild(ctx context.Context, recipient, bundleID, holder string, d time.Duration) (string, time.Time, error) {
	current, until, err := l.Lease.AcquireBuild(ctx, recipient, bundleID, holder, d)
	if err == nil {
		select {
		case l.taken <- current == holder:
		default:
		}
	}
	return current, until, err
}

// The build of an earlier bundle and that of a later bundle under its
// freed id run at once on one instance, and share the instance's lease of
// the id. When the earlier build's domain answers (a document, or an
// error) while the later bundle's domain is still asked, the lease must
// stay held: else another instance peeking the later bundle takes it and
// asks the domain for the later bundle's document a second time.
func TestAnEarlierBundlesBuildKeepsTheLeaseOfALaterBundleOfTheIDBuildingOnTheSameInstance(t *testing.T) {
	for _, earlierAnswers := range []string{"a document", "an error"} {
		t.Run(earlierAnswers, func(t *testing.T) {
			e := newReuseEnv(t, "azurite", func(f forgetFunc) forgetFunc { return f })
			a := newIDActor(e.ctx, t, e.repo, e.docs, e.store)

			// The domain holds its first answer to each bundle (by its
			// notifications) until told, and counts the calls.
			var mu sync.Mutex
			calls := map[string]int{}
			askedOf := map[string]chan struct{}{}
			answerOf := map[string]chan struct{}{}
			held := func(b *domain.Bundle) (asked, answer chan struct{}) {
				mu.Lock()
				defer mu.Unlock()
				k := strings.Join(b.NotificationIDs, ",")
				if askedOf[k] == nil {
					askedOf[k], answerOf[k] = make(chan struct{}), make(chan struct{})
				}
				return askedOf[k], answerOf[k]
			}
			var earlierIDs string
			provider := contenttest.Start(t, func(b *messagehubv1.Bundle, _ int) contenttest.Answer {
				k := strings.Join(b.GetNotificationIds(), ",")
				mu.Lock()
				defer mu.Unlock()
				calls[k]++
				ans := contenttest.Document("text/plain", []byte(k), 1024)
				if k == earlierIDs && earlierAnswers == "an error" {
					ans = contenttest.Answer{Err: status.Error(codes.Unavailable, "the domain is down (test)")}
				}
				if calls[k] == 1 && askedOf[k] != nil {
					close(askedOf[k])
					ans.Hold = answerOf[k]
				}
				return ans
			})
			providers := map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)}
			first := content.NewService(content.Options{
				Providers: providers, Store: e.docs, Lease: e.store, LeaseDuration: time.Minute,
				Pending: e.repo.IsPending, Holds: e.repo.HoldsBundle,
			})
			t.Cleanup(first.Close)

			// The first instance builds the earlier bundle's document, then
			// the later bundle's under the freed id: both are asked at once.
			a.save()
			earlier := a.peek()
			mu.Lock()
			earlierIDs = strings.Join(earlier.NotificationIDs, ",")
			mu.Unlock()
			askedEarlier, answerEarlier := held(earlier)
			builtEarlier := make(chan error, 1)
			go func() { builtEarlier <- buildDocument(e.ctx, first, earlier) }()
			<-askedEarlier
			later := e.replaced(t, a)
			askedLater, answerLater := held(later)
			builtLater := make(chan error, 1)
			go func() { builtLater <- buildDocument(e.ctx, first, later) }()
			<-askedLater

			close(answerEarlier)
			if err := <-builtEarlier; !errors.Is(err, domain.ErrNotFound) {
				t.Fatalf("the build of the earlier bundle: %v, want not found (its bundle went)", err)
			}

			// Another instance peeks the later bundle while the first still
			// asks its domain.
			store2 := e.openCosmos(t)
			repo2 := hub.New(store2, hub.Options{Retention: reuseRetention, Now: e.now}, nil)
			t.Cleanup(repo2.Close)
			lease := watchedLease{Lease: store2, taken: make(chan bool, 1)}
			second := content.NewService(content.Options{
				Providers: providers, Store: e.docs, Lease: lease, LeaseDuration: time.Minute,
				Pending: repo2.IsPending, Holds: repo2.HoldsBundle,
				RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
			})
			t.Cleanup(second.Close)
			var servedSecond string
			secondServed := make(chan struct{})
			go func() {
				defer close(secondServed)
				var got strings.Builder
				doc, err := second.Document(e.ctx, apiconv.Bundle(later))
				if err == nil {
					_, err = io.Copy(&got, doc.Body)
					_ = doc.Body.Close()
				}
				if err != nil {
					t.Errorf("the other instance's peek of the later bundle: %v", err)
				}
				servedSecond = got.String()
			}()
			if <-lease.taken {
				t.Error("another instance took the lease of the later bundle while the first instance still asked its domain")
				<-secondServed // it asks the domain, which answers at once
			}
			close(answerLater)
			if err := <-builtLater; err != nil {
				t.Fatalf("the first instance's build of the later bundle: %v", err)
			}
			want := strings.Join(later.NotificationIDs, ",")
			if got := documentOf(e.ctx, t, first, later); got != want {
				t.Fatalf("the first instance served %q, want %q", got, want)
			}
			if <-secondServed; servedSecond != want {
				t.Fatalf("the other instance served %q, want %q", servedSecond, want)
			}
			mu.Lock()
			defer mu.Unlock()
			if n := calls[want]; n != 1 {
				t.Fatalf("the domain was asked %d times for the later bundle's document, want once", n)
			}
		})
	}
}
