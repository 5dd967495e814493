package content_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
)

// memLease is a content.Lease in memory, shared by the Services of a test
// as the Cosmos DB store shares one between instances (that one is tested
// in internal/store/cosmos and end to end).
type memLease struct {
	mu     sync.Mutex
	holder map[string]string
	until  map[string]time.Time
}

func (l *memLease) AcquireBuild(_ context.Context, recipient, bundleID, holder string, d time.Duration) (string, time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := recipient + "/" + bundleID
	if h, ok := l.holder[k]; ok && h != holder && time.Now().Before(l.until[k]) {
		return h, l.until[k], nil
	}
	l.holder[k], l.until[k] = holder, time.Now().Add(d)
	return holder, l.until[k], nil
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
	provider := slowDomain(t, release)
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

// An instance whose lease is taken over while its domain answers stops
// asking (at its next renewal), and serves the document the new holder
// stores without asking again.
func TestALeaseTakenOverStopsTheCallAndTheNewHoldersDocumentIsServed(t *testing.T) {
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Answer{Hold: make(chan struct{})} // answers only when the call ends
	})
	store, err := content.OpenDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lease := &memLease{holder: map[string]string{}, until: map[string]time.Time{}}
	calls := &recorded{}
	s := content.NewService(content.Options{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)},
		Store:     store,
		Pending:   func(context.Context, string, string) (bool, error) { return true, nil },
		RetryMin:  5 * time.Millisecond, RetryMax: 20 * time.Millisecond,
		Lease: lease, LeaseDuration: 60 * time.Millisecond,
		Metrics: calls, AttemptTimeout: time.Hour,
	})
	t.Cleanup(s.Close)
	b := newBundle()
	if _, err := s.Document(within(t, 100*time.Millisecond), b); err == nil {
		t.Fatal("a document from a domain that does not answer")
	}
	// Another instance takes the lease over and stores the document.
	lease.mu.Lock()
	k := b.Recipient + "/" + b.Id
	lease.holder[k], lease.until[k] = "another instance", time.Now().Add(time.Hour)
	lease.mu.Unlock()
	// The call in flight ends at the next renewal, long before its timeout
	// of an hour (a minute only bounds a busy machine's wait for it).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		calls.mu.Lock()
		ended := len(calls.outcomes)
		calls.mu.Unlock()
		if ended == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the call went on a minute after the lease was taken over")
		}
	}
	w, err := store.Create(t.Context(), content.Key{Recipient: b.Recipient, BundleID: b.Id, Bundle: content.Identity(b)}, "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("theirs")); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	doc, err := s.Document(within(t, 10*time.Second), b)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(read(t, doc)); got != "theirs" {
		t.Fatalf("served %q, want the new holder's document", got)
	}
	if n := provider.Creates(b.Id); n != 1 {
		t.Fatalf("the domain was asked %d times, want once", n)
	}
}

// leasedBundle starts a domain that answers at once and a bundle whose
// lease holder holds until then, and returns the options of a Service
// that keeps documents in a folder and takes that lease.
func leasedBundle(t *testing.T, holder string, until time.Time) (content.Options, *contenttest.Provider, *messagehubv1.Bundle, *memLease) {
	t.Helper()
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("application/json", []byte(`{"a":1}`), 3)
	})
	store, err := content.OpenDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := newBundle()
	lease := &memLease{holder: map[string]string{}, until: map[string]time.Time{}}
	k := b.Recipient + "/" + b.Id
	lease.holder[k], lease.until[k] = holder, until
	return content.Options{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)},
		Store:     store,
		Pending:   func(context.Context, string, string) (bool, error) { return true, nil },
		RetryMin:  5 * time.Millisecond, RetryMax: 20 * time.Millisecond,
		Lease: lease, LeaseDuration: time.Minute,
	}, provider, b, lease
}

// An instance that finds a bundle's lease held by another (one that died
// while its domain answered, say) says once, at info, who holds it and until
// when, and takes the build over when that lease expires.
func TestAWaitForAnotherHoldersLeaseIsLoggedOnceAndEndsAtItsExpiry(t *testing.T) {
	until := time.Now().Add(300 * time.Millisecond)
	opts, _, b, _ := leasedBundle(t, "a-dead-instance", until)
	logs := &lockedBuffer{}
	opts.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	s := content.NewService(opts)
	t.Cleanup(s.Close)
	doc, err := s.Document(within(t, time.Minute), b)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(read(t, doc)); got != `{"a":1}` {
		t.Fatalf("served %q", got)
	}
	if time.Now().Before(until) {
		t.Fatal("the domain was asked while another instance held the lease")
	}
	var waits []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == "waiting for another instance's build of the bundle's document" {
			waits = append(waits, rec)
		}
	}
	if len(waits) != 1 {
		t.Fatalf("%d lines about the wait, want one:\n%s", len(waits), logs.String())
	}
	if w := waits[0]; w["level"] != "INFO" || w["holder"] != "a-dead-instance" || w["until"] == nil || w["bundle"] != b.Id {
		t.Fatalf("the wait was logged as %v", w)
	}
}

// lockedBuffer is a bytes.Buffer that a logger and the test share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// heldSecondTake is a Lease whose second AcquireBuild waits, once it is
// called (reached closes), until goOn closes.
type heldSecondTake struct {
	content.Lease
	calls         atomic.Int32
	reached, goOn chan struct{}
}

func (l *heldSecondTake) AcquireBuild(ctx context.Context, recipient, bundleID, holder string, d time.Duration) (string, time.Time, error) {
	if l.calls.Add(1) == 2 {
		close(l.reached)
		<-l.goOn
	}
	return l.Lease.AcquireBuild(ctx, recipient, bundleID, holder, d)
}

// An instance waiting for another's build takes the lease once it is
// released, and finds the document the other stored just before: it
// serves it without asking the domain, and releases the lease it took,
// so that no instance waits for it to run out.
func TestALeaseTakenAfterTheDocumentWasStoredIsReleased(t *testing.T) {
	opts, provider, b, mem := leasedBundle(t, "another instance", time.Now().Add(time.Hour))
	lease := &heldSecondTake{Lease: mem, reached: make(chan struct{}), goOn: make(chan struct{})}
	opts.Lease = lease
	s := content.NewService(opts)
	t.Cleanup(s.Close)
	served := make(chan string, 1)
	go func() {
		doc, err := s.Document(within(t, time.Minute), b)
		if err != nil {
			t.Error(err)
			served <- ""
			return
		}
		data, err := io.ReadAll(doc.Body)
		_ = doc.Body.Close()
		if err != nil {
			t.Error(err)
		}
		served <- string(data)
	}()
	// The service found the other instance's lease and no document; the
	// other instance stores the document and releases its lease before the
	// service's next try.
	<-lease.reached
	contenttest.Put(t, opts.Store, content.Key{Recipient: b.Recipient, BundleID: b.Id, Bundle: content.Identity(b)}, "text/plain", []byte("theirs"))
	if err := mem.ReleaseBuild(t.Context(), b.Recipient, b.Id, "another instance"); err != nil {
		t.Fatal(err)
	}
	close(lease.goOn)
	if got := <-served; got != "theirs" {
		t.Fatalf("served %q, want the other instance's document", got)
	}
	if n := provider.Creates(b.Id); n != 0 {
		t.Fatalf("the domain was asked %d times, want never", n)
	}
	mem.mu.Lock()
	defer mem.mu.Unlock()
	if h, ok := mem.holder[b.Recipient+"/"+b.Id]; ok {
		t.Fatalf("the lease is still held by %q after the document was served", h)
	}
}
