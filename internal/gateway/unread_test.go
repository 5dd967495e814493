package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/gateway"
	"github.com/energydatahub/messagehub/internal/server"
)

// socketBuffer is the kernel's buffer of each end of the test's HTTP
// connections: small, so that what a client does not read stays in the hub
// rather than in the kernel (loopback buffers grow to megabytes).
const socketBuffer = 16 << 10

// smallBuffers makes the HTTP server's accepted connections keep small
// kernel buffers.
func smallBuffers(web *httptest.Server) { web.Listener = smallBufferListener{web.Listener} }

type smallBufferListener struct{ net.Listener }

func (l smallBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(socketBuffer)
		_ = tc.SetReadBuffer(socketBuffer)
	}
	return c, err
}

func dialSmall(ctx context.Context, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(socketBuffer)
		_ = tc.SetWriteBuffer(socketBuffer)
	}
	return c, err
}

// cuts hands over each "content answer cut" the gateway logs, after calling
// sample: the moment an unread answer is cut is the moment it has held the
// most, having been stuck for the whole stall.
type cuts struct {
	sample func()
	c      chan string
}

func (h cuts) Enabled(context.Context, slog.Level) bool { return true }
func (h cuts) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "content answer cut") {
		h.sample()
		h.c <- r.Message
	}
	return nil
}
func (h cuts) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h cuts) WithGroup(string) slog.Handler      { return h }

// heapInUse is the heap in use without garbage, nor buffers only pooled
// (sync.Pool keeps them through one collection).
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// Content peeks whose answers are never read hold at most the places of the
// content budget, each at most gateway.ContentPeekBytes, whatever the
// document's size and however many are made; the others are refused with
// 503 and Retry-After, and a stuck answer is cut after the stall, freeing
// its place. (Before the budget and the in-process connection's fixed
// window, each unread peek of a large document held up to 16 MiB.)
func TestUnreadContentPeeksHoldABoundedHeap(t *testing.T) {
	// The peeks must all be made before the first stuck answer is cut: a
	// cut frees a place for a later peek, and the answers it leaves behind
	// blur the heap's figure. A machine too slow for that within the
	// stall runs the scenario again with a longer one.
	for stall := time.Second; ; stall *= 2 {
		if unreadContentPeeks(t, stall) {
			return
		}
		if stall >= 16*time.Second {
			t.Fatalf("%v were not enough to make 24 content peeks", stall)
		}
		t.Logf("a stuck answer was cut before the peeks were all made; again with a stall of %v", 2*stall)
	}
}

// unreadContentPeeks runs the scenario with the given stall; false when an
// answer was cut before all peeks were made (nothing asserted then but the
// places: never more answers in flight than places).
func unreadContentPeeks(t *testing.T, stall time.Duration) bool {
	const (
		places  = 2
		unread  = 24
		docSize = 20 << 20
	)
	document := bytes.Repeat([]byte("0123456789abcdef"), docSize/16)
	var (
		mu   sync.Mutex
		peak uint64
		base uint64
	)
	log := cuts{c: make(chan string, unread), sample: func() {
		in := heapInUse()
		mu.Lock()
		defer mu.Unlock()
		if in > base {
			peak = max(peak, in-base)
		}
	}}
	docs := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("application/octet-stream", document, 1<<20)
	}).Documents(t)
	s := newStackServing(t, []server.Option{server.WithDocuments(docs, time.Minute)}, smallBuffers,
		gateway.WithContentPeeks(places, places), gateway.WithContentStall(stall), gateway.WithAccessLog(slog.New(log)))
	// As many actors as places: an actor may hold only its share of them.
	var urls []string
	for range places {
		recipient := uuid.NewString()
		s.saveOne(t, recipient, domain.OriginTimeSeries)
		url := s.url + "/v1/peek/content?recipient=" + recipient
		// The document is built and stored by a first peek, read whole.
		if resp, body := get(t, url); resp.StatusCode != http.StatusOK || len(body) != docSize {
			t.Fatalf("first peek: %d with %d bytes", resp.StatusCode, len(body))
		}
		urls = append(urls, url)
	}
	mu.Lock()
	base = heapInUse()
	mu.Unlock()

	// An answer's cut is logged before its place is given back, so the
	// answers in flight when a status line arrives are at most the 200s so
	// far less the cuts logged by then.
	statuses := map[int]int{}
	cut := 0
	for i := range unread {
		statuses[getUnread(t, s, strings.TrimPrefix(urls[i%places], s.url))]++
		for drained := false; !drained; {
			select {
			case <-log.c:
				cut++
			default:
				drained = true
			}
		}
		if inFlight := statuses[http.StatusOK] - cut; inFlight > places {
			t.Fatalf("%d content answers in flight at once, more than the %d places", inFlight, places)
		}
	}
	if cut > 0 {
		return false
	}
	if statuses[http.StatusOK] != places || statuses[http.StatusServiceUnavailable] != unread-places {
		t.Fatalf("answers %v; want %d × 200 and the rest 503", statuses, places)
	}
	for range places {
		<-log.c
	}
	mu.Lock()
	held := peak
	mu.Unlock()
	const slack = 4 << 20 // the hub's other buffers, connections, pools
	bound := uint64(places*gateway.ContentPeekBytes + slack)
	t.Logf("%d unread content peeks of a %d MiB document: heap held %.1f MiB at most (bound %.1f MiB)",
		unread, docSize>>20, float64(held)/(1<<20), float64(bound)/(1<<20))
	if held > bound {
		t.Fatalf("unread content peeks held %d bytes, more than %d places of %d bytes and %d slack",
			held, places, gateway.ContentPeekBytes, slack)
	}
	// The cut answers gave their places up.
	if resp, body := get(t, urls[0]); resp.StatusCode != http.StatusOK || len(body) != docSize {
		t.Fatalf("a peek after the unread ones were cut: %d with %d bytes", resp.StatusCode, len(body))
	}
	return true
}

// getUnread sends GET path on a connection of its own and returns the
// answer's status, reading nothing of its body: the connection stays open
// until the test ends, its answer unread.
func getUnread(t *testing.T, s *stack, path string) int {
	t.Helper()
	code, _ := getUnreadRefusal(t, s, path)
	return code
}

// getUnreadRefusal is getUnread that also returns, for an answer other than
// 200, its Retry-After and error message (a refusal's body is read whole).
func getUnreadRefusal(t *testing.T, s *stack, path string) (int, refusal) {
	t.Helper()
	conn, err := dialSmall(t.Context(), strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: hub\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	// The status line and headers, and not a byte of a 200's body read on
	// purpose.
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 16), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Closing the body of a 200 would read it: the connection's close
	// (cleanup) ends it.
	defer func() {
		if resp.StatusCode != http.StatusOK {
			_ = resp.Body.Close()
		}
	}()
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, refusal{}
	}
	var e errorBody
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("%d with a body that is not the JSON error shape: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, refusal{retryAfter: resp.Header.Get("Retry-After"), message: e.Message}
}

// refusal is what a refused answer says.
type refusal struct{ retryAfter, message string }

// A client that reads a document slowly but steadily gets all of it, for
// longer than the HTTP server's WriteTimeout: the stall is counted per
// piece, not for the whole answer.
func TestASlowButSteadyReaderGetsTheWholeDocument(t *testing.T) {
	const (
		docSize   = 4 << 20
		readSize  = 64 << 10
		readPause = 20 * time.Millisecond
		whole     = 300 * time.Millisecond // far below docSize/readSize × readPause
	)
	document := bytes.Repeat([]byte("<doc/>"), docSize/6)
	docs := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("application/xml", document, 1<<20)
	}).Documents(t)
	s := newStackServing(t, []server.Option{server.WithDocuments(docs, time.Minute)},
		func(web *httptest.Server) { smallBuffers(web); web.Config.WriteTimeout = whole },
		gateway.WithContentStall(time.Minute))
	recipient := uuid.NewString()
	s.saveOne(t, recipient, domain.OriginTimeSeries)
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return dialSmall(ctx, addr) },
	}}
	resp, err := client.Do(newRequest(t, http.MethodGet, s.url+"/v1/peek/content?recipient="+recipient, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	start := time.Now()
	var got bytes.Buffer
	buf := make([]byte, readSize)
	for {
		n, err := io.ReadFull(resp.Body, buf)
		got.Write(buf[:n])
		if err != nil {
			break
		}
		time.Sleep(readPause) // the client's pace, not a synchronisation
	}
	if !bytes.Equal(got.Bytes(), document) {
		t.Fatalf("got %d of %d bytes in %v (the server's WriteTimeout is %v)", got.Len(), len(document), time.Since(start), whole)
	}
	if took := time.Since(start); took < whole {
		t.Fatalf("read in %v, not past the WriteTimeout %v: the test shows nothing", took, whole)
	}
}

// A content peek of a bundle whose domain has no document provider answers
// the bundle itself as JSON, as large as a Peek's answer (about 15 MiB for
// the largest bundle of 255-character document types): unread, such
// answers share the Peek answers' budget, so that one is let through and
// those beyond the budget are refused with 503 and Retry-After, its bundle
// staying pending. (They were written outside any budget: every unread one
// held its bundle twice over, as a Peek's answer does.)
func TestUnreadContentPeeksOfABundleAloneShareThePeekAnswersBudget(t *testing.T) {
	const unread = 4
	s := newStackServing(t, nil, smallBuffers, gateway.WithContentStall(time.Hour))
	recipient := uuid.NewString()
	// The largest bundle.
	s.saveWideBundle(t, recipient, domain.DefaultMaxBundleWeight)
	base := heapInUse()
	statuses := map[int]int{}
	for range unread {
		statuses[getUnread(t, s, "/v1/peek/content?recipient="+recipient)]++
	}
	t.Logf("%d unread content peeks of the largest bundle without a document: %v, heap %.1f MiB over the start",
		unread, statuses, float64(int64(heapInUse())-int64(base))/(1<<20))
	if statuses[http.StatusOK] != 1 || statuses[http.StatusServiceUnavailable] != unread-1 {
		t.Fatalf("answers %v; want one 200 and the rest 503: each answer holds over half of the budget", statuses)
	}
}

// saveWideBundle saves a bundle of n notifications for recipient, each of
// its own 255-character document type: the widest JSON per notification.
func (s *stack) saveWideBundle(t *testing.T, recipient string, n int) {
	t.Helper()
	for first := 0; first < n; first += domain.MaxNotificationsPerSave {
		var ns []domain.Notification
		for i := first; i < min(first+domain.MaxNotificationsPerSave, n); i++ {
			ns = append(ns, domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges,
				ContentType: "c", DocumentType: fmt.Sprintf("%0255d", i), SupportsBundling: true, Weight: 1})
		}
		if _, err := s.repo.Save(t.Context(), ns); err != nil {
			t.Fatal(err)
		}
	}
}
