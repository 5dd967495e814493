package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const bundleID = "6f1c1b0e-2b7a-4c1e-9d55-0c7f3b0e8a11"

// fakeHub answers like the gateway, with the faults an actor must survive:
// busy peeks, a document not ready yet, and a dequeue whose answer is lost
// (the connection drops after the bundle was acknowledged).
type fakeHub struct {
	mu                      sync.Mutex
	busyPeeks, notReadyDocs int
	loseDequeue             bool
	dequeued                bool
	dequeues                int
	waits                   []string // the wait parameter of each peek
	retryAfter              string   // the Retry-After of the busy peeks
	peekTimes               []time.Time
}

func (f *fakeHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/peek":
		f.waits = append(f.waits, r.URL.Query().Get("wait"))
		f.peekTimes = append(f.peekTimes, time.Now())
		if f.busyPeeks > 0 {
			f.busyPeeks--
			if f.retryAfter != "" {
				w.Header().Set("Retry-After", f.retryAfter)
			}
			http.Error(w, `{"code":14,"message":"stopping"}`, http.StatusServiceUnavailable)
			return
		}
		if f.dequeued {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("MessageId", bundleID)
		_, _ = w.Write([]byte(`{"id":"` + bundleID + `","notificationIds":["a","b"]}`))
	case r.Method == http.MethodGet && r.URL.Path == "/v1/peek/content":
		if f.notReadyDocs > 0 {
			f.notReadyDocs--
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"code":14,"message":"not ready"}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("MessageId", bundleID)
		w.Header().Set("Content-Type", "application/xml")
		_, _ = w.Write([]byte("<document/>"))
	case r.Method == http.MethodDelete && r.URL.Path == "/v1/dequeue/"+bundleID:
		f.dequeues++
		if f.dequeued {
			http.Error(w, `{"code":5,"message":"no such bundle"}`, http.StatusNotFound)
			return
		}
		f.dequeued = true
		if f.loseDequeue {
			f.loseDequeue = false
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close() // done, but the answer never arrives
			}
			return
		}
		_, _ = w.Write([]byte("{}"))
	default:
		http.NotFound(w, r)
	}
}

func runAgainst(t *testing.T, hub *fakeHub, out string) (bundles, notifications int, err error) {
	t.Helper()
	srv := httptest.NewServer(hub) // 127.0.0.1
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := &actor{hub: srv.URL, recipient: "r", out: out, web: srv.Client()}
	return a.run(ctx, 10, 50*time.Millisecond)
}

// Busy peeks and a document not ready are waited out, the document is
// stored before the dequeue, and a 404 after a lost dequeue answer is done.
func TestTheActorSurvivesABusyHubAndALostAnswer(t *testing.T) {
	hub := &fakeHub{busyPeeks: 2, notReadyDocs: 1, loseDequeue: true}
	out := t.TempDir()
	bundles, notifications, err := runAgainst(t, hub, out)
	if err != nil || bundles != 1 || notifications != 2 {
		t.Fatalf("%d bundles, %d notifications, %v; want 1, 2, no error", bundles, notifications, err)
	}
	if hub.dequeues != 2 {
		t.Errorf("%d dequeues, want 2 (the lost one and its retry)", hub.dequeues)
	}
	doc, err := os.ReadFile(filepath.Join(out, bundleID+".xml"))
	if err != nil || string(doc) != "<document/>" {
		t.Fatalf("stored document: %q, %v", doc, err)
	}
}

// A 404 on a first dequeue is not explained by a lost answer: it is said.
func TestA404WithoutALostAnswerIsAnError(t *testing.T) {
	srv := httptest.NewServer(&fakeHub{dequeued: true}) // gone before this actor's dequeue
	defer srv.Close()
	a := &actor{hub: srv.URL, recipient: "r", web: srv.Client()}
	if err := a.dequeue(context.Background(), bundleID); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("dequeue of a bundle not pending: %v, want the 404", err)
	}
}

// Each peek asks the hub to wait, never past the idle bound, and a peek the
// hub answered 204 at once (no long poll) is followed by the backoff, so
// the actor stops once idle.
func TestPeeksWaitWithinTheIdleBound(t *testing.T) {
	hub := &fakeHub{dequeued: true} // nothing to deliver
	srv := httptest.NewServer(hub)
	defer srv.Close()
	a := &actor{hub: srv.URL, recipient: "r", wait: 20 * time.Second, web: srv.Client()}
	const idle = 300 * time.Millisecond
	if bundles, _, err := a.run(t.Context(), 10, idle); err != nil || bundles != 0 {
		t.Fatalf("%d bundles, %v", bundles, err)
	}
	hub.mu.Lock()
	defer hub.mu.Unlock()
	if len(hub.waits) == 0 || hub.waits[0] == "" {
		t.Fatalf("peeks asked to wait %q, want the first to wait", hub.waits)
	}
	for _, w := range hub.waits {
		if w == "" {
			continue // the idle bound was reached: the last peek asks at once
		}
		d, err := time.ParseDuration(w)
		if err != nil || d <= 0 || d > idle {
			t.Fatalf("a peek asked to wait %q, want a duration within the idle bound of %s", w, idle)
		}
	}
}

// A busy hub's Retry-After is waited before the peek is asked again: the
// hub says when it expects to have room, and the actor's own backoff
// (100 ms at first) would spend its attempts before that.
func TestABusyPeekWaitsTheRetryAfter(t *testing.T) {
	hub := &fakeHub{busyPeeks: 1, retryAfter: "1"}
	if bundles, _, err := runAgainst(t, hub, t.TempDir()); err != nil || bundles != 1 {
		t.Fatalf("%d bundles, %v; want 1", bundles, err)
	}
	hub.mu.Lock()
	defer hub.mu.Unlock()
	// A lower bound only: a slow machine makes the gap longer, never shorter.
	if len(hub.peekTimes) < 2 || hub.peekTimes[1].Sub(hub.peekTimes[0]) < time.Second {
		t.Fatalf("peeks at %v; want the second a Retry-After of 1 s after the busy first", hub.peekTimes)
	}
}

// slowDocuments serves a document of size bytes in chunks, flushing each
// after a pause; stallFirst content peeks send half and then nothing more
// until the client goes away.
type slowDocuments struct {
	mu         sync.Mutex
	chunks     int
	stallFirst int
	contents   int
}

func (s *slowDocuments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/peek/content" {
		(&fakeHub{}).ServeHTTP(w, r)
		return
	}
	s.mu.Lock()
	s.contents++
	stall := s.contents <= s.stallFirst
	s.mu.Unlock()
	w.Header().Set("MessageId", bundleID)
	w.Header().Set("Content-Type", "application/xml")
	rc := http.NewResponseController(w)
	for i := range s.chunks {
		if stall && i == s.chunks/2 {
			<-r.Context().Done() // silent, the connection left open
			return
		}
		time.Sleep(20 * time.Millisecond)
		_, _ = w.Write([]byte(strings.Repeat("x", 1024)))
		_ = rc.Flush()
	}
}

// A document whose answer takes longer than the wait for the answer's
// headers is read whole: the timeout covers the headers, not a large
// document arriving over a slow link.
func TestADocumentSlowerThanTheAnswerTimeoutIsReadWhole(t *testing.T) {
	srv := httptest.NewServer(&slowDocuments{chunks: 20}) // 20 pauses of 20 ms
	defer srv.Close()
	out := t.TempDir()
	a := &actor{hub: srv.URL, recipient: "r", out: out, web: newWeb(100 * time.Millisecond)}
	if err := a.fetch(t.Context(), bundleID); err != nil {
		t.Fatalf("fetch: %v; want the whole document", err)
	}
	doc, err := os.ReadFile(filepath.Join(out, bundleID+".xml"))
	if err != nil || len(doc) != 20*1024 {
		t.Fatalf("stored document: %d bytes, %v; want 20 KiB", len(doc), err)
	}
}

// A document whose answer stops without closing is given up on once no
// byte came for the stall bound, and fetched again. The bound is far above
// the 20 ms between the chunks of the answer that does not stall, so that a
// busy machine's pause in it is not taken for a stall (a third peek).
func TestADocumentThatStallsIsFetchedAgain(t *testing.T) {
	slow := &slowDocuments{chunks: 4, stallFirst: 1}
	srv := httptest.NewServer(slow)
	defer srv.Close()
	out := t.TempDir()
	a := &actor{hub: srv.URL, recipient: "r", out: out, web: newWeb(time.Minute), stall: 5 * time.Second}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := a.fetch(ctx, bundleID); err != nil {
		t.Fatalf("fetch: %v; want the whole document from the second content peek", err)
	}
	doc, err := os.ReadFile(filepath.Join(out, bundleID+".xml"))
	if err != nil || len(doc) != 4*1024 {
		t.Fatalf("stored document: %d bytes, %v; want 4 KiB", len(doc), err)
	}
	slow.mu.Lock()
	defer slow.mu.Unlock()
	if slow.contents != 2 {
		t.Fatalf("%d content peeks, want 2 (the stalled one and its retry)", slow.contents)
	}
}

// refuseFirstDequeue fails the first DELETE as a refused connection does:
// the request is never sent.
type refuseFirstDequeue struct {
	next    http.RoundTripper
	refused bool
}

func (r *refuseFirstDequeue) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodDelete && !r.refused {
		r.refused = true
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return r.next.RoundTrip(req)
}

// A 404 after an attempt that never reached the hub (its connection
// refused) is not explained by a lost answer: another poller dequeued the
// bundle, and the actor says so instead of taking it as its own dequeue.
func TestA404AfterAnAttemptNeverSentIsAnError(t *testing.T) {
	srv := httptest.NewServer(&fakeHub{dequeued: true})
	defer srv.Close()
	a := &actor{hub: srv.URL, recipient: "r", web: &http.Client{Transport: &refuseFirstDequeue{next: http.DefaultTransport}}}
	if err := a.dequeue(t.Context(), bundleID); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("dequeue after a refused connection, of a bundle not pending: %v, want the 404", err)
	}
}
