package app_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
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

// The recipients whose retention keeps failing are on /metrics.
func TestTheStuckRetentionGaugeIsOnMetrics(t *testing.T) {
	r := start(t, testConfig(t))
	_, body := send(t, http.MethodGet, "http://"+r.app.HTTPAddr()+"/metrics", "")
	if want := "\nmessagehub_retention_stuck_recipients 0\n"; !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
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

// A web page the operator's browser shows, from any site, cannot make the
// hub's browser-reachable routes change anything: with --auth none (on
// loopback) nothing else stops it, and a cross-site "simple" POST (a
// text/plain body, which needs no CORS preflight) was decoded as JSON and
// served: here a backup written on the hub's host, or saves.
func TestACrossSiteRequestFromABrowserChangesNothing(t *testing.T) {
	r := start(t, testConfig(t))
	parent := t.TempDir()
	for _, c := range []struct{ path, body string }{
		{"/admin/v1/backup", `{"directory": "` + parent + `/from-another-site"}`},
		{"/v1/notifications", `{"notifications": [{"id": "` + uuid.NewString() + `", "recipient": "` + uuid.NewString() +
			`", "origin": "DOMAIN_TIME_SERIES", "contentType": "c", "weight": 1}]}`},
	} {
		req, err := http.NewRequestWithContext(callContext(t), http.MethodPost, "http://"+r.app.HTTPAddr()+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		// What a browser sends with fetch(url, {method: "POST", mode: "no-cors", body}).
		req.Header.Set("Content-Type", "text/plain;charset=UTF-8")
		req.Header.Set("Origin", "https://elsewhere.example")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		req.Header.Set("Sec-Fetch-Mode", "no-cors")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("a cross-site POST %s: %d %s; want 403", c.path, resp.StatusCode, body)
		}
	}
	if _, err := os.Stat(parent + "/from-another-site"); err == nil {
		t.Error("a cross-site request wrote a backup")
	}
}

// With --auth none a request must name the hub by a loopback address: a
// site whose name a browser was made to resolve to 127.0.0.1 (DNS
// rebinding) is same-origin with its own pages, and reached every route,
// the remedies and backups included, through the operator's browser.
func TestWithAuthNoneARequestNamingAnotherHostIsRefused(t *testing.T) {
	r := start(t, testConfig(t))
	parent := t.TempDir()
	req, err := http.NewRequestWithContext(callContext(t), http.MethodPost, "http://"+r.app.HTTPAddr()+"/admin/v1/backup",
		strings.NewReader(`{"directory": "`+parent+`/rebound"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(r.app.HTTPAddr(), ":")
	req.Host = "rebound.example:" + port
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("a request for rebound.example: %d %s; want 421", resp.StatusCode, body)
	}
	if _, err := os.Stat(parent + "/rebound"); err == nil {
		t.Error("a request for another host wrote a backup")
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port} { // what a client on the host names
		status, _ := sendHost(t, "http://"+r.app.HTTPAddr()+"/healthz", host)
		if status != http.StatusOK {
			t.Errorf("GET /healthz for %s: %d, want 200", host, status)
		}
	}
}

// The metrics listener of its own (--metrics-addr, loopback with --auth
// none) is reachable by the same rebinding: a site resolved to 127.0.0.1
// read the hub's figures through the operator's browser.
func TestWithAuthNoneTheMetricsListenerRefusesAnotherHost(t *testing.T) {
	cfg := testConfig(t)
	cfg.MetricsAddr = "127.0.0.1:0"
	r := start(t, cfg)
	_, port, _ := strings.Cut(r.app.MetricsAddr(), ":")
	if status, body := sendHost(t, "http://"+r.app.MetricsAddr()+"/metrics", "rebound.example:"+port); status != http.StatusMisdirectedRequest {
		t.Errorf("GET /metrics for rebound.example: %d %.200s; want 421", status, body)
	}
	if status, _ := sendHost(t, "http://"+r.app.MetricsAddr()+"/metrics", "127.0.0.1:"+port); status != http.StatusOK {
		t.Errorf("GET /metrics for 127.0.0.1: %d, want 200", status)
	}
}

// With --auth none a page of another site may not make the operator's
// browser read through the hub either: a GET has effects too (a Peek cuts
// a bundle, an inspection is audited). Browsers name a cross-site request
// in Sec-Fetch-Site; clients that are not browsers send none and pass, as
// do the console's own calls (same-origin).
func TestWithAuthNoneACrossSiteReadIsRefused(t *testing.T) {
	r := start(t, testConfig(t))
	peek := "http://" + r.app.HTTPAddr() + "/v1/peek?recipient=" + uuid.NewString()
	for site, want := range map[string]int{"cross-site": http.StatusForbidden, "same-site": http.StatusForbidden, "same-origin": http.StatusNoContent, "none": http.StatusNoContent, "": http.StatusNoContent} {
		req, err := http.NewRequestWithContext(callContext(t), http.MethodGet, peek, nil)
		if err != nil {
			t.Fatal(err)
		}
		if site != "" {
			req.Header.Set("Sec-Fetch-Site", site)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /v1/peek with Sec-Fetch-Site %q: %d %.200s; want %d", site, resp.StatusCode, body, want)
		}
	}
	// The console's pages hold no data and do nothing by themselves: a link
	// to them from another site (a runbook in a wiki) opens them.
	req, err := http.NewRequestWithContext(callContext(t), http.MethodGet, "http://"+r.app.HTTPAddr()+"/console/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("Sec-Fetch-Mode", "navigate")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a link from another site to the console: %d, want 200", resp.StatusCode)
	}
	// A path that only starts with the console's is no console file.
	req, err = http.NewRequestWithContext(callContext(t), http.MethodGet, "http://"+r.app.HTTPAddr()+"/console/%2e%2e/v1/peek?recipient="+uuid.NewString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site GET of /console/%%2e%%2e/v1/peek: %d, want 403", resp.StatusCode)
	}
}

func sendHost(t *testing.T, url, host string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(callContext(t), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, data
}

// messagehub_peeks_total counts successful Peek calls. A content peek
// picks its bundle as a Peek does, but one that fails (its domain has not
// built the document in time: UNAVAILABLE, which actors meet every few
// seconds while a provider is down) counted as a Peek that returned a
// bundle: the dashboards showed actors fetching bundles they never got.
func TestAFailedContentPeekIsNotCountedAsAPeek(t *testing.T) {
	hold := make(chan struct{}) // the domain never answers while the test peeks
	t.Cleanup(func() { close(hold) })
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Answer{Hold: hold}
	})
	cfg := testConfig(t)
	cfg.ContentTimeout = 100 * time.Millisecond
	cfg.Content.Providers = map[domain.Origin]string{domain.OriginTimeSeries: provider.Address}
	r := start(t, cfg)
	ctx := callContext(t)
	actor := uuid.NewString()
	if _, err := r.client.Save(ctx, &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{notification(actor)}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, _, err := peekContent(ctx, r.client, &messagehubv1.PeekRequest{Recipient: actor}); status.Code(err) != codes.Unavailable {
			t.Fatalf("a content peek whose document is not built: %v; want UNAVAILABLE", err)
		}
	}
	peeks := func() string {
		_, body := send(t, http.MethodGet, "http://"+r.app.HTTPAddr()+"/metrics", "")
		for line := range strings.SplitSeq(string(body), "\n") {
			if strings.HasPrefix(line, `messagehub_peeks_total{outcome="bundle"`) {
				return line[strings.LastIndexByte(line, ' ')+1:]
			}
		}
		return "0"
	}
	if got := peeks(); got != "0" {
		t.Fatalf("after 3 failed content peeks messagehub_peeks_total{outcome=\"bundle\"} is %s; want 0", got)
	}
	// A Peek of the same bundle counts.
	if p, err := r.client.Peek(ctx, &messagehubv1.PeekRequest{Recipient: actor}); err != nil || p.GetBundle() == nil {
		t.Fatalf("Peek: %v %v", p, err)
	}
	if got := peeks(); got != "1" {
		t.Fatalf("after a Peek messagehub_peeks_total{outcome=\"bundle\"} is %s; want 1", got)
	}
}
