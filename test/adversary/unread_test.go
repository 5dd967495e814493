package adversary

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
)

// The answer budget's defaults (README, "Bounded resources"): answers
// encoded and not yet written hold at most 64 MiB per connection, 80 MiB
// per actor and 320 MiB in all; an answer that finds no room within 5 s is
// refused.
const (
	answersPerConnection = 64 << 20
	answersPerActor      = answersTotal / 4
	answersTotal         = 320 << 20
	answerWait           = 5 * time.Second
	// actorsToFill is how many actors it takes to fill a budget of answers
	// being written (the gRPC listener's bytes, the gateway's places for
	// documents): one actor holds at most a quarter of it.
	actorsToFill = 4
)

// pendingLargestBundle starts a hub holding the largest bundle pending for
// each of actors new recipients, restarted so that it holds only what it
// holds idle, and returns it, the recipients and the size of a Peek's
// answer.
func pendingLargestBundle(t *testing.T, actors int, extra ...string) (*hub, []string, int) {
	t.Helper()
	h := startHub(t, extra...)
	var recipients []string
	size := 0
	for range actors {
		recipient := uuid.NewString()
		saveLargestBundle(t, h, recipient)
		resp, err := h.client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient})
		if err != nil {
			t.Fatalf("peek: %v", err)
		}
		if got := len(resp.GetBundle().GetNotificationIds()); got != maxBundleWeight {
			t.Fatalf("a bundle of %d notifications, want %d", got, maxBundleWeight)
		}
		recipients = append(recipients, recipient)
		size = max(size, proto.Size(resp))
	}
	return h.restart(t), recipients, size
}

// Peeks whose answers are never read (the client's flow-control window
// shut) hold at most the answer budget: on each connection the answers
// that fit its 64 MiB, for each actor those that fit its 80 MiB, in all
// those that fit 320 MiB; the others are refused with RESOURCE_EXHAUSTED
// once they have waited 5 s. Without the budget every call held its 15 MiB
// answer: here 1 GiB. The connections are those of as many actors as fill
// the budget, each peeking a bundle of its own.
func unreadGRPCPeekAnswers(t *testing.T) {
	// At GOGC=400 the garbage of the Peeks around the answers held could
	// pile up past the budget before a collection: the budget holds with
	// the soft limit docs/operations.md gives for it (the hub sets none
	// itself, as one that low slows the drain of large bundles).
	t.Setenv("GOMEMLIMIT", "384MiB")
	h, recipients, size := pendingLargestBundle(t, actorsToFill)
	const conns, perConn = 12, 6
	t.Logf("%d connections × %d Peeks of a %.1f MiB answer, for %d actors: %.0f MiB if every answer were held",
		conns, perConn, mib(int64(size)), len(recipients), mib(int64(conns*perConn*size)))
	reqs := make([][]byte, len(recipients))
	for i, recipient := range recipients {
		req, err := proto.Marshal(&messagehubv1.PeekRequest{Recipient: recipient})
		if err != nil {
			t.Fatal(err)
		}
		reqs[i] = req
	}
	type result struct {
		answered, refused int
		other             []event
	}
	results := make([]result, conns)
	attackers := make([]*h2, conns)
	for i := range attackers {
		attackers[i] = dialH2(t, h.grpcAddr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	}
	start := time.Now()
	measure(t, h, budget, func() {
		var wg sync.WaitGroup
		for i, c := range attackers {
			wg.Go(func() {
				r := &results[i]
				req := reqs[i%len(reqs)]
				for k := range perConn {
					if err := c.call(uint32(2*k+1), messagehubv1.MessageHub_Peek_FullMethodName, nil, req, false); err != nil {
						r.other = append(r.other, event{closed: true, err: err})
						return
					}
				}
				for r.answered+r.refused+len(r.other) < perConn {
					switch ev := c.next(); {
					case ev.answered:
						r.answered++
					case ev.ended && ev.code == codes.ResourceExhausted:
						r.refused++
					default:
						r.other = append(r.other, ev)
						if ev.closed || ev.goAway {
							return
						}
					}
				}
			})
		}
		wg.Wait()
	})
	answered, refused := 0, 0
	perActor := make([]int, len(recipients))
	for i, r := range results {
		answered += r.answered
		refused += r.refused
		perActor[i%len(recipients)] += r.answered
		if len(r.other) > 0 {
			t.Errorf("connection %d: %v, want each Peek answered or refused with RESOURCE_EXHAUSTED", i, r.other)
		}
		if held := r.answered * size; held > answersPerConnection {
			t.Errorf("connection %d holds %d unread answers, %.0f MiB: over its budget", i, r.answered, mib(int64(held)))
		}
	}
	t.Logf("%d answers held (%.0f MiB; per actor %v), %d refused, in %v", answered, mib(int64(answered*size)), perActor, refused, time.Since(start))
	for a, n := range perActor {
		if held := n * size; held > answersPerActor {
			t.Errorf("%d unread answers of actor %d held, %.0f MiB: over its share of the budget", n, a, mib(int64(held)))
		}
	}
	if held := answered * size; held > answersTotal {
		t.Errorf("%d unread answers held, %.0f MiB: over the budget", answered, mib(int64(held)))
	}
	if answered == 0 || refused == 0 {
		t.Errorf("%d answered and %d refused: the attack did not reach the budget", answered, refused)
	}
	// The connections gone, their answers give their room back.
	for _, c := range attackers {
		_ = c.conn.Close()
	}
	resp, err := h.client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipients[0]})
	if err != nil || len(resp.GetBundle().GetNotificationIds()) != maxBundleWeight {
		t.Fatalf("a Peek after the attack: %v", err)
	}
}

// The gateway answers at most 32 documents at once (README, "HTTP gateway"),
// 8 of them to one actor, each holding at most about 3 MiB however slowly it
// is read; the others are answered 503 with Retry-After.
const contentPlaces = 32

// Content peeks over HTTP whose answers are never read hold at most the
// gateway's places for documents, whatever the document's size: 64 unread
// peeks of a 20 MiB document would hold 1.25 GiB if each held its document.
func unreadContentPeeks(t *testing.T) {
	const (
		unread  = 2 * contentPlaces
		docSize = 20 << 20
	)
	document := bytes.Repeat([]byte("<doc>0123456789</doc>\n"), docSize/22+1)[:docSize]
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("application/xml", document, 1<<20)
	})
	h := startHub(t, "--content-provider", "DOMAIN_TIME_SERIES="+provider.Address)
	// As many actors as fill the places.
	var paths []string
	for range actorsToFill {
		recipient := uuid.NewString()
		if _, err := h.client.Save(ctxT(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{notification(recipient)}}); err != nil {
			t.Fatal(err)
		}
		path := "/v1/peek/content?recipient=" + recipient
		// The first peek has the document built and stored; the restarted
		// hub answers it from its data directory.
		if status, n := getAll(t, h.httpAddr, path); status != http.StatusOK || n != docSize {
			t.Fatalf("the first content peek: %d with %d bytes", status, n)
		}
		paths = append(paths, path)
	}
	h = h.restart(t)

	statuses := map[int]int{}
	var conns []net.Conn
	measure(t, h, budget, func() {
		for i := range unread {
			conn, status := getUnread(t, h.httpAddr, paths[i%len(paths)])
			conns = append(conns, conn)
			statuses[status]++
		}
	})
	t.Logf("%d unread content peeks of a %d MiB document: %v", unread, docSize>>20, statuses)
	if statuses[http.StatusOK] != contentPlaces || statuses[http.StatusServiceUnavailable] != unread-contentPlaces {
		t.Errorf("answers %v; want %d × 200 and the rest 503", statuses, contentPlaces)
	}
	// The readers gone, their places are free again.
	for _, c := range conns {
		_ = c.Close()
	}
	if status, n := getAll(t, h.httpAddr, paths[0]); status != http.StatusOK || n != docSize {
		t.Fatalf("a content peek after the attack: %d with %d bytes", status, n)
	}
}

// socketBuffer is the kernel's receive buffer of an unread connection:
// small, so that what the client does not read stays in the hub rather
// than in the kernel's buffers (loopback's grow to megabytes).
const socketBuffer = 16 << 10

// getUnread sends GET path and reads the answer's status line and nothing
// more; the connection is closed when the test ends.
func getUnread(t *testing.T, addr, path string) (net.Conn, int) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if err := conn.(*net.TCPConn).SetReadBuffer(socketBuffer); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetDeadline(time.Now().Add(callTimeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReaderSize(conn, 16).ReadString('\n')
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	var status int
	if _, err := fmt.Sscanf(line, "HTTP/1.1 %d", &status); err != nil {
		t.Fatalf("status line %q: %v", line, err)
	}
	return conn, status
}

// getAll sends GET path and reads the whole answer: its status and size.
func getAll(t *testing.T, addr, path string) (int, int) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v after %d bytes", path, err, n)
	}
	return resp.StatusCode, int(n)
}

// Peeks over HTTP whose answers are never read: each answer is the whole
// bundle as JSON, rendered before it is written, so the answers being
// written share a budget (the gateway's DefaultPeekAnswerBytes) and the
// rest are answered 503 with Retry-After, their bundle pending for the next
// peek. Without the budget 20 of them held 1.3 GiB.
func unreadHTTPPeekAnswers(t *testing.T) {
	h, recipients, size := pendingLargestBundle(t, 1)
	recipient := recipients[0]
	const unread = 20
	statuses := map[int]int{}
	var conns []net.Conn
	measure(t, h, budget, func() {
		for range unread {
			conn, status := getUnread(t, h.httpAddr, "/v1/peek?recipient="+recipient)
			conns = append(conns, conn)
			statuses[status]++
		}
	})
	t.Logf("%d unread HTTP Peeks of a %.1f MiB bundle: %v", unread, mib(int64(size)), statuses)
	if statuses[http.StatusOK] == 0 || statuses[http.StatusServiceUnavailable] == 0 || statuses[http.StatusOK]+statuses[http.StatusServiceUnavailable] != unread {
		t.Errorf("answers %v; want some 200 within the budget and the rest 503", statuses)
	}
	// The readers gone, the budget is free again once the hub has seen
	// their connections close (at the latest when the stalled write is
	// cut, 30 s): until then a peek is told to come back.
	for _, c := range conns {
		_ = c.Close()
	}
	for deadline := time.Now().Add(40 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		status, _ := getAll(t, h.httpAddr, "/v1/peek?recipient="+recipient)
		if status == http.StatusOK {
			break
		}
		if status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("a peek after the attack: %d", status)
		}
	}
}
