package cosmos

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// OpStats counts the requests of one kind of operation.
type OpStats struct {
	Requests      int64
	RequestBytes  int64
	ResponseBytes int64
	RequestCharge float64 // sum of x-ms-request-charge (the test server always says 1)
	Throttled     int64   // 429 answers
}

// Meter wraps the SDK's transport and counts every HTTP request by
// operation, with its bytes and request charge. Counting inside the process
// cannot be bypassed by the endpoint the account advertises.
type Meter struct {
	next policy.Transporter

	mu  sync.Mutex
	ops map[string]OpStats
	// observe, when set, is told about every request (for metrics).
	observe RequestObserver
}

// RequestObserver is told about every request: its operation, the request
// charge reported and the status code (0 when no answer came).
type RequestObserver func(ctx context.Context, op string, charge float64, status int)

// NewMeter counts requests sent through next and tells observe (may be nil).
func NewMeter(next policy.Transporter, observe RequestObserver) *Meter {
	return &Meter{next: next, ops: make(map[string]OpStats), observe: observe}
}

// Do sends the request and records it.
func (m *Meter) Do(req *http.Request) (*http.Response, error) {
	op := Classify(req)
	var reqBytes int64
	if req.ContentLength > 0 {
		reqBytes = req.ContentLength
	}
	resp, err := m.next.Do(req)
	var stats OpStats
	stats.Requests, stats.RequestBytes = 1, reqBytes
	if resp != nil {
		stats.RequestCharge, _ = strconv.ParseFloat(resp.Header.Get("x-ms-request-charge"), 64)
		if resp.StatusCode == http.StatusTooManyRequests {
			stats.Throttled = 1
		}
		if resp.Body != nil {
			resp.Body = &countingBody{ReadCloser: resp.Body, add: func(n int64) { m.add(op, OpStats{ResponseBytes: n}) }}
		}
	}
	m.add(op, stats)
	if m.observe != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		m.observe(req.Context(), op, stats.RequestCharge, status)
	}
	return resp, err
}

func (m *Meter) add(op string, d OpStats) {
	m.mu.Lock()
	s := m.ops[op]
	s.Requests += d.Requests
	s.RequestBytes += d.RequestBytes
	s.ResponseBytes += d.ResponseBytes
	s.RequestCharge += d.RequestCharge
	s.Throttled += d.Throttled
	m.ops[op] = s
	m.mu.Unlock()
}

// Snapshot returns the counts so far by operation.
func (m *Meter) Snapshot() map[string]OpStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]OpStats, len(m.ops))
	for k, v := range m.ops {
		out[k] = v
	}
	return out
}

// Operation names used by Classify.
const (
	OpRead     = "read"
	OpCreate   = "create"
	OpReplace  = "replace"
	OpUpsert   = "upsert"
	OpDelete   = "delete"
	OpPatch    = "patch"
	OpQuery    = "query"
	OpBatch    = "batch"
	OpMetadata = "metadata" // account, database, container and partition-range requests
)

// Classify names the Cosmos DB operation an HTTP request performs.
func Classify(req *http.Request) string {
	path := strings.Trim(req.URL.Path, "/")
	parts := strings.Split(path, "/")
	onDocs := len(parts) >= 5 && parts[4] == "docs"
	switch {
	case !onDocs:
		return OpMetadata
	case strings.EqualFold(req.Header.Get("x-ms-cosmos-is-batch-request"), "true"):
		return OpBatch
	case strings.EqualFold(req.Header.Get("x-ms-documentdb-isquery"), "true"),
		strings.HasPrefix(req.Header.Get("Content-Type"), "application/query+json"):
		return OpQuery
	}
	switch req.Method {
	case http.MethodGet:
		return OpRead
	case http.MethodPost:
		if strings.EqualFold(req.Header.Get("x-ms-documentdb-is-upsert"), "true") {
			return OpUpsert
		}
		return OpCreate
	case http.MethodPut:
		return OpReplace
	case http.MethodDelete:
		return OpDelete
	case http.MethodPatch:
		return OpPatch
	}
	return strings.ToLower(req.Method)
}

type countingBody struct {
	io.ReadCloser
	add func(int64)
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	if n > 0 {
		c.add(int64(n))
	}
	return n, err
}
