package cosmostest

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// NewHTTPClient returns a plain-HTTP client suitable for the test server (bounded dial and
// round-trip time, keep-alive). Use it as the innermost policy.Transporter.
func NewHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        64,
			MaxIdleConnsPerHost: 32,
			IdleConnTimeout:     30 * time.Second,
		},
		Timeout: 30 * time.Second,
	}
}

// ClientOptions returns azcosmos client options for tests: the given transport (a fresh
// NewHTTPClient when nil), bounded retries with short delays so a misbehaving test fails
// in seconds rather than hanging, and no telemetry.
func ClientOptions(transport policy.Transporter) *azcosmos.ClientOptions {
	if transport == nil {
		transport = NewHTTPClient()
	}
	return &azcosmos.ClientOptions{
		ClientOptions: azcore.ClientOptions{
			Transport: transport,
			Retry: policy.RetryOptions{
				MaxRetries:    2,
				TryTimeout:    15 * time.Second,
				RetryDelay:    20 * time.Millisecond,
				MaxRetryDelay: 200 * time.Millisecond,
			},
			Telemetry: policy.TelemetryOptions{Disabled: true},
		},
	}
}

// NewClient returns a key-authenticated azcosmos client for srv with ClientOptions(nil),
// closed at t.Cleanup.
func NewClient(t testing.TB, srv *Server) *azcosmos.Client {
	t.Helper()
	return NewClientWithOptions(t, srv, ClientOptions(nil))
}

// NewClientWithOptions is NewClient with explicit options (e.g. ClientOptions(counter)).
func NewClientWithOptions(t testing.TB, srv *Server, opts *azcosmos.ClientOptions) *azcosmos.Client {
	t.Helper()
	cred, err := azcosmos.NewKeyCredential(srv.Key)
	if err != nil {
		t.Fatalf("cosmostest: key credential: %v", err)
	}
	c, err := azcosmos.NewClientWithKey(srv.Endpoint, cred, opts)
	if err != nil {
		t.Fatalf("cosmostest: new client: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// Call is one HTTP request seen by a CountingTransport.
type Call struct {
	Op        string // classified operation, e.g. "ReadItem", "QueryItems", "Batch" (see Classify)
	Method    string
	Scheme    string
	Host      string // host:port the request actually went to
	Path      string
	Status    int // 0 when the transport returned an error
	ReqBytes  int64
	RespBytes int64
}

// CountingTransport is a policy.Transporter that counts requests and body bytes, to be
// installed as azcosmos.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: ...}}.
// It sits below the SDK's retry policies, so every attempt (retries included) and the SDK's
// own metadata requests (account, container, partition key ranges) are counted.
// Fault, when set, may answer a request instead of the server (for fault injection).
type CountingTransport struct {
	Next  policy.Transporter
	Fault func(req *http.Request) (*http.Response, error)

	mu    sync.Mutex
	calls []Call
}

// NewCountingTransport wraps next (a fresh NewHTTPClient when nil).
func NewCountingTransport(next policy.Transporter) *CountingTransport {
	if next == nil {
		next = NewHTTPClient()
	}
	return &CountingTransport{Next: next}
}

// Do implements policy.Transporter.
func (c *CountingTransport) Do(req *http.Request) (*http.Response, error) {
	call := Call{
		Op:       Classify(req),
		Method:   req.Method,
		Scheme:   req.URL.Scheme,
		Host:     req.URL.Host,
		Path:     req.URL.EscapedPath(),
		ReqBytes: max(req.ContentLength, 0),
	}
	var resp *http.Response
	var err error
	if c.Fault != nil {
		resp, err = c.Fault(req)
	}
	if resp == nil && err == nil {
		resp, err = c.Next.Do(req)
	}
	if err == nil && resp != nil {
		call.Status = resp.StatusCode
		if resp.Body != nil {
			body, rerr := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(body))
			call.RespBytes = int64(len(body))
			if rerr != nil {
				err = rerr
				resp = nil
			}
		}
	}
	c.mu.Lock()
	c.calls = append(c.calls, call)
	c.mu.Unlock()
	return resp, err
}

// Reset forgets the calls recorded so far.
func (c *CountingTransport) Reset() {
	c.mu.Lock()
	c.calls = nil
	c.mu.Unlock()
}

// Calls returns a copy of the calls recorded since the last Reset.
func (c *CountingTransport) Calls() []Call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Call(nil), c.calls...)
}

// Total is the number of requests since the last Reset.
func (c *CountingTransport) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}

// ByOp counts the requests since the last Reset by Op.
func (c *CountingTransport) ByOp() map[string]int {
	m := map[string]int{}
	for _, call := range c.Calls() {
		m[call.Op]++
	}
	return m
}

// Summary formats the calls since the last Reset as "N requests: Op×n (METHOD path status) ...",
// for t.Logf.
func (c *CountingTransport) Summary() string {
	calls := c.Calls()
	var req, resp int64
	parts := make([]string, 0, len(calls))
	for _, k := range calls {
		req += k.ReqBytes
		resp += k.RespBytes
		parts = append(parts, fmt.Sprintf("%s(%s %s → %d)", k.Op, k.Method, k.Path, k.Status))
	}
	return fmt.Sprintf("%d request(s), %d B sent, %d B received: %s", len(calls), req, resp, strings.Join(parts, ", "))
}

// OpCounts formats ByOp deterministically, e.g. "QueryItems=2 ReadAccount=1".
func (c *CountingTransport) OpCounts() string {
	m := c.ByOp()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// Classify names the Cosmos operation of an SDK request from its method, path and headers:
// ReadAccount, CreateDatabase, ReadDatabase, DeleteDatabase, CreateContainer, ReadContainer,
// DeleteContainer, ReadPartitionKeyRanges, CreateItem, UpsertItem, ReadItem, ReplaceItem,
// PatchItem, DeleteItem, QueryItems, Batch, ReadFeed (change feed / read feed), Other.
func Classify(req *http.Request) string {
	if op := classify(req); op != "" {
		return op
	}
	return "Other"
}

func classify(req *http.Request) string {
	segs := strings.FieldsFunc(req.URL.Path, func(r rune) bool { return r == '/' })
	h := req.Header
	switch {
	case len(segs) == 0:
		return "ReadAccount"
	case len(segs) == 1 && segs[0] == "dbs":
		if req.Method == http.MethodPost {
			if h.Get("x-ms-documentdb-query") != "" {
				return "QueryDatabases"
			}
			return "CreateDatabase"
		}
	case len(segs) == 2 && segs[0] == "dbs":
		return map[string]string{http.MethodGet: "ReadDatabase", http.MethodDelete: "DeleteDatabase"}[req.Method]
	case len(segs) == 3 && segs[2] == "colls":
		if req.Method == http.MethodPost {
			if h.Get("x-ms-documentdb-query") != "" {
				return "QueryContainers"
			}
			return "CreateContainer"
		}
	case len(segs) == 4 && segs[2] == "colls":
		return map[string]string{http.MethodGet: "ReadContainer", http.MethodPut: "ReplaceContainer", http.MethodDelete: "DeleteContainer"}[req.Method]
	case len(segs) == 5 && segs[4] == "pkranges":
		return "ReadPartitionKeyRanges"
	case len(segs) == 5 && segs[4] == "docs":
		switch {
		case req.Method == http.MethodGet:
			return "ReadFeed"
		case h.Get("x-ms-documentdb-query") != "":
			return "QueryItems"
		case h.Get("x-ms-cosmos-is-batch-request") != "":
			return "Batch"
		case strings.EqualFold(h.Get("x-ms-documentdb-is-upsert"), "true"):
			return "UpsertItem"
		case req.Method == http.MethodPost:
			return "CreateItem"
		}
	case len(segs) == 6 && segs[4] == "docs":
		return map[string]string{
			http.MethodGet: "ReadItem", http.MethodPut: "ReplaceItem",
			http.MethodPatch: "PatchItem", http.MethodDelete: "DeleteItem",
		}[req.Method]
	}
	return ""
}
