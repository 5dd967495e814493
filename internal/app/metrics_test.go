package app_test

import (
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
