package content_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/internal/store/pebble"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// Every dequeue of a bundle of a domain with a provider is told to it, at
// least once, also when the provider fails at first; other domains' dequeues
// leave no notice.
func TestEveryDequeueIsToldToItsDomain(t *testing.T) {
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer { return contenttest.Answer{} })
	provider.FailDequeued(2)
	store, repo := openWithNotices(t, hub.Options{Notices: func(o domain.Origin) bool { return o == domain.OriginTimeSeries }})
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
		Bundle:    repo.NoticedBundle,
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
		left, _ := store.Notices(context.Background(), domain.Origins, 10)
		t.Fatalf("%d notices left after delivery (%v): %+v", n, err, left)
	}
}

// fakeClock is a content.Clock the test moves: every wait the notifier
// starts is handed to the test, which fires it (time then jumps by it).
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits chan fakeWait
}

type fakeWait struct {
	d    time.Duration
	fire chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1_700_000_000, 0), waits: make(chan fakeWait, 1000)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	w := fakeWait{d: d, fire: make(chan time.Time, 1)}
	c.waits <- w
	return w.fire
}

// fireFor fires the notifier's waits as they come until d has passed on
// the clock; a wait longer than RetryMax's default (1 min), the longest a
// notifier with default options makes, fails the test.
func (c *fakeClock) fireFor(ctx context.Context, t *testing.T, d time.Duration) {
	t.Helper()
	for start := c.Now(); c.Now().Sub(start) < d; {
		select {
		case w := <-c.waits:
			if w.d > time.Minute {
				t.Fatalf("a wait of %v; want none longer than RetryMax (1 min)", w.d)
			}
			c.fire(w)
		case <-ctx.Done():
			t.Fatal("the notifier stopped waiting")
		}
	}
}

func (c *fakeClock) fire(w fakeWait) {
	c.mu.Lock()
	c.now = c.now.Add(w.d)
	now := c.now
	c.mu.Unlock()
	w.fire <- now
}

// countingNotices counts the looks at domains' notices (not the look at
// notices without a domain, made once at the start).
type countingNotices struct {
	store.Outbox
	looks atomic.Int64
}

func (c *countingNotices) Notices(ctx context.Context, origins []domain.Origin, limit int) ([]store.Notice, error) {
	if slices.ContainsFunc(origins, func(o domain.Origin) bool { return o != domain.OriginUnspecified }) {
		c.looks.Add(1)
	}
	return c.Outbox.Notices(ctx, origins, limit)
}

// countingProvider counts the BundleDequeued calls to a provider.
type countingProvider struct {
	messagehubv1.BundleContentProviderClient
	calls atomic.Int64
}

func (c *countingProvider) BundleDequeued(ctx context.Context, in *messagehubv1.BundleDequeuedRequest, opts ...grpc.CallOption) (*messagehubv1.BundleDequeuedResponse, error) {
	c.calls.Add(1)
	return c.BundleContentProviderClient.BundleDequeued(ctx, in, opts...)
}

// dequeueAll saves notifications of the origins, in order, for one
// recipient, and peeks and dequeues each (they do not bundle); it returns
// the dequeued bundles' ids by origin.
func dequeueAll(ctx context.Context, t *testing.T, repo *hub.Hub, origins ...domain.Origin) map[domain.Origin][]string {
	t.Helper()
	recipient := uuid.NewString()
	var notes []domain.Notification
	for _, o := range origins {
		notes = append(notes, domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: o, ContentType: "c", DocumentType: "c", Weight: 1})
	}
	if _, err := repo.Save(ctx, notes); err != nil {
		t.Fatal(err)
	}
	out := map[domain.Origin][]string{}
	for range notes {
		b, err := repo.Peek(ctx, recipient, domain.GroupAll, "")
		if err != nil || b == nil {
			t.Fatalf("peek: %v, %v", b, err)
		}
		if err := repo.Dequeue(ctx, recipient, b.ID); err != nil {
			t.Fatal(err)
		}
		out[b.Origin] = append(out[b.Origin], b.ID)
	}
	return out
}

// A domain whose provider is down, with more notices than a batch holds, all
// older than another domain's, does not hold that one up: the other
// domain's first look finds its notice, whatever the failing domain's
// worker does meanwhile. The failing domain is asked once per look and
// backed off from 1 s; once it answers again, its notices all go out.
func TestAFailingDomainDoesNotHoldUpTheOthers(t *testing.T) {
	answer := func(*messagehubv1.Bundle, int) contenttest.Answer { return contenttest.Answer{} }
	down, up := contenttest.Start(t, answer), contenttest.Start(t, answer)
	down.FailDequeued(1)
	store, repo := openWithNotices(t, hub.Options{Notices: func(domain.Origin) bool { return true }})
	ctx := within(t, time.Minute)
	origins := slices.Repeat([]domain.Origin{domain.OriginTimeSeries}, 12)
	bundles := dequeueAll(ctx, t, repo, append(origins, domain.OriginCharges)...)

	notices := &countingNotices{Outbox: store}
	downClient := &countingProvider{BundleContentProviderClient: down.Client(t)}
	clock := newFakeClock()
	notifier := content.StartNotifier(content.NotifierOptions{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{
			domain.OriginTimeSeries: downClient, domain.OriginCharges: up.Client(t),
		},
		Notices: notices,
		Bundle:  repo.NoticedBundle,
		Batch:   5,
		// Idle looks of the charges domain wait as long as the failing
		// domain's first backoff, so that any longer wait is a retry late.
		IdleMax: time.Second,
		Clock:   clock,
	})
	defer notifier.Close()

	// The failing domain's worker may wait for its retry meanwhile; no wait
	// is fired before the charges dequeue is told.
	var held []fakeWait
	select {
	case b := <-up.Told():
		if b.GetId() != bundles[domain.OriginCharges][0] {
			t.Fatalf("told of %v", b)
		}
	case <-ctx.Done():
		t.Fatal("the charges dequeue was never told")
	}
	if looks, calls := notices.looks.Load(), downClient.calls.Load(); looks > 2 || calls > 1 {
		t.Fatalf("the charges dequeue was told after %d looks and %d calls to the failing domain; want ≤ 2 looks (one per domain), ≤ 1 call", looks, calls)
	}
	for len(clock.waits) > 0 {
		held = append(held, <-clock.waits)
	}
	for _, w := range held {
		if w.d > time.Second {
			t.Fatalf("a wait of %v after the first looks; want the failing domain's first backoff (1 s) or the idle charges domain's 1 s", w.d)
		}
		clock.fire(w)
	}
	want := map[string]bool{}
	for _, id := range bundles[domain.OriginTimeSeries] {
		want[id] = true
	}
	for len(want) > 0 {
		select {
		case b := <-down.Told():
			delete(want, b.GetId())
		case w := <-clock.waits:
			if w.d > time.Second {
				t.Fatalf("the failing domain is tried again after %v, want its first backoff (1 s)", w.d)
			}
			clock.fire(w)
		case <-ctx.Done():
			t.Fatalf("%d time series dequeues were never told", len(want))
		}
	}
	notifier.Close()
	if n, _, err := store.NoticeBacklog(context.Background()); err != nil || n != 0 {
		t.Fatalf("%d notices left after delivery (%v)", n, err)
	}
}

// An idle outbox is looked at rarely: empty looks wait longer and longer,
// up to IdleMax, so ten idle minutes cost some twenty-five looks instead of
// six hundred. A dequeue of this instance sends the signal and is told at
// once, with no wait fired; one of another instance (no signal) is found
// within IdleMax.
func TestAnIdleOutboxIsLookedAtRarely(t *testing.T) {
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer { return contenttest.Answer{} })
	signal := content.NewNoticeSignal()
	everyDomain := func(domain.Origin) bool { return true }
	store, repo := openWithNotices(t, hub.Options{Notices: everyDomain, OnNotice: signal.Send})
	other := hub.New(store, hub.Options{Notices: everyDomain}, nil) // another instance: signals nothing here
	defer other.Close()
	ctx := within(t, time.Minute)
	notices := &countingNotices{Outbox: store}
	clock := newFakeClock()
	notifier := content.StartNotifier(content.NotifierOptions{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginCharges: provider.Client(t)},
		Notices:   notices,
		Bundle:    repo.NoticedBundle,
		Signal:    signal,
		Clock:     clock,
	})
	defer notifier.Close()
	const idleMax = 30 * time.Second
	next := func() fakeWait {
		t.Helper()
		select {
		case w := <-clock.waits:
			if w.d > idleMax {
				t.Fatalf("the notifier waits %v, more than %v", w.d, idleMax)
			}
			return w
		case <-ctx.Done():
			t.Fatal("the notifier stopped waiting")
			return fakeWait{}
		}
	}

	var idle time.Duration
	for idle < 10*time.Minute {
		w := next()
		idle += w.d
		clock.fire(w)
	}
	w := next() // the round after the last wait is done
	if looks := notices.looks.Load(); looks > 27 {
		t.Fatalf("%d looks in %v idle; want ≤ 27 (1 s doubling to %v)", looks, idle, idleMax)
	}
	if w.d != idleMax {
		t.Fatalf("an idle notifier waits %v, want %v", w.d, idleMax)
	}

	before := notices.looks.Load()
	ours := dequeueAll(ctx, t, repo, domain.OriginCharges)[domain.OriginCharges][0]
	select {
	case b := <-provider.Told():
		if b.GetId() != ours {
			t.Fatalf("told of %v, want %s", b, ours)
		}
	case <-ctx.Done():
		t.Fatal("this instance's dequeue was not told without a wait fired")
	}
	if looks := notices.looks.Load() - before; looks != 1 {
		t.Fatalf("%d looks for a dequeue that sent the signal, want 1", looks)
	}
	// That look found a notice: the next is Interval away, and more
	// dequeues (steady traffic) do not bring it forward.
	if w = next(); w.d != time.Second {
		t.Fatalf("after a look that found a notice the notifier waits %v, want 1 s", w.d)
	}
	busy := dequeueAll(ctx, t, repo, domain.OriginCharges, domain.OriginCharges)[domain.OriginCharges]
	clock.fire(w)
	for range busy {
		select {
		case <-provider.Told():
		case <-ctx.Done():
			t.Fatal("dequeues on a busy outbox were never told")
		}
	}
	if len(w.fire) != 0 {
		t.Fatal("the signal woke a busy notifier before its wait was up")
	}

	for w = next(); w.d != idleMax; w = next() {
		clock.fire(w)
	}
	theirs := dequeueAll(ctx, t, other, domain.OriginCharges)[domain.OriginCharges][0]
	var waited time.Duration
	for {
		select {
		case b := <-provider.Told():
			if b.GetId() != theirs {
				t.Fatalf("told of %v, want %s", b, theirs)
			}
			if waited > idleMax {
				t.Fatalf("another instance's dequeue told after %v, want ≤ %v", waited, idleMax)
			}
			return
		case <-ctx.Done():
			t.Fatal("another instance's dequeue was never told")
		default:
		}
		waited += w.d
		clock.fire(w)
		w = next()
	}
}

// A domain that failed and then has nothing left to tell (another instance
// told it) is back: the notifier does not keep waking for its retry.
func TestADomainWithNothingLeftIsNotRetried(t *testing.T) {
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer { return contenttest.Answer{} })
	provider.FailDequeued(1)
	store, repo := openWithNotices(t, hub.Options{Notices: func(domain.Origin) bool { return true }})
	ctx := within(t, time.Minute)
	dequeueAll(ctx, t, repo, domain.OriginCharges)
	clock := newFakeClock()
	notifier := content.StartNotifier(content.NotifierOptions{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginCharges: provider.Client(t)},
		Notices:   store,
		Bundle:    repo.NoticedBundle,
		Clock:     clock,
	})
	defer notifier.Close()
	w := <-clock.waits // after the failed look
	left, err := store.Notices(ctx, domain.Origins, 10)
	if err != nil || len(left) != 1 {
		t.Fatalf("notices after a failed delivery: %+v (%v)", left, err)
	}
	if err := store.RemoveNotices(ctx, left); err != nil { // as another instance would
		t.Fatal(err)
	}
	for range 5 {
		clock.fire(w)
		select {
		case w = <-clock.waits:
		case <-ctx.Done():
			t.Fatal("the notifier stopped waiting")
		}
		if w.d < time.Second {
			t.Fatalf("the notifier waits %v with nothing to tell", w.d)
		}
	}
}

// openWithNotices opens an embedded store and a repository on it with opts
// (which say which domains get notices), both closed when the test ends.
func openWithNotices(t *testing.T, opts hub.Options) (*pebble.Store, *hub.Hub) {
	t.Helper()
	store, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	repo := hub.New(store, opts, nil)
	t.Cleanup(func() { repo.Close(); _ = store.Close() })
	return store, repo
}

// hangingProvider is a provider client whose BundleDequeued calls hang until
// the test closes release (or the call ends); entered hears of each call as
// it starts. Released calls go on to the provider underneath.
type hangingProvider struct {
	messagehubv1.BundleContentProviderClient
	entered chan string // the bundle id of each call, as it starts
	release chan struct{}
}

func newHangingProvider(under messagehubv1.BundleContentProviderClient) *hangingProvider {
	return &hangingProvider{BundleContentProviderClient: under, entered: make(chan string, 1000), release: make(chan struct{})}
}

func (h *hangingProvider) BundleDequeued(ctx context.Context, in *messagehubv1.BundleDequeuedRequest, opts ...grpc.CallOption) (*messagehubv1.BundleDequeuedResponse, error) {
	h.entered <- in.GetBundle().GetId()
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.BundleContentProviderClient.BundleDequeued(ctx, in, opts...)
}

// A domain whose BundleDequeued hangs (as long as the call timeout allows)
// does not hold up another domain's notices: while its call is still
// hanging, every notice of the healthy domain, several batches of them, is
// told. Once it answers, its own notices go out too.
func TestAHangingDomainDoesNotHoldUpTheOthers(t *testing.T) {
	answer := func(*messagehubv1.Bundle, int) contenttest.Answer { return contenttest.Answer{} }
	slow, healthy := contenttest.Start(t, answer), contenttest.Start(t, answer)
	store, repo := openWithNotices(t, hub.Options{Notices: func(domain.Origin) bool { return true }})
	ctx := within(t, time.Minute)
	// Interleaved, so that every batch holds notices of both domains.
	var origins []domain.Origin
	for range 20 {
		origins = append(origins, domain.OriginTimeSeries, domain.OriginCharges)
	}
	bundles := dequeueAll(ctx, t, repo, origins...)

	hanging := newHangingProvider(slow.Client(t))
	notifier := content.StartNotifier(content.NotifierOptions{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{
			domain.OriginTimeSeries: hanging, domain.OriginCharges: healthy.Client(t),
		},
		Notices:     store,
		Bundle:      repo.NoticedBundle,
		Batch:       5,
		CallTimeout: time.Hour, // the hanging call ends when the test says so
	})
	defer notifier.Close()
	select {
	case <-hanging.entered:
	case <-ctx.Done():
		t.Fatal("the hanging domain was never called")
	}
	want := map[string]bool{}
	for _, id := range bundles[domain.OriginCharges] {
		want[id] = true
	}
	for len(want) > 0 {
		select {
		case b := <-healthy.Told():
			delete(want, b.GetId())
		case <-ctx.Done():
			t.Fatalf("%d of %d notices of the healthy domain untold while the other domain's call hangs", len(want), len(bundles[domain.OriginCharges]))
		}
	}
	if len(hanging.entered) != 0 {
		t.Fatal("the hanging domain was called again while its first call hung")
	}
	close(hanging.release)
	for range bundles[domain.OriginTimeSeries] {
		select {
		case <-slow.Told():
		case <-ctx.Done():
			t.Fatal("the domain that hung was not told of its dequeues once it answered")
		}
	}
	notifier.Close()
	if n, _, err := store.NoticeBacklog(context.Background()); err != nil || n != 0 {
		t.Fatalf("%d notices left after delivery (%v)", n, err)
	}
}

// clockedProvider records, per bundle, the clock's time at each
// BundleDequeued call.
type clockedProvider struct {
	messagehubv1.BundleContentProviderClient
	clock content.Clock
	mu    sync.Mutex
	calls map[string][]time.Time
}

func (c *clockedProvider) BundleDequeued(ctx context.Context, in *messagehubv1.BundleDequeuedRequest, opts ...grpc.CallOption) (*messagehubv1.BundleDequeuedResponse, error) {
	c.mu.Lock()
	c.calls[in.GetBundle().GetId()] = append(c.calls[in.GetBundle().GetId()], c.clock.Now())
	c.mu.Unlock()
	return c.BundleContentProviderClient.BundleDequeued(ctx, in, opts...)
}

// With a grace, this instance's dequeue is told at once (no wait fired),
// while another instance's is left to it until it is overdue: it is told
// here only once the grace has passed, as when its instance died.
func TestAnotherInstancesNoticeIsToldOnlyOnceOverdue(t *testing.T) {
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer { return contenttest.Answer{} })
	signal := content.NewNoticeSignal()
	everyDomain := func(domain.Origin) bool { return true }
	store, repo := openWithNotices(t, hub.Options{Notices: everyDomain, OnNotice: signal.Send})
	other := hub.New(store, hub.Options{Notices: everyDomain}, nil) // signals nothing here
	defer other.Close()
	ctx := within(t, time.Minute)
	clock := newFakeClock()
	clock.now = time.Now() // notices carry the real time of their dequeue
	start := clock.Now()
	const grace = time.Minute
	client := &clockedProvider{BundleContentProviderClient: provider.Client(t), clock: clock, calls: map[string][]time.Time{}}
	notifier := content.StartNotifier(content.NotifierOptions{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginCharges: client},
		Notices:   store,
		Bundle:    repo.NoticedBundle,
		Signal:    signal,
		Grace:     grace,
		Clock:     clock,
	})
	defer notifier.Close()
	first := <-clock.waits // idle after the first, empty look

	theirs := dequeueAll(ctx, t, other, domain.OriginCharges)[domain.OriginCharges][0]
	ours := dequeueAll(ctx, t, repo, domain.OriginCharges)[domain.OriginCharges][0]
	select {
	case b := <-provider.Told():
		if b.GetId() != ours {
			t.Fatalf("told of %v first, want this instance's %s", b, ours)
		}
	case <-ctx.Done():
		t.Fatal("this instance's dequeue was not told without a wait fired")
	}
	waits := []fakeWait{first} // fired one at a time, as they come
	for fired := 0; ; fired++ {
		if fired > 100 {
			t.Fatal("over 100 waits fired before another instance's overdue dequeue was told")
		}
		if len(waits) > 0 {
			clock.fire(waits[0])
			waits = waits[1:]
		}
		select {
		case b := <-provider.Told():
			if b.GetId() != theirs {
				t.Fatalf("told of %v, want %s", b, theirs)
			}
			client.mu.Lock()
			defer client.mu.Unlock()
			if at := client.calls[theirs]; len(at) != 1 || at[0].Sub(start) < grace {
				t.Fatalf("another instance's dequeue told at %v after the start; want once, after the grace of %v", at, grace)
			}
			if len(client.calls[ours]) != 1 {
				t.Fatalf("this instance's dequeue told %d times", len(client.calls[ours]))
			}
			return
		case w := <-clock.waits:
			waits = append(waits, w)
		case <-ctx.Done():
			t.Fatal("another instance's dequeue was never told")
		}
	}
}

// A notice whose bundle cannot be read (an error other than not found)
// does not hold up its domain: the dequeues after it are told while its
// read keeps failing, and it is tried again on a backoff of its own, not at
// every look. Once its bundle can be read, it is told too.
func TestANoticeWhoseBundleCannotBeReadDoesNotHoldUpTheDomain(t *testing.T) {
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer { return contenttest.Answer{} })
	outbox, repo := openWithNotices(t, hub.Options{Notices: func(domain.Origin) bool { return true }})
	ctx := within(t, time.Minute)
	bundles := dequeueAll(ctx, t, repo, slices.Repeat([]domain.Origin{domain.OriginTimeSeries}, 4)...)[domain.OriginTimeSeries]
	unreadable := bundles[0] // the oldest notice: every look lists it first
	var broken atomic.Bool
	var reads atomic.Int64 // of the unreadable bundle
	broken.Store(true)
	clock := newFakeClock()
	notifier := content.StartNotifier(content.NotifierOptions{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)},
		Notices:   outbox,
		Bundle: func(ctx context.Context, n store.Notice) (*domain.Bundle, error) {
			if n.BundleID == unreadable {
				reads.Add(1)
				if broken.Load() {
					return nil, errors.New("injected: the bundle's record cannot be decoded")
				}
			}
			return repo.NoticedBundle(ctx, n)
		},
		Clock: clock,
	})
	defer notifier.Close()

	want := map[string]bool{}
	for _, id := range bundles[1:] {
		want[id] = true
	}
	fired := 0
	for len(want) > 0 {
		select {
		case b := <-provider.Told():
			if b.GetId() == unreadable {
				t.Fatal("told of the bundle that cannot be read")
			}
			delete(want, b.GetId())
		case w := <-clock.waits:
			if fired++; fired > 20 {
				t.Fatalf("%d of %d dequeues after the unreadable one untold after %d waits", len(want), len(bundles)-1, fired)
			}
			clock.fire(w)
		case <-ctx.Done():
			t.Fatalf("%d of %d dequeues after the unreadable one never told", len(want), len(bundles)-1)
		}
	}
	// Ten minutes more: its backoff doubles from 1 s up to 1 min, some
	// fifteen reads instead of one per look.
	clock.fireFor(ctx, t, 10*time.Minute)
	if n := reads.Load(); n > 20 {
		t.Fatalf("the unreadable bundle was read %d times in ten minutes; want it backed off (≤ 20)", n)
	}
	broken.Store(false)
	for {
		select {
		case b := <-provider.Told():
			if b.GetId() != unreadable {
				t.Fatalf("told of %s again", b.GetId())
			}
			notifier.Close()
			if n, _, err := outbox.NoticeBacklog(context.Background()); err != nil || n != 0 {
				t.Fatalf("%d notices left after delivery (%v)", n, err)
			}
			return
		case w := <-clock.waits:
			if w.d > time.Minute {
				t.Fatalf("a wait of %v; want none longer than RetryMax (1 min)", w.d)
			}
			clock.fire(w)
		case <-ctx.Done():
			t.Fatal("the bundle that became readable was never told")
		}
	}
}

// A full batch of notices whose bundles cannot be read does not hold up the
// domain's notice after it: the look goes past the notices backing off, so
// the readable one is told after the first backoff, while the others keep
// failing.
func TestABatchOfUnreadableNoticesDoesNotHoldUpTheDomain(t *testing.T) {
	outbox, repo := openWithNotices(t, hub.Options{Notices: func(domain.Origin) bool { return true }})
	checkUnreadableNotices(t, outbox, repo, 100, 100, 3)
}

// readCountingNotices keeps, at each look, the most bundle reads made
// between two looks.
type readCountingNotices struct {
	store.Outbox
	reads, most *atomic.Int64
}

func (c *readCountingNotices) Notices(ctx context.Context, origins []domain.Origin, limit int) ([]store.Notice, error) {
	if n := c.reads.Swap(0); n > c.most.Load() {
		c.most.Store(n)
	}
	return c.Outbox.Notices(ctx, origins, limit)
}

// A run of unreadable notices longer than the notifier holds back (ten
// batches: 25 of a batch of 2) does not hold up the notice after it, on
// the embedded store.
func TestARunOfUnreadableNoticesLongerThanTheHoldsDoesNotHoldUpTheDomain(t *testing.T) {
	outbox, repo := openWithNotices(t, hub.Options{Notices: func(domain.Origin) bool { return true }})
	checkUnreadableNotices(t, outbox, repo, 2, 25, 100)
}

// The same on Cosmos DB.
func TestARunOfUnreadableNoticesLongerThanTheHoldsDoesNotHoldUpTheDomainOnCosmos(t *testing.T) {
	s, repo := openCosmosWithNotices(t)
	checkUnreadableNotices(t, s, repo, 2, 25, 100)
}

// openCosmosWithNotices opens a Cosmos DB store on a test server and a
// repository on it whose every domain gets notices, both closed when the
// test ends.
func openCosmosWithNotices(t *testing.T) (*cosmos.Store, *hub.Hub) {
	t.Helper()
	srv := cosmostest.Start(t)
	s, err := cosmos.Open(within(t, time.Minute), cosmos.Config{Endpoint: srv.Endpoint, Key: srv.Key, Provision: true,
		Database: cosmostest.UniqueID("db"), Transport: cosmostest.NewHTTPClient()})
	if err != nil {
		t.Fatal(err)
	}
	repo := hub.New(s, hub.Options{Notices: func(domain.Origin) bool { return true }}, nil)
	t.Cleanup(func() { repo.Close(); _ = s.Close() })
	return s, repo
}

// checkUnreadableNotices dequeues bundles whose reads fail, then one that
// can be read, and tells them with a notifier of the batch given: the
// readable one is told within the waits given while the others keep
// failing, no look reads more than a batch of bundles, each unreadable
// bundle is one warning however many looks read it, and once they can be
// read every notice is told exactly once.
func checkUnreadableNotices(t *testing.T, outbox store.Outbox, repo *hub.Hub, batch, unreadable, waits int) {
	t.Helper()
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer { return contenttest.Answer{} })
	ctx := within(t, 2*time.Minute)
	bundles := dequeueAll(ctx, t, repo, slices.Repeat([]domain.Origin{domain.OriginTimeSeries}, unreadable+1)...)[domain.OriginTimeSeries]
	readable := bundles[unreadable] // the newest
	var broken atomic.Bool
	broken.Store(true)
	var reads, mostReads atomic.Int64 // bundle reads since the last look, and the most of any look
	var failed atomic.Int64           // failed reads in all
	notices := &readCountingNotices{Outbox: outbox, reads: &reads, most: &mostReads}
	logs := &lockedBuffer{}
	clock := newFakeClock()
	notifier := content.StartNotifier(content.NotifierOptions{
		Providers: map[domain.Origin]messagehubv1.BundleContentProviderClient{domain.OriginTimeSeries: provider.Client(t)},
		Notices:   notices,
		Bundle: func(ctx context.Context, n store.Notice) (*domain.Bundle, error) {
			reads.Add(1)
			if n.BundleID != readable && broken.Load() {
				failed.Add(1)
				return nil, errors.New("injected: the bundle's record cannot be decoded")
			}
			return repo.NoticedBundle(ctx, n)
		},
		Batch:  batch,
		Clock:  clock,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	defer notifier.Close()

	told := map[string]int{}
	for fired := 0; told[readable] == 0; {
		select {
		case b := <-provider.Told():
			told[b.GetId()]++
		case w := <-clock.waits:
			if fired++; fired > waits {
				t.Fatalf("the readable notice behind %d unreadable ones untold after %d waits", unreadable, fired)
			}
			clock.fire(w)
		case <-ctx.Done():
			t.Fatalf("the readable notice behind %d unreadable ones was never told", unreadable)
		}
	}
	if len(told) != 1 {
		t.Fatalf("told of %d bundles while %d cannot be read", len(told), unreadable)
	}
	// Ten minutes more of looks that read the unreadable bundles again.
	before := failed.Load()
	clock.fireFor(ctx, t, 10*time.Minute)
	if failed.Load()-before < int64(unreadable) {
		t.Fatalf("%d failed reads in ten minutes; want each unreadable bundle read again", failed.Load()-before)
	}
	warned := map[string]int{}
	for _, l := range bundleWarnings(t, logs) {
		warned[l.Bundle]++
	}
	if most := slices.Max(append(slices.Collect(maps.Values(warned)), 0)); most > 1 {
		t.Errorf("a bundle that cannot be read has %d warnings in the log; want one however often it is read", most)
	}

	broken.Store(false)
	for len(told) < len(bundles) {
		select {
		case b := <-provider.Told():
			told[b.GetId()]++
		case w := <-clock.waits:
			if w.d > time.Minute {
				t.Fatalf("a wait of %v; want none longer than RetryMax (1 min)", w.d)
			}
			clock.fire(w)
		case <-ctx.Done():
			t.Fatalf("%d of %d bundles that became readable never told", len(bundles)-len(told), unreadable)
		}
	}
	notifier.Close()
	for id, n := range told {
		if n != 1 {
			t.Errorf("bundle %s told %d times", id, n)
		}
	}
	if n := mostReads.Load(); n > int64(batch) {
		t.Errorf("a look read %d bundles; want at most a batch (%d)", n, batch)
	}
	if n, _, err := outbox.NoticeBacklog(context.Background()); err != nil || n != 0 {
		t.Fatalf("%d notices left after delivery (%v)", n, err)
	}
}

// bundleWarning is a warning of the notifier's JSON log about one bundle.
type bundleWarning struct{ Level, Msg, Bundle, Error string }

// bundleWarnings returns the warnings in logs that name a bundle.
func bundleWarnings(t *testing.T, logs *lockedBuffer) []bundleWarning {
	t.Helper()
	var out []bundleWarning
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var l bundleWarning
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if l.Level == "WARN" && l.Bundle != "" {
			out = append(out, l)
		}
	}
	return out
}
