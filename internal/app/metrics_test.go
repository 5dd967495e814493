package app_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// A hub whose disk guard is on exposes its gauges on /metrics.
func TestTheDiskGuardIsOnMetrics(t *testing.T) {
	cfg := testConfig(t)
	cfg.MinFreeDisk = 1 << 10
	r := start(t, cfg)
	_, body := send(t, http.MethodGet, "http://"+r.app.HTTPAddr()+"/metrics", "")
	for _, want := range []string{"\nmessagehub_disk_guard_level 0\n", "\nmessagehub_disk_min_free_bytes 1024\n", "\nmessagehub_disk_free_bytes "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
		}
	}
}

// send makes an HTTP request with body (none if empty) and returns the
// answer's status and body, read whole.
func send(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(callContext(t), method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

// The HTTP metrics' series are bounded whatever clients send: the Host
// header is the client's, and naming the server by it made every host
// name (and port) a client sent a series of its own, without end.
func TestHTTPMetricsAreNotLabelledByTheClientsHostHeader(t *testing.T) {
	r := start(t, testConfig(t))
	url := "http://" + r.app.HTTPAddr() + "/openapi.json"
	const hosts = 20
	for i := range hosts {
		req, err := http.NewRequestWithContext(callContext(t), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = fmt.Sprintf("host-%d.example:%d", i, 1000+i)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	_, body := send(t, http.MethodGet, "http://"+r.app.HTTPAddr()+"/metrics", "")
	var series []string
	for line := range strings.SplitSeq(string(body), "\n") {
		if strings.HasPrefix(line, "http_server_request_duration_seconds_count{") {
			series = append(series, line)
		}
	}
	if len(series) == 0 {
		t.Fatal("/metrics has no http_server_request_duration_seconds")
	}
	if len(series) > 1 || strings.Contains(series[0], "host-") {
		t.Fatalf("%d requests with as many Host headers made %d series:\n%s", hosts, len(series), strings.Join(series, "\n"))
	}
}
