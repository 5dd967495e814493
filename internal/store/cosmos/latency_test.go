package cosmos_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/test/cosmostest"
)

// slowTransport holds every request for delay before sending it, as a
// real account's round trip would, and records how many transactional
// batches on the recipients container (reservations, finalizes) were in
// flight at most.
type slowTransport struct {
	next     *http.Client
	delay    time.Duration
	requests atomic.Int64
	inFlight atomic.Int64
	mu       sync.Mutex
	most     int64
}

func (t *slowTransport) Do(req *http.Request) (*http.Response, error) {
	t.requests.Add(1)
	if req.Header.Get("x-ms-cosmos-is-batch-request") != "" && strings.Contains(req.URL.Path, "/colls/recipients/") {
		n := t.inFlight.Add(1)
		defer t.inFlight.Add(-1)
		t.mu.Lock()
		t.most = max(t.most, n)
		t.mu.Unlock()
	}
	time.Sleep(t.delay)
	return t.next.Do(req)
}

func (t *slowTransport) peak() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.most
}

// spread is n notifications over recipients recipients, n/recipients each.
func spread(n, recipients int) []domain.Notification {
	var out []domain.Notification
	for range recipients {
		out = append(out, notifications(n/recipients, uuid.NewString(), 1)...)
	}
	return out
}

// A save over many recipients reserves them side by side: its reserve
// batches overlap instead of queueing one recipient behind the other.
func TestASaveReservesItsRecipientsSideBySide(t *testing.T) {
	slow := &slowTransport{next: cosmostest.NewHTTPClient(), delay: 5 * time.Millisecond}
	s := open(t, cosmos.Config{Transport: slow, Throughput: "manual=1000000"})
	repo := hub.New(s, hub.Options{}, nil)
	t.Cleanup(repo.Close)
	before := slow.peak()
	if _, err := repo.Save(context.Background(), spread(1_000, 100)); err != nil {
		t.Fatal(err)
	}
	if got := slow.peak(); got < 4 {
		t.Fatalf("at most %d batches on recipients in flight at once during a save over 100 recipients (before it: %d)", got, before)
	}
}

// BenchmarkSaveOf1000Over100RecipientsAt5msPerRequest times a save of 1,000
// notifications over 100 recipients when every request takes 5 ms more, as
// an account in the same region would (docs/cosmos.md, "Latency").
func BenchmarkSaveOf1000Over100RecipientsAt5msPerRequest(b *testing.B) {
	benchmarkSaveOver100Recipients(b, 5*time.Millisecond)
}

// BenchmarkSaveOf1000Over100RecipientsAt0msPerRequest is the same save with
// nothing added: what the test server and the client take on this machine,
// beside which the 5 ms round trips are measured.
func BenchmarkSaveOf1000Over100RecipientsAt0msPerRequest(b *testing.B) {
	benchmarkSaveOver100Recipients(b, 0)
}

func benchmarkSaveOver100Recipients(b *testing.B, delay time.Duration) {
	slow := &slowTransport{next: cosmostest.NewHTTPClient(), delay: delay}
	s := open(b, cosmos.Config{Transport: slow, Throughput: "manual=1000000"})
	repo := hub.New(s, hub.Options{PlanParallel: cosmos.Parallel}, nil) // as the binary composes it
	b.Cleanup(repo.Close)
	before := slow.requests.Load()
	for b.Loop() {
		if _, err := repo.Save(context.Background(), spread(1_000, 100)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(slow.requests.Load()-before)/float64(b.N), "requests/op")
}

// bubbleTransport counts the round trips on a critical path without
// timing anything: inside a synctest bubble every request first waits
// delay on the bubble's fake clock, then a worker outside the bubble sends
// it to the test server. The fake clock moves only while every goroutine
// of the bubble is durably blocked, and a goroutine waiting for the worker
// is not (its channels were made outside), so the fake time a Save takes
// is delay times the number of sequential waves of requests it makes,
// however fast or busy the machine is.
type bubbleTransport struct {
	delay time.Duration
	work  chan bubbleCall
	slots chan chan bubbleAnswer
}

type bubbleCall struct {
	req    *http.Request
	answer chan bubbleAnswer
}

type bubbleAnswer struct {
	resp *http.Response
	err  error
}

// newBubbleTransport starts its worker; call it outside the bubble.
func newBubbleTransport(t *testing.T, delay time.Duration) *bubbleTransport {
	const slots = 4096 // more than a save has in flight
	b := &bubbleTransport{delay: delay, work: make(chan bubbleCall), slots: make(chan chan bubbleAnswer, slots)}
	for range slots {
		b.slots <- make(chan bubbleAnswer, 1)
	}
	client := cosmostest.NewHTTPClient()
	done := make(chan struct{})
	go func() {
		for {
			select {
			case c := <-b.work:
				go func() { c.answer <- send(client, c.req) }()
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() { close(done) })
	return b
}

// send sends req with a context of the worker's own (a context made in the
// bubble may not be used outside it) and reads the whole answer.
func send(client *http.Client, req *http.Request) bubbleAnswer {
	resp, err := client.Do(req.Clone(context.Background()))
	if err != nil {
		return bubbleAnswer{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return bubbleAnswer{err: err}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return bubbleAnswer{resp: resp}
}

func (b *bubbleTransport) Do(req *http.Request) (*http.Response, error) {
	time.Sleep(b.delay)
	answer := <-b.slots
	defer func() { b.slots <- answer }()
	b.work <- bubbleCall{req: req, answer: answer}
	a := <-answer
	return a.resp, a.err
}

// A Save of 1,000 notifications over 100 recipients makes few sequential
// waves of requests, however many recipients: the hub loads them all at
// once (one query each, as fresh as this instance's writes: 1), and the store
// creates the commit record while it registers them or reads their heads
// (1), reserves them all at once (1), writes the id documents (1) and looks
// the ids up again (1) while the pages are written, commits (1) and
// finalizes on the heads its reservations wrote (1).
func TestASaveOf1000Over100RecipientsTakesFewRoundTrips(t *testing.T) {
	const delay = 5 * time.Millisecond
	const most = 7
	transport := newBubbleTransport(t, delay)
	synctest.Test(t, func(t *testing.T) {
		s := open(t, cosmos.Config{Transport: transport, Throughput: "manual=1000000"})
		repo := hub.New(s, hub.Options{PlanParallel: cosmos.Parallel}, nil) // as the binary composes it
		defer repo.Close()
		// New recipients (registered, heads created), then the same ones
		// again (heads read and replaced).
		first := spread(1_000, 100)
		again := make([]domain.Notification, len(first))
		for i, n := range first {
			n.ID = uuid.NewString()
			again[i] = n
		}
		for _, run := range []struct {
			name string
			ns   []domain.Notification
		}{{"new recipients", first}, {"known recipients", again}} {
			start := time.Now()
			if _, err := repo.Save(context.Background(), run.ns); err != nil {
				t.Fatal(err)
			}
			waves := time.Since(start) / delay
			t.Logf("a save of 1,000 over 100 %s: %d sequential waves of requests (%v at %v per request)",
				run.name, waves, time.Since(start), delay)
			if waves > most {
				t.Errorf("a save of 1,000 over 100 %s made %d sequential waves of requests; want at most %d", run.name, waves, most)
			}
		}
	})
}

// The resend of the largest Save (10,000 notifications over 250
// recipients, the most cabinets a save writes) with the id index at 64
// buckets, as docs/cosmos.md sizes it for 10,000 notifications/s, is
// answered within the hub's 30 s at 5 ms per request: it writes its pages
// and id documents, finds every id stored, rolls back and is answered as
// duplicates. Each of its id documents holds the ids of many recipients,
// and each recipient's reservation lists those holding its own; the
// rollback must delete each document once, not once per recipient
// listing it, one after the other (250 recipients × ≈ 35 buckets: some
// 8,700 deletes, 44 s at 5 ms).
func TestAResendOfTheLargestSaveIsAnsweredWithinTheHubsDeadline(t *testing.T) {
	const delay = 5 * time.Millisecond
	transport := newBubbleTransport(t, delay)
	synctest.Test(t, func(t *testing.T) {
		s := open(t, cosmos.Config{Transport: transport, Throughput: "manual=1000000", IDBuckets: 64})
		repo := hub.New(s, hub.Options{PlanParallel: cosmos.Parallel}, nil) // as the binary composes it
		defer repo.Close()
		ns := spread(domain.MaxNotificationsPerSave, cosmos.MaxCabinetsPerSave)
		if _, err := repo.Save(context.Background(), ns); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		got, err := repo.Save(context.Background(), ns)
		t.Logf("the resend of a save of 10,000 over 250 recipients took %v at %v per request", time.Since(start), delay)
		if err != nil || got.Saved != 0 || got.Duplicates != len(ns) {
			t.Fatalf("resend of a save of 10,000 over 250 recipients: %+v, %v; want 10,000 duplicates", got, err)
		}
	})
}
