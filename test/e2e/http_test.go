package e2e

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// httpHub is a running messagehub reached through its HTTP gateway.
type httpHub struct {
	*hub
	base string // http://host:port
	web  *http.Client
}

var httpAddrRE = regexp.MustCompile(`"msg":"listening".*"http_addr":"([^"]+)"`)

// startHTTPHub starts the binary with its gateway on a free loopback port.
func startHTTPHub(t *testing.T, extraArgs ...string) *httpHub {
	t.Helper()
	h := startHub(t, append([]string{"--http-addr", "127.0.0.1:0"}, extraArgs...)...)
	return &httpHub{hub: h, base: "http://" + httpAddrOf(t, h), web: &http.Client{Timeout: callTimeout}}
}

// httpAddrOf reads the gateway's address from the "listening" log line,
// which is logged before the hub's gRPC address is known to startHub.
func httpAddrOf(t *testing.T, h *hub) string {
	t.Helper()
	m := httpAddrRE.FindStringSubmatch(h.log())
	if m == nil {
		t.Fatalf("no http_addr in the listening line:\n%s", h.log())
	}
	return m[1]
}

// httpResult is an HTTP answer, read in full.
type httpResult struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request with an optional bearer token and JSON body.
func (h *httpHub) do(t *testing.T, method, path, token string, body any) httpResult {
	t.Helper()
	var rd io.Reader
	if body != nil {
		var b []byte
		var err error
		if m, ok := body.(*messagehubv1.SaveRequest); ok {
			b, err = protojson.Marshal(m)
		} else {
			b, err = json.Marshal(body)
		}
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctxT(t), method, h.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.web.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return httpResult{status: resp.StatusCode, header: resp.Header, body: data}
}

func (r httpResult) want(t *testing.T, status int) httpResult {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	return r
}

// bundle decodes a 200 Peek answer and checks that MessageId names it.
func (r httpResult) bundle(t *testing.T) *messagehubv1.Bundle {
	t.Helper()
	r.want(t, http.StatusOK)
	var b messagehubv1.Bundle
	if err := protojson.Unmarshal(r.body, &b); err != nil {
		t.Fatalf("peek body %s: %v", r.body, err)
	}
	if got := r.header.Get("MessageId"); got == "" || got != b.GetId() {
		t.Fatalf("MessageId header %q, bundle id %q", got, b.GetId())
	}
	return &b
}

// errorBody is grpc-gateway's JSON error body.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (r httpResult) errorBody(t *testing.T, status int) errorBody {
	t.Helper()
	r.want(t, status)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error Content-Type %q, want JSON", ct)
	}
	var e errorBody
	if err := json.Unmarshal(r.body, &e); err != nil || e.Message == "" {
		t.Fatalf("error body %s is not a JSON status: %v", r.body, err)
	}
	return e
}

func saveRequest(ns ...*messagehubv1.DataAvailable) *messagehubv1.SaveRequest {
	return &messagehubv1.SaveRequest{Notifications: ns}
}

func TestHTTPGatewayPeekAndDequeue(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { testHTTPGatewayPeekAndDequeue(t, startHTTPHub(t, b.args()...)) })
	}
}

func testHTTPGatewayPeekAndDequeue(t *testing.T, h *httpHub) {
	recipient := newID()
	q := "?recipient=" + recipient

	h.do(t, http.MethodGet, "/v1/peek"+q, "", nil).want(t, http.StatusNoContent)

	ts := []*messagehubv1.DataAvailable{
		notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries"),
		notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries"),
	}
	charge := notification(recipient, messagehubv1.Domain_DOMAIN_CHARGES, "Charges")
	r := h.do(t, http.MethodPost, "/v1/notifications", "", saveRequest(append(ts, charge)...)).want(t, http.StatusOK)
	var saved messagehubv1.SaveResponse
	if err := protojson.Unmarshal(r.body, &saved); err != nil || saved.GetSaved() != 3 {
		t.Fatalf("save answer %s (%v), want 3 saved", r.body, err)
	}

	// Each group has its own route; aggregations has nothing.
	h.do(t, http.MethodGet, "/v1/peek/aggregations"+q, "", nil).want(t, http.StatusNoContent)
	b := h.do(t, http.MethodGet, "/v1/peek/timeseries"+q, "", nil).bundle(t)
	if !slices.Equal(b.GetNotificationIds(), []string{ts[0].GetId(), ts[1].GetId()}) || b.GetOrigin() != messagehubv1.Domain_DOMAIN_TIME_SERIES {
		t.Fatalf("timeseries bundle %v, want the two time series notifications", b)
	}
	// Peek is idempotent: the same bundle again, also through the ALL view.
	for _, path := range []string{"/v1/peek/timeseries", "/v1/peek"} {
		again := h.do(t, http.MethodGet, path+q, "", nil).bundle(t)
		if again.GetId() != b.GetId() || !slices.Equal(again.GetNotificationIds(), b.GetNotificationIds()) {
			t.Fatalf("re-peek via %s = %v, want the pending bundle %v", path, again, b)
		}
	}
	// The caller may choose the id of a new bundle.
	chosen := newID()
	md := h.do(t, http.MethodGet, "/v1/peek/masterdata"+q+"&bundleId="+chosen, "", nil).bundle(t)
	if md.GetId() != chosen || !slices.Equal(md.GetNotificationIds(), []string{charge.GetId()}) {
		t.Fatalf("masterdata bundle %v, want id %s with the charge", md, chosen)
	}

	h.do(t, http.MethodDelete, "/v1/dequeue/"+b.GetId()+q, "", nil).want(t, http.StatusOK)
	if e := h.do(t, http.MethodDelete, "/v1/dequeue/"+b.GetId()+q, "", nil).errorBody(t, http.StatusNotFound); e.Code != 5 {
		t.Errorf("second dequeue: code %d, want 5 (NOT_FOUND)", e.Code)
	}
	h.do(t, http.MethodDelete, "/v1/dequeue/"+newID()+q, "", nil).errorBody(t, http.StatusNotFound)
	h.do(t, http.MethodGet, "/v1/peek/timeseries"+q, "", nil).want(t, http.StatusNoContent)
	h.do(t, http.MethodDelete, "/v1/dequeue/"+chosen+q, "", nil).want(t, http.StatusOK)
	h.do(t, http.MethodGet, "/v1/peek"+q, "", nil).want(t, http.StatusNoContent)
}

func TestHTTPGatewayStatusCodes(t *testing.T) {
	h := startHTTPHub(t)
	recipient := newID()
	n := notification(recipient, messagehubv1.Domain_DOMAIN_AGGREGATIONS, "Agg")
	h.do(t, http.MethodPost, "/v1/notifications", "", saveRequest(n)).want(t, http.StatusOK)
	conflicting := notification(recipient, messagehubv1.Domain_DOMAIN_AGGREGATIONS, "Agg")
	conflicting.Id, conflicting.Weight = n.GetId(), 2

	tests := []struct {
		name   string
		method string
		path   string
		body   any
		status int
	}{
		{"a peek without a recipient is 400", http.MethodGet, "/v1/peek", nil, http.StatusBadRequest},
		{"a malformed recipient is 400", http.MethodGet, "/v1/peek?recipient=nope", nil, http.StatusBadRequest},
		{"a malformed bundle id is 400", http.MethodDelete, "/v1/dequeue/nope?recipient=" + recipient, nil, http.StatusBadRequest},
		{"an empty save is 400", http.MethodPost, "/v1/notifications", map[string]any{"notifications": []any{}}, http.StatusBadRequest},
		{"a body that is not JSON is 400", http.MethodPost, "/v1/notifications", "{", http.StatusBadRequest},
		{"an id reused with other content is 409", http.MethodPost, "/v1/notifications", saveRequest(conflicting), http.StatusConflict},
		{"an unknown route is 404", http.MethodGet, "/v1/nothing", nil, http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.do(t, tt.method, tt.path, "", tt.body).errorBody(t, tt.status)
		})
	}
	t.Run("another pending bundle is 400 with FAILED_PRECONDITION", func(t *testing.T) {
		// grpc-gateway's standard mapping makes FAILED_PRECONDITION a 400;
		// the body's code tells it from INVALID_ARGUMENT.
		b := h.do(t, http.MethodGet, "/v1/peek/aggregations?recipient="+recipient, "", nil).bundle(t)
		e := h.do(t, http.MethodGet, fmt.Sprintf("/v1/peek/aggregations?recipient=%s&bundleId=%s", recipient, newID()), "", nil).
			errorBody(t, http.StatusBadRequest)
		if e.Code != 9 {
			t.Errorf("code %d, want 9 (FAILED_PRECONDITION)", e.Code)
		}
		h.do(t, http.MethodDelete, "/v1/dequeue/"+b.GetId()+"?recipient="+recipient, "", nil).want(t, http.StatusOK)
	})
}

func TestHTTPHealthzAndOpenAPI(t *testing.T) {
	h := startHTTPHub(t)
	r := h.do(t, http.MethodGet, "/healthz", "", nil).want(t, http.StatusOK)
	if !strings.Contains(string(r.body), "SERVING") {
		t.Errorf("/healthz body %s, want SERVING", r.body)
	}

	r = h.do(t, http.MethodGet, "/openapi.json", "", nil).want(t, http.StatusOK)
	var doc struct {
		Swagger string                                `json:"swagger"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	for path, method := range map[string]string{"/v1/peek": "get", "/v1/dequeue/{bundleId}": "delete", "/v1/notifications": "post"} {
		if _, ok := doc.Paths[path][method]; !ok {
			t.Errorf("openapi.json lacks %s %s (has %v)", method, path, doc.Paths)
		}
	}
	if !strings.Contains(string(doc.Paths["/v1/peek"]["get"]), `"204"`) {
		t.Errorf("openapi.json does not document the 204 of peek")
	}

}

// metricValue sums the samples of a Prometheus metric whose labels contain
// every one of labels (e.g. `outcome="bundle"`).
func metricValue(t *testing.T, exposition, name string, labels ...string) float64 {
	t.Helper()
	var total float64
	found := false
	for line := range strings.SplitSeq(exposition, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		total += v
		found = true
	}
	if !found {
		return 0
	}
	return total
}

func TestMetricsMoveWithSavePeekAndDequeue(t *testing.T) {
	h := startHTTPHub(t)
	scrape := func() string {
		t.Helper()
		r := h.do(t, http.MethodGet, "/metrics", "", nil).want(t, http.StatusOK)
		return string(r.body)
	}
	counters := []struct {
		name   string
		labels []string
		delta  float64
	}{
		{"messagehub_notifications_saved_total", nil, 3},
		{"messagehub_notifications_duplicates_total", nil, 1},
		{"messagehub_peeks_total", []string{`outcome="bundle"`}, 2},
		{"messagehub_peeks_total", []string{`outcome="empty"`}, 1},
		{"messagehub_bundles_peeked_total", nil, 1},
		{"messagehub_bundle_notifications_sum", nil, 3},
		{"messagehub_bundle_weight_sum", nil, 3},
		{"messagehub_bundles_dequeued_total", nil, 1},
		{"messagehub_notifications_dequeued_total", nil, 3},
		{"messagehub_store_operation_duration_seconds_count", []string{`operation="acknowledge"`}, 1},
		{"messagehub_store_operation_duration_seconds_count", []string{`operation="create_bundle"`}, 1},
	}
	before := scrape()

	recipient := newID()
	ns := []*messagehubv1.DataAvailable{
		notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries"),
		notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries"),
		notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries"),
	}
	// Over gRPC and over HTTP: both are counted.
	save(t, h.hub, ns...)
	h.do(t, http.MethodPost, "/v1/notifications", "", saveRequest(ns[0])).want(t, http.StatusOK)
	b := peek(t, h.hub, recipient, messagehubv1.PeekGroup_PEEK_GROUP_ALL, "")
	h.do(t, http.MethodGet, "/v1/peek?recipient="+recipient, "", nil).bundle(t)
	dequeue(t, h.hub, recipient, b.GetId())
	h.do(t, http.MethodGet, "/v1/peek?recipient="+recipient, "", nil).want(t, http.StatusNoContent)

	after := scrape()
	for _, c := range counters {
		got := metricValue(t, after, c.name, c.labels...) - metricValue(t, before, c.name, c.labels...)
		if got != c.delta {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, got, c.delta)
		}
	}
	for _, op := range []string{"commit_saves", "load_recipient", "read_drawer"} {
		label := `operation="` + op + `"`
		if metricValue(t, after, "messagehub_store_operation_duration_seconds_count", label) <=
			metricValue(t, before, "messagehub_store_operation_duration_seconds_count", label) {
			t.Errorf("no %s store operation was timed", op)
		}
	}
	// The otelgrpc and otelhttp instruments are there too.
	for _, name := range []string{"rpc_server_call_duration_seconds_count", "http_server_request_duration_seconds_count"} {
		if metricValue(t, after, name) == 0 {
			t.Errorf("/metrics has no %s:\n%s", name, grepLines(after, "rpc_|http_"))
		}
	}
}

func grepLines(s, re string) string {
	rx := regexp.MustCompile(re)
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if rx.MatchString(line) && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// A client that sends its body slowly is cut off by the read timeout rather
// than holding a connection (and a goroutine) forever.
func TestASlowBodyIsCutOffByTheReadTimeout(t *testing.T) {
	h := startHTTPHub(t, "--http-read-timeout", "1s")
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_, err = fmt.Fprintf(conn, "POST /v1/notifications HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"notif")
	if err != nil {
		t.Fatal(err)
	}
	// Nothing more is sent. The server must answer or close by itself; the
	// deadline only keeps a broken server from hanging the test.
	if err := conn.SetReadDeadline(time.Now().Add(callTimeout)); err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(conn)
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		t.Fatalf("the connection was still open after %s: the slow body was never cut off", callTimeout)
	}
}

func TestVersionNamesTheCommitItWasBuiltFrom(t *testing.T) {
	out, err := exec.Command(binary, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("--version: %v\n%s", err, out)
	}
	// What Go stamped into the binary: the commit when built in a checkout
	// with VCS stamping, else nothing, and then it says it does not know.
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	commit := "commit unknown"
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			commit = "commit " + s.Value
		}
	}
	for _, want := range []string{"messagehub ", commit, info.GoVersion} {
		if !strings.Contains(string(out), want) {
			t.Errorf("--version does not say %q:\n%s", want, out)
		}
	}
}

// /metrics can move to a listener of its own, leaving the public HTTP port
// without it; build info is among the metrics.
func TestMetricsOnTheirOwnListener(t *testing.T) {
	h := startHTTPHub(t, "--metrics-addr", "127.0.0.1:0")
	h.do(t, http.MethodGet, "/metrics", "", nil).want(t, http.StatusNotFound)
	m := regexp.MustCompile(`"metrics_addr":"([^"]+)"`).FindStringSubmatch(h.log())
	if m == nil {
		t.Fatalf("no metrics_addr in the listening line:\n%s", h.log())
	}
	resp, err := h.web.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !regexp.MustCompile(`(?m)^messagehub_build_info\{.*version=.*\} 1$`).Match(body) {
		t.Fatalf("metrics listener: %d without messagehub_build_info:\n%.2000s", resp.StatusCode, body)
	}
}

// Every line the hub logs is JSON, also what the libraries under it say:
// requests whose headers grpc-gateway cannot forward (a value that is not
// ASCII, a name of metadata the gateway sets itself), which anyone may send
// to /healthz without a token, make it log a line each. Those are the
// client's doing: never at ERROR.
func TestHeadersTheGatewayCannotForwardAreLoggedAsJSONBelowError(t *testing.T) {
	h := startHTTPHub(t, "--log-level", "debug")
	for _, header := range [][2]string{
		{"User-Agent", "caf\xe9"},
		{"Grpc-Metadata-Note", "\xff"},
		{"Grpc-Metadata-X-Forwarded-For", "10.0.0.1"},
	} {
		req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, h.base+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(header[0], header[1])
		resp, err := h.web.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d", header[0], resp.StatusCode)
		}
	}
	// Once the hub has exited, everything it logged has been read.
	if _, err := h.terminate(t); err != nil {
		t.Fatal(err)
	}
	said := 0
	for line := range strings.SplitSeq(strings.TrimSpace(h.log()), "\n") {
		var l struct {
			Level, Component string
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Errorf("a line that is not JSON: %q", line)
		} else if l.Level == "ERROR" {
			t.Errorf("a client's headers logged at ERROR: %s", line)
		}
		if l.Component == "grpc" && strings.Contains(line, "skipping") {
			said++
		}
	}
	if said != 3 {
		t.Errorf("%d lines say which header was not forwarded, want 3:\n%s", said, h.log())
	}
}
