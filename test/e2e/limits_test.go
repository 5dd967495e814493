package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/auth/authtest"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
)

// With --auth jwt a body is neither read nor waited for before its token is
// checked, and a declared oversize is refused before it is sent: the hub
// answers as soon as it has the headers. The read timeout is far longer
// than the test waits, so a hub that waited for the body would not answer.
func TestWithJWTTheTokenAndTheDeclaredSizeAreCheckedBeforeTheBody(t *testing.T) {
	is := authtest.NewIssuer(t, testIssuer, testAudience)
	h := startHTTPHub(t, "--auth", "jwt", "--jwks-file", is.WriteJWKS(t),
		"--jwt-issuer", testIssuer, "--jwt-audience", testAudience, "--http-read-timeout", "1h")
	domainTok := is.RS256(t, is.Claims(newID(), "domain"))
	for _, tc := range []struct {
		name, authorization string
		want                int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a bad token", "Authorization: Bearer not-a-jwt\r\n", http.StatusUnauthorized},
		{"a good token and 300 MB", "Authorization: Bearer " + domainTok + "\r\n", http.StatusRequestEntityTooLarge},
	} {
		if got := headersOnly(t, h, tc.authorization, 300<<20); got != tc.want {
			t.Errorf("%s: %d before the body, want %d", tc.name, got, tc.want)
		}
	}
}

// headersOnly sends the headers of a Save of size bytes, none of its body,
// and returns the status the hub answers with.
func headersOnly(t *testing.T, h *httpHub, extraHeaders string, size int) int {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	// Only keeps a hub that waits for the body from hanging the test.
	if err := conn.SetDeadline(time.Now().Add(callTimeout)); err != nil {
		t.Fatal(err)
	}
	_, err = fmt.Fprintf(conn, "POST /v1/notifications HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n",
		extraHeaders, size)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer before the body: %v", err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// A huge body of undeclared length (chunked) is cut off at the limit: the
// hub's peak memory grows by a fraction of what was sent at it.
func TestAHugeChunkedBodyDoesNotGrowTheHub(t *testing.T) {
	h := startHTTPHub(t)
	before := peakRSS(t, h.Cmd.Process.Pid)
	const size = 1 << 30
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, h.base+"/v1/notifications", io.LimitReader(spaces{}, size))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1 // chunked: the size shows only while reading
	resp, err := h.web.Do(req)
	if err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%d, want 413", resp.StatusCode)
		}
	} else if !errors.Is(err, io.ErrClosedPipe) && !strings.Contains(err.Error(), "connection reset") && !strings.Contains(err.Error(), "broken pipe") {
		t.Fatal(err)
	}
	// A body held whole would add at least its 1 GiB (3 GiB measured); the
	// cap (33 MiB) and the decoder's buffers add about 100 MiB, about 300
	// MiB under the race detector.
	grew := peakRSS(t, h.Cmd.Process.Pid) - before
	t.Logf("peak memory grew by %d MiB for a refused body of %d MiB", grew>>20, size>>20)
	if grew > size*3/4 {
		t.Errorf("the hub's peak memory grew by %d MiB for a refused body", grew>>20)
	}
}

// spaces is an endless body of blanks: never valid JSON, never finished.
type spaces struct{}

func (spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// peakRSS is the most resident memory process pid has had, in bytes.
func peakRSS(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// Every HTTP user's calls share the gateway's one in-process connection: a
// client's stream cap must not apply to it, or a few slow calls (content
// peeks waiting for a domain) would stall the whole HTTP API.
func TestSlowHTTPCallsDoNotHoldUpOthers(t *testing.T) {
	asked := make(chan struct{}, 1)
	release := make(chan struct{})
	defer close(release)
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		select {
		case asked <- struct{}{}:
		default:
		}
		return contenttest.Answer{Hold: release}
	})
	h := startHTTPHub(t, "--grpc-max-streams", "1", "--content-timeout", "10m", "--http-write-timeout", "11m",
		"--content-provider", "DOMAIN_TIME_SERIES="+provider.Address)
	waiting := newID()
	n := notification(waiting, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries")
	h.do(t, http.MethodPost, "/v1/notifications", "", saveRequest(n)).want(t, http.StatusOK)

	slow := make(chan struct{})
	go func() {
		defer close(slow)
		resp, err := h.web.Get(h.base + "/v1/peek/content?recipient=" + waiting)
		if err == nil {
			_ = resp.Body.Close()
		}
	}()
	<-asked // the content peek is in flight and holds its call for the test's whole length
	// Held up behind it, this would wait out the HTTP client's timeout.
	h.do(t, http.MethodGet, "/v1/peek?recipient="+newID(), "", nil).want(t, http.StatusNoContent)
	select {
	case <-slow:
		t.Fatal("the slow content peek ended early")
	default:
	}
}
