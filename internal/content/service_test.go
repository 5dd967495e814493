package content_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/diskguard"
	"github.com/energydatahub/messagehub/internal/domain"
)

func newBundle() *messagehubv1.Bundle {
	return &messagehubv1.Bundle{
		Id: uuid.NewString(), Recipient: uuid.NewString(), Origin: messagehubv1.Domain_DOMAIN_TIME_SERIES,
		ContentType: "rsm-014", NotificationIds: []string{uuid.NewString()}, Weight: 1,
	}
}

type fixture struct {
	t        *testing.T
	dir      string
	provider *contenttest.Provider
	service  *content.Service
	pending  func(recipient, bundleID string) bool
}

func newFixture(t *testing.T, answer func(*messagehubv1.Bundle, int) contenttest.Answer) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: t.TempDir(), pending: func(string, string) bool { return true }}
	f.provider = contenttest.Start(t, answer)
	f.service = f.open()
	return f
}

// open starts a Service over the fixture's folder, as a restarted hub would.
func (f *fixture) open() *content.Service {
	f.t.Helper()
	store, err := content.OpenDirStore(f.dir)
	if err != nil {
		f.t.Fatal(err)
	}
	s := content.NewService(content.Options{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{
			domain.OriginTimeSeries: f.provider.Client(f.t),
		},
		Store: store,
		Pending: func(_ context.Context, recipient, bundleID string) (bool, error) {
			return f.pending(recipient, bundleID), nil
		},
		RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond,
	})
	f.t.Cleanup(s.Close)
	return s
}

func read(t *testing.T, doc *content.Document) []byte {
	t.Helper()
	defer func() { _ = doc.Body.Close() }()
	data, err := io.ReadAll(doc.Body)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestTheDomainIsAskedOnceAndTheStoredBytesAreServedAfterARestart(t *testing.T) {
	data := bytes.Repeat([]byte("<doc/>"), 500_000) // 3 MB in many chunks
	f := newFixture(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("application/xml; charset=utf-8", data, 64<<10)
	})
	b := newBundle()
	for i, s := range []*content.Service{f.service, f.service, f.open()} {
		doc, err := s.Document(within(t, time.Minute), b)
		if err != nil {
			t.Fatalf("peek %d: %v", i, err)
		}
		if doc.MediaType != "application/xml; charset=utf-8" || !bytes.Equal(read(t, doc), data) {
			t.Fatalf("peek %d: media type %q or bytes differ from the provider's", i, doc.MediaType)
		}
	}
	if n := f.provider.Creates(b.Id); n != 1 {
		t.Fatalf("the provider was asked %d times, want once", n)
	}
}

func TestConcurrentPeeksOfABundleCauseOneProviderCall(t *testing.T) {
	release := make(chan struct{})
	f := newFixture(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		a := contenttest.Document("text/plain", []byte("hello"), 2)
		a.Hold = release
		return a
	})
	b := newBundle()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			doc, err := f.service.Document(within(t, time.Minute), b)
			if err == nil && string(read(t, doc)) != "hello" {
				err = errors.New("wrong document")
			}
			errs <- err
		})
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := f.provider.Creates(b.Id); n != 1 {
		t.Fatalf("the provider was asked %d times, want once", n)
	}
}

func TestASlowProviderTimesOutThePeekButTheDocumentIsBuiltForTheNext(t *testing.T) {
	release := make(chan struct{})
	f := newFixture(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		a := contenttest.Document("application/json", []byte(`{"ok":true}`), 4)
		a.Hold = release
		return a
	})
	b := newBundle()
	_, err := f.service.Document(within(t, 20*time.Millisecond), b)
	if !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("a peek that waited past its time got %v, want unavailable", err)
	}
	close(release) // the caller has gone; the build goes on
	doc, err := f.service.Document(within(t, time.Minute), b)
	if err != nil {
		t.Fatal(err)
	}
	if string(read(t, doc)) != `{"ok":true}` {
		t.Fatal("wrong document")
	}
	if n := f.provider.Creates(b.Id); n != 1 {
		t.Fatalf("the provider was asked %d times, want once", n)
	}
}

func TestBadAnswersAreRetriedAndNeverStored(t *testing.T) {
	tooBig := bytes.Repeat([]byte{'x'}, content.MaxDocumentBytes+1)
	tests := []struct {
		name string
		bad  contenttest.Answer
	}{
		{"an error", contenttest.Answer{Err: errors.New("domain down")}},
		{"an answer over 50 MiB", contenttest.Document("application/xml", tooBig, 1<<20)},
		{"no media type", contenttest.Document("", []byte("<doc/>"), 1<<20)},
		{"an empty stream", contenttest.Answer{}},
		{"a media type with a line break", contenttest.Document("text/plain\r\nX-Evil: 1", nil, 1)},
		{"a media type with a space around it", contenttest.Document(" text/plain ", []byte("<doc/>"), 1<<20)},
		{"a media type of a space", contenttest.Document(" ", []byte("<doc/>"), 1<<20)},
		{"data then an error", func() contenttest.Answer {
			a := contenttest.Document("text/plain", []byte("half"), 2)
			a.Err = errors.New("broken")
			return a
		}()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			good := []byte("<good/>")
			if len(tc.bad.Chunks) > 2 {
				good = bytes.Repeat([]byte{'y'}, content.MaxDocumentBytes) // exactly the limit is allowed
			}
			f := newFixture(t, func(_ *messagehubv1.Bundle, calls int) contenttest.Answer {
				if calls < 2 {
					return tc.bad
				}
				return contenttest.Document("application/octet-stream", good, 1<<20)
			})
			b := newBundle()
			doc, err := f.service.Document(within(t, time.Minute), b)
			if err != nil {
				t.Fatal(err)
			}
			if got := read(t, doc); !bytes.Equal(got, good) {
				t.Fatalf("served %d bytes, want the good answer of %d", len(got), len(good))
			}
			if n := f.provider.Creates(b.Id); n != 3 {
				t.Fatalf("the provider was asked %d times, want 3 (two bad answers, then a good one)", n)
			}
		})
	}
}

func TestAnEmptyDocumentIsADocument(t *testing.T) {
	f := newFixture(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("application/xml", nil, 1)
	})
	doc, err := f.service.Document(within(t, time.Minute), newBundle())
	if err != nil {
		t.Fatal(err)
	}
	if doc.MediaType != "application/xml" || len(read(t, doc)) != 0 {
		t.Fatalf("got %q with data, want an empty application/xml document", doc.MediaType)
	}
}

func TestADomainWithoutProviderHasNoDocument(t *testing.T) {
	f := newFixture(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		t.Error("the provider of another domain was asked")
		return contenttest.Answer{}
	})
	b := newBundle()
	b.Origin = messagehubv1.Domain_DOMAIN_CHARGES
	doc, err := f.service.Document(within(t, time.Minute), b)
	if err != nil || doc != nil {
		t.Fatalf("got %v, %v; want no document and no error", doc, err)
	}
}

func TestAStoredDocumentIsServedAfterItsProviderIsRemoved(t *testing.T) {
	f := newFixture(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("text/csv", []byte("a,b\n"), 16)
	})
	b := newBundle()
	if _, err := f.service.Document(within(t, time.Minute), b); err != nil {
		t.Fatal(err)
	}
	store, err := content.OpenDirStore(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	withoutProviders := content.NewService(content.Options{Store: store})
	defer withoutProviders.Close()
	doc, err := withoutProviders.Document(within(t, time.Minute), b)
	if err != nil || doc == nil {
		t.Fatalf("got %v, %v; want the stored document", doc, err)
	}
	if string(read(t, doc)) != "a,b\n" {
		t.Fatal("wrong document")
	}
}

func TestTheBuildStopsOnceTheBundleIsNoLongerPending(t *testing.T) {
	f := newFixture(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Answer{Err: errors.New("domain down")}
	})
	var mu sync.Mutex
	dequeued := false
	f.pending = func(string, string) bool {
		mu.Lock()
		defer mu.Unlock()
		return !dequeued
	}
	b := newBundle()
	if _, err := f.service.Document(within(t, 20*time.Millisecond), b); !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("got %v, want unavailable while the domain is down", err)
	}
	mu.Lock()
	dequeued = true
	mu.Unlock()
	_, err := f.service.Document(within(t, time.Minute), b)
	if !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("got %v, want not found once the bundle is dequeued", err)
	}
	asked := f.provider.Creates(b.Id)
	f.service.Close() // no build left running
	if n := f.provider.Creates(b.Id); n != asked {
		t.Fatalf("the provider was asked again after the build stopped (%d → %d)", asked, n)
	}
}

// A bundle released by an operator while its domain builds its document:
// the release removed the document before there was one, and on Cosmos DB
// nothing removes it later (the released record leaves by its ttl, which no
// sweep sees), so a document stored after the release would wait for a
// later bundle under the freed id. The build removes what it stored for a
// bundle no longer pending.
func TestADocumentStoredAfterItsBundleWasReleasedIsRemoved(t *testing.T) {
	hold := make(chan struct{})
	f := newFixture(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		a := contenttest.Document("text/plain", []byte("document"), 1024)
		a.Hold = hold
		return a
	})
	var released atomic.Bool
	f.pending = func(string, string) bool { return !released.Load() }
	b := newBundle()
	if _, err := f.service.Document(within(t, 20*time.Millisecond), b); !errors.Is(err, content.ErrNotReady) {
		t.Fatalf("got %v, want not ready while the domain holds its answer", err)
	}
	released.Store(true)
	close(hold)
	// Joins the build (or, if it ended, starts another): either ends once
	// the domain answered.
	doc, err := f.service.Document(within(t, time.Minute), b)
	if err == nil {
		_ = doc.Body.Close()
	}
	store, err := content.OpenDirStore(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	wantNotStored(t, store, b)
}

func TestDirStoreLeavesNothingOfADocumentThatWasNotCommitted(t *testing.T) {
	dir := t.TempDir()
	store, err := content.OpenDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	key := content.Key{Recipient: uuid.NewString(), BundleID: uuid.NewString()}
	staged, err := store.Create(context.Background(), key, "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := staged.Write([]byte("half of it")); err != nil {
		t.Fatal(err)
	}
	// A crash here: the staged file stays behind until the next start.
	if _, err := store.Open(context.Background(), key); !errors.Is(err, content.ErrNotStored) {
		t.Fatalf("an uncommitted document was visible: %v", err)
	}
	if _, err := content.OpenDirStore(dir); err != nil {
		t.Fatal(err)
	}
	if leftovers := filesUnder(t, dir); len(leftovers) != 0 {
		t.Fatalf("after a restart %v remain", leftovers)
	}
}

func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, strings.TrimPrefix(path, dir))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestForgetRemovesTheDocumentsRetentionRemoves(t *testing.T) {
	f := newFixture(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("text/plain", []byte("x"), 1)
	})
	kept, gone := newBundle(), newBundle()
	gone.Recipient = kept.Recipient
	for _, b := range []*messagehubv1.Bundle{kept, gone} {
		doc, err := f.service.Document(within(t, time.Minute), b)
		if err != nil {
			t.Fatal(err)
		}
		_ = doc.Body.Close()
	}
	store, err := content.OpenDirStore(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	asRead := func(context.Context) error { return nil } // the bundles are as retention read them
	if err := content.Forget(store)(context.Background(), gone.Recipient, []string{gone.Id, newBundle().Id}, asRead); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Open(context.Background(), content.Key{Recipient: gone.Recipient, BundleID: gone.Id}); !errors.Is(err, content.ErrNotStored) {
		t.Fatalf("a forgotten document is still there: %v", err)
	}
	doc, err := store.Open(context.Background(), content.Key{Recipient: kept.Recipient, BundleID: kept.Id})
	if err != nil {
		t.Fatalf("a document not forgotten is gone: %v", err)
	}
	_ = doc.Body.Close()
}

// Retention removes a document only when the bundles' records are still
// those it read, and only the version it found before it asked: a document
// stored again under the id since (a later bundle's) stays.
func TestForgetLeavesTheDocumentOfALaterBundleOfTheID(t *testing.T) {
	ctx := context.Background()
	store, err := content.OpenDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	key := content.Key{Recipient: uuid.NewString(), BundleID: uuid.NewString()}
	put := func(body string) {
		t.Helper()
		w, err := store.Create(ctx, key, "text/plain")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() string {
		t.Helper()
		doc, err := store.Open(ctx, key)
		if errors.Is(err, content.ErrNotStored) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(read(t, doc))
	}
	forget := content.Forget(store)
	put("first")
	// No check at all: refused, nothing removed.
	if err := forget(ctx, key.Recipient, []string{key.BundleID}, nil); err == nil {
		t.Fatal("a forget without a check of the bundles removed their documents")
	}
	if got := stored(); got != "first" {
		t.Fatalf("after a forget without a check: %q stored, want the document", got)
	}
	// The bundle's record changed since retention read it.
	if err := forget(ctx, key.Recipient, []string{key.BundleID}, func(context.Context) error { return errConflict }); !errors.Is(err, errConflict) {
		t.Fatalf("forget of a bundle changed since it was read: %v", err)
	}
	if got := stored(); got != "first" {
		t.Fatalf("after a forget whose bundle changed: %q stored, want the document", got)
	}
	// The record is as read, but the document is removed and stored again
	// (a later bundle's) between the look and the removal.
	err = forget(ctx, key.Recipient, []string{key.BundleID}, func(context.Context) error {
		if err := store.Delete(ctx, key); err != nil {
			return err
		}
		put("later")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := stored(); got != "later" {
		t.Fatalf("after a forget of the document stored before: %q stored, want the later one", got)
	}
	if err := forget(ctx, key.Recipient, []string{key.BundleID}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := stored(); got != "" {
		t.Fatalf("after a forget of the bundle as read: %q stored, want none", got)
	}
}

var errConflict = errors.New("the bundle changed since it was read")

// recorded keeps what the service reported of its provider calls.
type recorded struct {
	mu       sync.Mutex
	outcomes []string
	bytes    int64
	backoffs int64 // builds in backoff now
}

func (r *recorded) RecordBuildBackoff(_ context.Context, delta int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.backoffs += delta
}

func (r *recorded) inBackoff() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.backoffs
}

func (r *recorded) RecordProviderCall(_ context.Context, origin, outcome string, _ time.Duration, bytes int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes = append(r.outcomes, origin+":"+outcome)
	r.bytes += bytes
}

func TestEveryProviderCallIsCounted(t *testing.T) {
	provider := contenttest.Start(t, func(_ *messagehubv1.Bundle, calls int) contenttest.Answer {
		switch calls {
		case 0:
			return contenttest.Answer{Err: errors.New("down")}
		case 1:
			return contenttest.Document("", []byte("x"), 1)
		default:
			return contenttest.Document("text/plain", []byte("hello"), 2)
		}
	})
	store, err := content.OpenDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	metrics := &recorded{}
	s := content.NewService(content.Options{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)},
		Store:     store, Metrics: metrics,
		Pending:  func(context.Context, string, string) (bool, error) { return true, nil },
		RetryMin: time.Millisecond, RetryMax: time.Millisecond,
	})
	defer s.Close()
	doc, err := s.Document(within(t, time.Minute), newBundle())
	if err != nil {
		t.Fatal(err)
	}
	_ = doc.Body.Close()
	metrics.mu.Lock()
	defer metrics.mu.Unlock()
	want := []string{"DOMAIN_TIME_SERIES:error", "DOMAIN_TIME_SERIES:invalid", "DOMAIN_TIME_SERIES:ok"}
	if strings.Join(metrics.outcomes, " ") != strings.Join(want, " ") || metrics.bytes != 5 {
		t.Fatalf("recorded %v and %d bytes; want %v and 5", metrics.outcomes, metrics.bytes, want)
	}
}

// A document the hub could not store (here the disk guard's reserve) is
// not a failure of the domain's provider, which answered: it was counted as
// outcome "error", the runbook's sign of a provider that is down, and sent
// operators after a domain while the data volume was full.
func TestADocumentTheHubCannotStoreIsNotCountedAsAProviderError(t *testing.T) {
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("text/plain", []byte("hello"), 1)
	})
	dir := t.TempDir()
	docs, err := content.OpenDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = docs.Close() }()
	guard := diskguard.New(dir, 1<<30, func(string) (uint64, error) { return 1 << 20, nil }, time.Hour, nil)
	defer guard.Close()
	metrics := &recorded{}
	s := content.NewService(content.Options{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)},
		Store:     diskguard.Documents(docs, guard), Metrics: metrics,
		Pending:  func(context.Context, string, string) (bool, error) { return true, nil },
		RetryMin: time.Hour, RetryMax: time.Hour,
	})
	defer s.Close()
	b := newBundle()
	if _, err := s.Document(within(t, 100*time.Millisecond), b); !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("a document on a full volume: %v, want unavailable", err)
	}
	for deadline := time.Now().Add(10 * time.Second); metrics.inBackoff() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the refused build is not in backoff after 10 s")
		}
	}
	metrics.mu.Lock()
	defer metrics.mu.Unlock()
	if want := "DOMAIN_TIME_SERIES:not_stored"; len(metrics.outcomes) != 1 || metrics.outcomes[0] != want {
		t.Fatalf("recorded %v; want [%s]", metrics.outcomes, want)
	}
}

// A build that backs off after its domain failed is asked again as soon as
// an actor peeks, not when its backoff ends: a domain that has recovered
// answers that peek. Here the backoff is an hour long.
func TestAPeekDuringTheBackoffAsksTheDomainAgainAtOnce(t *testing.T) {
	provider, down := downDomain(t)
	waiting := make(backoffStarts, 16)
	s := hourBackoffService(t, provider, content.Options{Metrics: waiting})
	b := newBundle()
	if _, err := s.Document(within(t, 50*time.Millisecond), b); !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("got %v, want unavailable while the domain is down", err)
	}
	// The domain's failure has come back and the build waits out its
	// backoff: the next peek comes during it, not during the attempt.
	<-waiting
	if provider.Creates(b.Id) == 0 {
		t.Fatal("the build backs off without having asked the domain")
	}
	down.Store(false)
	doc, err := s.Document(within(t, 30*time.Second), b)
	if err != nil {
		t.Fatalf("a peek after the domain recovered: %v, want the document (the backoff is an hour)", err)
	}
	if got := string(read(t, doc)); got != `{"a":1}` {
		t.Fatalf("served %q", got)
	}
}

// While a domain is down, every peek asks it again, but only the build's
// first failure is a warning (the rest are at debug), the build is counted
// in backoff while it waits, and its recovery is one info line.
func TestAFailingBuildWarnsOnceAndIsCountedWhileInBackoff(t *testing.T) {
	provider, down := downDomain(t)
	var logs lockedBuffer
	metrics := &recorded{}
	s := hourBackoffService(t, provider, content.Options{
		Metrics: metrics, Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	b := newBundle()
	const peeks = 3
	for i := 1; i <= peeks; i++ {
		if _, err := s.Document(within(t, 50*time.Millisecond), b); !errors.Is(err, domain.ErrUnavailable) {
			t.Fatalf("peek %d: %v, want unavailable while the domain is down", i, err)
		}
		// The peek's attempt failed and the build waits out its backoff.
		for deadline := time.Now().Add(10 * time.Second); provider.Creates(b.Id) < i || metrics.inBackoff() != 1; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after peek %d: %d calls, %d builds in backoff; want %d and 1", i, provider.Creates(b.Id), metrics.inBackoff(), i)
			}
		}
	}
	down.Store(false)
	doc, err := s.Document(within(t, 30*time.Second), b)
	if err != nil {
		t.Fatal(err)
	}
	_ = doc.Body.Close()
	if n := metrics.inBackoff(); n != 0 {
		t.Fatalf("%d builds in backoff after the document was built", n)
	}
	out := logs.String()
	if n := strings.Count(out, `"level":"WARN","msg":"bundle document not built`); n != 1 {
		t.Errorf("%d warnings for %d failed attempts of one build; want 1:\n%s", n, peeks, out)
	}
	if n := strings.Count(out, `"level":"DEBUG","msg":"bundle document not built`); n != peeks-1 {
		t.Errorf("%d debug lines for the later failures; want %d:\n%s", n, peeks-1, out)
	}
	if !strings.Contains(out, `"msg":"bundle document built after failed attempts"`) || !strings.Contains(out, fmt.Sprintf(`"attempts":%d`, peeks+1)) {
		t.Errorf("no info line for the recovery after %d attempts:\n%s", peeks+1, out)
	}
}

// downDomain is a provider that fails while down is set (it starts set),
// and then answers {"a":1}.
func downDomain(t *testing.T) (*contenttest.Provider, *atomic.Bool) {
	t.Helper()
	var down atomic.Bool
	down.Store(true)
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		if down.Load() {
			return contenttest.Answer{Err: errors.New("domain down")}
		}
		return contenttest.Document("application/json", []byte(`{"a":1}`), 3)
	})
	return provider, &down
}

// slowDomain answers every bundle's document once answer is closed.
func slowDomain(t *testing.T, answer <-chan struct{}) *contenttest.Provider {
	t.Helper()
	return contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		a := contenttest.Document("application/json", []byte(`{"a":1}`), 3)
		a.Hold = answer
		return a
	})
}

// hourBackoffService serves the time series domain's documents from
// provider (and o's other providers') into a folder of its own, with o's
// options, every bundle pending unless o.Pending says otherwise, backing
// off for an hour after a failure: only a peek asks again.
func hourBackoffService(t *testing.T, provider *contenttest.Provider, o content.Options) *content.Service {
	t.Helper()
	store, err := content.OpenDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if o.Providers == nil {
		o.Providers = map[domain.Origin]messagehubv1.BundleContentProviderClient{}
	}
	o.Providers[domain.OriginTimeSeries] = provider.Client(t)
	o.Store = store
	if o.Pending == nil {
		o.Pending = func(context.Context, string, string) (bool, error) { return true, nil }
	}
	o.RetryMin, o.RetryMax = time.Hour, time.Hour
	s := content.NewService(o)
	t.Cleanup(s.Close)
	return s
}

// The check that a bundle whose document was just stored is still pending
// can fail (the store did not answer). A build that took that for "still
// pending" kept the document of a bundle released meanwhile, which then
// waited for a later bundle under the freed id as
// TestADocumentStoredAfterItsBundleWasReleasedIsRemoved describes.
func TestADocumentStoredAfterItsBundleWasReleasedIsRemovedWhenTheFirstCheckFails(t *testing.T) {
	store, err := content.OpenDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	var released atomic.Bool
	var checks atomic.Int32
	pending := func(context.Context, string, string) (bool, error) {
		if checks.Add(1) == 1 {
			return false, errors.New("the store did not answer")
		}
		return !released.Load(), nil
	}
	b := buildReleasedMeanwhile(t, store, pending, &released)
	wantNotStored(t, store, b)
}

// failingDeletes is a Store whose next fail removals fail.
type failingDeletes struct {
	content.Store
	fail atomic.Int32
}

func (s *failingDeletes) Delete(ctx context.Context, key content.Key) error {
	if s.fail.Add(-1) >= 0 {
		return errors.New("the store did not answer")
	}
	return s.Store.Delete(ctx, key)
}

// The removal of a document stored for a bundle released meanwhile can
// fail (the store did not answer); nothing else removes it on Cosmos DB,
// so the build removes it until it is gone.
func TestADocumentStoredAfterItsBundleWasReleasedIsRemovedWhenTheFirstRemovalFails(t *testing.T) {
	dir, err := content.OpenDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dir.Close() })
	store := &failingDeletes{Store: dir}
	store.fail.Store(1)
	var released atomic.Bool
	pending := func(context.Context, string, string) (bool, error) { return !released.Load(), nil }
	b := buildReleasedMeanwhile(t, store, pending, &released)
	wantNotStored(t, dir, b)
}

// buildReleasedMeanwhile builds a bundle's document on store while its
// domain holds its answer until released is set (the bundle released
// meanwhile, as pending tells), and returns the bundle once a second
// request, which joins the build or starts another, has ended.
func buildReleasedMeanwhile(t *testing.T, store content.Store, pending func(context.Context, string, string) (bool, error), released *atomic.Bool) *messagehubv1.Bundle {
	t.Helper()
	hold := make(chan struct{})
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		a := contenttest.Document("text/plain", []byte("document"), 1024)
		a.Hold = hold
		return a
	})
	s := content.NewService(content.Options{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)},
		Store:     store, Pending: pending,
		RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond,
	})
	t.Cleanup(s.Close)
	b := newBundle()
	if _, err := s.Document(within(t, 20*time.Millisecond), b); !errors.Is(err, content.ErrNotReady) {
		t.Fatalf("got %v, want not ready while the domain holds its answer", err)
	}
	released.Store(true)
	close(hold)
	doc, err := s.Document(within(t, time.Minute), b)
	if err == nil && doc != nil {
		_ = doc.Body.Close()
	}
	return b
}

// wantNotStored fails the test when store holds the bundle's document.
func wantNotStored(t *testing.T, store content.Store, b *messagehubv1.Bundle) {
	t.Helper()
	if doc, err := store.Open(t.Context(), content.Key{Recipient: b.Recipient, BundleID: b.Id}); !errors.Is(err, content.ErrNotStored) {
		if err == nil {
			_ = doc.Body.Close()
		}
		t.Fatalf("the document of the released bundle: %v; want it not stored", err)
	}
}

// The build of an earlier bundle whose domain answered once a later bundle
// took the id removes its document (keep), and so does the later bundle's
// peek (discard), which then has the later one's document built and
// stored. The build's removal, looked at before the peek's and carried out
// after the later document was stored, must leave that document: else the
// later bundle's domain is asked again for a document the actor may have
// been served.
func TestALateBuildsRemovalLeavesTheDocumentOfALaterBundleStoredMeanwhile(t *testing.T) {
	store, err := content.OpenDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	earlier := newBundle()
	later := &messagehubv1.Bundle{Id: earlier.GetId(), Recipient: earlier.GetRecipient(), Origin: earlier.GetOrigin(),
		ContentType: earlier.GetContentType(), NotificationIds: []string{uuid.NewString()}, Weight: 1}
	var pending atomic.Pointer[messagehubv1.Bundle] // the bundle pending under the id
	pending.Store(earlier)
	asked, answer := make(chan struct{}), make(chan struct{})
	provider := contenttest.Start(t, func(b *messagehubv1.Bundle, calls int) contenttest.Answer {
		ans := contenttest.Document("text/plain", fmt.Appendf(nil, "%s #%d", b.GetNotificationIds()[0], calls), 1024)
		if calls == 0 {
			close(asked)
			ans.Hold = answer
		}
		return ans
	})
	// The build's removal (the first) waits after its look until told.
	looked, remove := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	content.OnDirStoreStep(store, func(step string) {
		if step == "looked" && first.CompareAndSwap(false, true) {
			close(looked)
			<-remove
		}
	})
	service := content.NewService(content.Options{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)},
		Store:     store,
		Holds: func(_ context.Context, _, _ string, ids []string) (bool, error) {
			return slices.Equal(ids, pending.Load().GetNotificationIds()), nil
		},
		RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond,
	})
	ctx := within(t, time.Minute)
	built := make(chan error, 1)
	go func() {
		_, err := service.Document(ctx, earlier)
		built <- err
	}()
	<-asked
	pending.Store(later) // the earlier bundle went, the later one took the id
	close(answer)
	<-looked
	doc, err := service.Document(ctx, later)
	if err != nil {
		t.Fatal(err)
	}
	want := later.GetNotificationIds()[0] + " #1"
	if got := string(read(t, doc)); got != want {
		t.Fatalf("the later bundle was served %q, want %q", got, want)
	}
	close(remove)
	if err := <-built; !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("the build of the earlier bundle: %v, want not found (its bundle went)", err)
	}
	service.Close()
	key := content.Key{Recipient: later.GetRecipient(), BundleID: later.GetId()}
	stored, err := store.Open(ctx, key)
	if err != nil {
		t.Fatalf("the later bundle's document, served, is gone: %v", err)
	}
	if got := string(read(t, stored)); stored.Bundle != content.Identity(later) || got != want {
		t.Fatalf("stored for bundle %q: %q, want the later bundle's %q", stored.Bundle, got, want)
	}
}

// Every bundle whose document is asked for while its domain is slow has a
// build of its own, holding its bundle and, while it asks, room for the
// provider's answer. The builds are bounded by Options.MaxBuildMemory: a
// peek that would start one beyond it is refused at once, without asking
// the domain, and one that finds room once a build ended is served.
func TestBuildsBeyondTheirMemoryAreRefused(t *testing.T) {
	slow := make(chan struct{})
	provider := slowDomain(t, slow)
	// Room for two builds of small bundles asking at once (each counts the
	// provider's largest chunk and its bundle), not three.
	s := hourBackoffService(t, provider, content.Options{MaxBuildMemory: 3 * content.MaxProviderChunkBytes})
	const peeks = 10
	bundles := make([]*messagehubv1.Bundle, peeks)
	refused := 0
	for i := range bundles {
		bundles[i] = newBundle()
		_, err := s.Document(within(t, 50*time.Millisecond), bundles[i])
		if !errors.Is(err, domain.ErrUnavailable) {
			t.Fatalf("peek %d: %v, want unavailable while the domain is slow", i, err)
		}
		if errors.Is(err, content.ErrTooManyBuilds) {
			refused++
			if !strings.Contains(err.Error(), "12.0MiB") || !strings.Contains(err.Error(), "peek again") {
				t.Errorf("peek %d refused with %q: want the budget and a hint to peek again", i, err)
			}
		}
	}
	if refused != peeks-2 {
		t.Fatalf("%d of %d peeks of distinct bundles refused; want %d: the builds running at once grow with the callers, each holding its bundle and room for the provider's answer",
			refused, peeks, peeks-2)
	}
	for i, b := range bundles[2:] {
		if n := provider.Creates(b.Id); n != 0 {
			t.Fatalf("the domain was asked %d times for refused bundle %d", n, i+2)
		}
	}
	// The domain answers: the first build ends, and a refused bundle's
	// build takes its room.
	close(slow)
	for _, b := range []*messagehubv1.Bundle{bundles[0], bundles[2]} {
		doc, err := s.Document(within(t, 30*time.Second), b)
		if err != nil {
			t.Fatalf("bundle %s once the domain answered: %v", b.Id, err)
		}
		_ = doc.Body.Close()
	}
}

// backoffStarts hears of every build that starts waiting out a backoff.
type backoffStarts chan struct{}

func (b backoffStarts) RecordBuildBackoff(_ context.Context, delta int64) {
	if delta > 0 {
		b <- struct{}{}
	}
}

func (backoffStarts) RecordProviderCall(context.Context, string, string, time.Duration, int64) {}

// chargesProvider answers every bundle of the charges domain at once, for
// o.
func chargesProvider(t *testing.T, o *content.Options) {
	t.Helper()
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("text/plain", []byte("charges"), 3)
	})
	o.Providers = map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginCharges: provider.Client(t)}
}

func chargesBundle() *messagehubv1.Bundle {
	b := newBundle()
	b.Origin = messagehubv1.Domain_DOMAIN_CHARGES
	return b
}

// A build waiting between attempts for its domain, which is down, holds
// its bundle, not the room of a provider's answer, which only an attempt
// needs: builds of one down domain's bundles do not take the room of
// every other domain's builds. Once the domain is back, a peek has the
// waiting build ask again, and it is served.
func TestABuildWaitingForItsDomainHoldsNoRoomForAnAnswer(t *testing.T) {
	provider, down := downDomain(t)
	waiting := make(backoffStarts, 16)
	// Room for two attempts at once.
	o := content.Options{Metrics: waiting, MaxBuildMemory: 2 * content.MaxProviderChunkBytes}
	chargesProvider(t, &o)
	s := hourBackoffService(t, provider, o)
	down1, down2 := newBundle(), newBundle()
	for i, b := range []*messagehubv1.Bundle{down1, down2} {
		_, err := s.Document(within(t, 50*time.Millisecond), b)
		if errors.Is(err, content.ErrTooManyBuilds) || !errors.Is(err, content.ErrNotReady) {
			t.Fatalf("peek %d of the down domain's bundles while its builds wait: %v; want not ready, not refused: a waiting build holds room for an answer it does not ask for", i+1, err)
		}
		<-waiting
	}
	doc, err := s.Document(within(t, 30*time.Second), chargesBundle())
	if err != nil {
		t.Fatalf("another domain's bundle while the down domain's builds wait: %v", err)
	}
	if got := string(read(t, doc)); got != "charges" {
		t.Fatalf("another domain's document: %q", got)
	}

	down.Store(false)
	for _, b := range []*messagehubv1.Bundle{down1, down2} {
		doc, err := s.Document(within(t, 30*time.Second), b)
		if err != nil {
			t.Fatalf("bundle %s once its domain is back: %v", b.Id, err)
		}
		_ = doc.Body.Close()
	}
	if !content.BuildMemoryFree(s) {
		t.Fatal("the builds ended, but their memory is still held")
	}
}

// However a build ends, it gives back all the memory it held.
func TestABuildGivesItsMemoryBackHoweverItEnds(t *testing.T) {
	t.Run("stored", func(t *testing.T) {
		o := content.Options{MaxBuildMemory: 2 * content.MaxProviderChunkBytes}
		chargesProvider(t, &o)
		provider, _ := downDomain(t)
		s := hourBackoffService(t, provider, o)
		doc, err := s.Document(within(t, 30*time.Second), chargesBundle())
		if err != nil {
			t.Fatal(err)
		}
		_ = doc.Body.Close()
		if !content.BuildMemoryFree(s) {
			t.Fatal("a build that stored its document still holds memory")
		}
	})
	t.Run("no longer pending", func(t *testing.T) {
		provider, _ := downDomain(t)
		waiting := make(backoffStarts, 16)
		var pending atomic.Bool
		pending.Store(true)
		s := hourBackoffService(t, provider, content.Options{
			Metrics: waiting, MaxBuildMemory: 2 * content.MaxProviderChunkBytes,
			Pending: func(context.Context, string, string) (bool, error) { return pending.Load(), nil },
		})
		b := newBundle()
		if _, err := s.Document(within(t, 50*time.Millisecond), b); !errors.Is(err, content.ErrNotReady) {
			t.Fatalf("peek while the domain is down: %v", err)
		}
		<-waiting
		pending.Store(false) // released: the peek's retry ends the build
		if _, err := s.Document(within(t, 30*time.Second), b); !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("peek of a released bundle: %v; want not found", err)
		}
		if !content.BuildMemoryFree(s) {
			t.Fatal("a build whose bundle is no longer pending still holds memory")
		}
	})
	t.Run("shut down while waiting, with no room to ask again, and while asking", func(t *testing.T) {
		down, _ := downDomain(t)
		hold := make(chan struct{})
		defer close(hold)
		asking := make(chan struct{})
		slow := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
			return contenttest.Answer{Hold: hold, Call: func(context.Context) { close(asking) }}
		})
		waiting := make(backoffStarts, 16)
		s := hourBackoffService(t, down, content.Options{
			Metrics: waiting, MaxBuildMemory: 2 * content.MaxProviderChunkBytes,
			Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginCharges: slow.Client(t)},
		})
		waits := newBundle()
		if _, err := s.Document(within(t, 50*time.Millisecond), waits); !errors.Is(err, content.ErrNotReady) {
			t.Fatalf("peek while the domain is down: %v", err)
		}
		<-waiting
		if _, err := s.Document(within(t, 50*time.Millisecond), chargesBundle()); errors.Is(err, content.ErrTooManyBuilds) || !errors.Is(err, content.ErrNotReady) {
			t.Fatalf("peek of a slow domain's bundle: %v; want not ready", err)
		}
		<-asking
		// The slow build's attempt takes the room the waiting build's next
		// attempt needs: the waiting build waits again, without asking.
		if _, err := s.Document(within(t, 50*time.Millisecond), waits); !errors.Is(err, content.ErrNotReady) {
			t.Fatalf("peek again while the domain is down: %v", err)
		}
		<-waiting
		if n := down.Creates(waits.Id); n != 1 {
			t.Fatalf("the down domain was asked %d times; want once: no room for a second attempt", n)
		}
		s.Close()
		if !content.BuildMemoryFree(s) {
			t.Fatal("builds ended by the shutdown still hold memory")
		}
	})
}
