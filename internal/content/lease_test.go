package content_test

import (
	"context"
	"sync"
	"testing"
	"time"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
)

// memLease is a content.Lease in memory, shared by the Services of a test
// as the Cosmos DB store shares one between instances (that one is tested
// in internal/repository/cosmos and end to end).
type memLease struct {
	mu     sync.Mutex
	holder map[string]string
	until  map[string]time.Time
}

func (l *memLease) AcquireBuild(_ context.Context, recipient, bundleID, holder string, d time.Duration) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := recipient + "/" + bundleID
	if h, ok := l.holder[k]; ok && h != holder && time.Now().Before(l.until[k]) {
		return false, nil
	}
	l.holder[k], l.until[k] = holder, time.Now().Add(d)
	return true, nil
}

func (l *memLease) ReleaseBuild(_ context.Context, recipient, bundleID, holder string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k := recipient + "/" + bundleID; l.holder[k] == holder {
		delete(l.holder, k)
	}
	return nil
}

// Two instances over one store peek a bundle at once: the one holding the
// lease asks the domain, the other serves the document it stored.
func TestInstancesSharingALeaseAskTheDomainOnce(t *testing.T) {
	release := make(chan struct{})
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		a := contenttest.Document("application/json", []byte(`{"a":1}`), 3)
		a.Hold = release
		return a
	})
	dir := t.TempDir()
	lease := &memLease{holder: map[string]string{}, until: map[string]time.Time{}}
	services := make([]*content.Service, 2)
	for i := range services {
		store, err := content.OpenDirStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		services[i] = content.NewService(content.Options{
			Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)},
			Store:     store,
			Pending:   func(context.Context, string, string) (bool, error) { return true, nil },
			RetryMin:  5 * time.Millisecond, RetryMax: 20 * time.Millisecond,
			Lease: lease, LeaseDuration: time.Minute,
		})
		t.Cleanup(services[i].Close)
	}
	b := newBundle()
	var wg sync.WaitGroup
	docs := make([]string, len(services))
	for i, s := range services {
		wg.Go(func() {
			doc, err := s.Document(within(t, time.Minute), b)
			if err != nil {
				t.Error(err)
				return
			}
			docs[i] = string(read(t, doc))
		})
	}
	time.Sleep(100 * time.Millisecond) // both are waiting: one for the provider, one for the lease
	close(release)
	wg.Wait()
	if docs[0] != `{"a":1}` || docs[1] != docs[0] {
		t.Fatalf("documents %q", docs)
	}
	if n := provider.Creates(b.Id); n != 1 {
		t.Fatalf("the provider was asked %d times, want once", n)
	}
}
