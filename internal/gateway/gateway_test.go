package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/test/bufconn"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/console"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/gateway"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/internal/store/pebble"
	"github.com/energydatahub/messagehub/test/hubtest"
)

// stack is the gateway in front of the real gRPC server, repository and
// embedded store, served on loopback.
type stack struct {
	url   string
	repo  *hub.Hub
	saves atomic.Int32 // Save calls that reached the gRPC server
}

func newStack(t *testing.T, opts ...gateway.Option) *stack {
	t.Helper()
	return newStackWith(t, nil, opts...)
}

// newStackWith is newStack with options of the gRPC server.
func newStackWith(t *testing.T, serverOpts []server.Option, opts ...gateway.Option) *stack {
	t.Helper()
	return newStackServing(t, serverOpts, nil, opts...)
}

// newStackServing is newStackWith whose HTTP server configure sets up
// before it starts (nil: as httptest makes it).
func newStackServing(t *testing.T, serverOpts []server.Option, configure func(*httptest.Server), opts ...gateway.Option) *stack {
	t.Helper()
	store, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{repo: hub.New(store, hub.Options{}, nil)}
	t.Cleanup(func() { s.repo.Close(); _ = store.Close() })
	srv, hs := server.NewGRPCServer(s.repo, slog.New(slog.DiscardHandler), append(serverOpts, server.WithStatsHandler(countSaves{&s.saves}))...)
	server.SetServing(hs, true)
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///in-process", append(gateway.InProcessDialOptions(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// As the hub dials it (internal/app): the largest bundle is over
		// gRPC's default of 4 MiB.
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(server.MaxRecvMsgSize), grpc.MaxCallRecvMsgSize(server.MaxSendMsgSize)),
	)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	s.url = hubtest.Front(t, conn, configure, opts...)
	return s
}

// errorBody is the gateway's JSON error shape.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// answer is a response, read and closed.
type answer struct {
	StatusCode int
	Header     http.Header
}

func call(t *testing.T, req *http.Request) (answer, errorBody) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var e errorBody
	if data, _ := io.ReadAll(resp.Body); resp.StatusCode >= 400 {
		if err := json.Unmarshal(data, &e); err != nil {
			t.Fatalf("%d with a body that is not the JSON error shape: %q", resp.StatusCode, data)
		}
	}
	return answer{resp.StatusCode, resp.Header}, e
}

func newRequest(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func saveJSON(recipient, extra string) string {
	return fmt.Sprintf(`{"notifications":[{"id":%q,"recipient":%q,"origin":"DOMAIN_CHARGES","contentType":"c","weight":1%s}]}`,
		uuid.NewString(), recipient, extra)
}

func (s *stack) nothingPending(t *testing.T, recipient string) {
	t.Helper()
	b, err := s.repo.Peek(t.Context(), recipient, domain.GroupAll, "")
	if err != nil || b != nil {
		t.Fatalf("the refused request changed something: %v, %v", b, err)
	}
}

func TestUnknownFieldsAndEnumNamesAreRefusedByName(t *testing.T) {
	s := newStack(t)
	recipient := uuid.NewString()
	for name, tc := range map[string]struct{ body, mentions string }{
		"a misspelt field":          {saveJSON(recipient, `,"supportBundling":true`), `"supportBundling"`},
		"an unknown enum name":      {strings.Replace(saveJSON(recipient, ""), "DOMAIN_CHARGES", "DOMAIN_WEATHER", 1), `DOMAIN_WEATHER`},
		"an unknown top field":      {`{"notification":[]}`, `"notification"`},
		"a field of the wrong type": {saveJSON(recipient, `,"supportsBundling":"yes"`), `supportsBundling`},
	} {
		resp, e := call(t, newRequest(t, http.MethodPost, s.url+"/v1/notifications", strings.NewReader(tc.body)))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Message, tc.mentions) {
			t.Errorf("%s: %d %q; want 400 naming %s", name, resp.StatusCode, e.Message, tc.mentions)
		}
	}
	s.nothingPending(t, recipient)
	if resp, _ := call(t, newRequest(t, http.MethodPost, s.url+"/v1/notifications", strings.NewReader(saveJSON(recipient, `,"supportsBundling":true`)))); resp.StatusCode != http.StatusOK {
		t.Fatalf("a correct save: %d", resp.StatusCode)
	}
}

func TestUnknownQueryParametersAreRefusedByName(t *testing.T) {
	s := newStack(t)
	recipient := uuid.NewString()
	if resp, _ := call(t, newRequest(t, http.MethodPost, s.url+"/v1/notifications", strings.NewReader(saveJSON(recipient, "")))); resp.StatusCode != http.StatusOK {
		t.Fatalf("save: %d", resp.StatusCode)
	}
	// The notification is of the charges' group: a misspelt group parameter
	// ignored would peek it from every group.
	for _, path := range []string{
		"/v1/peek?recipient=" + recipient + "&grop=PEEK_GROUP_TIME_SERIES",
		"/v1/peek/timeseries?recipient=" + recipient + "&bundleid=" + uuid.NewString(),
		"/v1/peek/content?recipient=" + recipient + "&grop=PEEK_GROUP_TIME_SERIES",
		"/v1/dequeue/" + uuid.NewString() + "?recipient=" + recipient + "&force=true",
	} {
		method := http.MethodGet
		if strings.HasPrefix(path, "/v1/dequeue/") {
			method = http.MethodDelete
		}
		resp, e := call(t, newRequest(t, method, s.url+path, nil))
		bad := path[strings.LastIndex(path, "&")+1 : strings.LastIndex(path, "=")]
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Message, `"`+bad+`"`) {
			t.Errorf("%s %s: %d %q; want 400 naming %q", method, path, resp.StatusCode, e.Message, bad)
		}
	}
	// Both spellings of a field are known.
	for _, param := range []string{"bundleId", "bundle_id"} {
		path := "/v1/peek?recipient=" + recipient + "&group=PEEK_GROUP_TIME_SERIES&" + param + "=" + uuid.NewString()
		if resp, e := call(t, newRequest(t, http.MethodGet, s.url+path, nil)); resp.StatusCode != http.StatusNoContent {
			t.Errorf("%s: %d %q, want 204", path, resp.StatusCode, e.Message)
		}
	}
}

// A path or query whose %-escapes decode to bytes that are not UTF-8 is
// the client's error: 400 saying so, never 500 (gRPC refuses to send such
// a string in a request), and nothing is done.
func TestAPathOrQueryThatIsNotUTF8IsRefused(t *testing.T) {
	s := newStack(t)
	recipient := uuid.NewString()
	if resp, _ := call(t, newRequest(t, http.MethodPost, s.url+"/v1/notifications", strings.NewReader(saveJSON(recipient, "")))); resp.StatusCode != http.StatusOK {
		t.Fatalf("save: %d", resp.StatusCode)
	}
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/v1/peek?recipient=" + recipient + "&bundleId=%FF"},
		{http.MethodGet, "/v1/peek/masterdata?recipient=%C3%28"},
		{http.MethodGet, "/v1/peek/content?recipient=" + recipient + "&bundleId=%FF"},
		{http.MethodDelete, "/v1/dequeue/%FF?recipient=" + recipient},
		{http.MethodGet, "/admin/v1/recipients/%FF/backlog"},
		{http.MethodGet, "/admin/v1/recipients?pageToken=%FF"},
		{http.MethodGet, "/healthz?service=%FF"},
	} {
		resp, e := call(t, newRequest(t, tc.method, s.url+tc.path, nil))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Message, "UTF-8") {
			t.Errorf("%s %s: %d %q; want 400 saying it is not UTF-8", tc.method, tc.path, resp.StatusCode, e.Message)
		}
	}
	if b, err := s.repo.Backlog(t.Context(), recipient); err != nil || len(b.Pending) > 0 {
		t.Fatalf("the refused peeks made bundles pending: %v, %v", b.Pending, err)
	}
}

// A query with a malformed %-escape is refused (400) on every peek route,
// as GET /v1/peek without a wait refuses it, never read without the
// parameter it spoils: a peek of one group whose group is dropped would
// peek every group, and cut a bundle of another.
func TestAQueryWithABadEscapeIsRefusedOnEveryPeekRoute(t *testing.T) {
	s := newStack(t)
	recipient := uuid.NewString()
	if resp, _ := call(t, newRequest(t, http.MethodPost, s.url+"/v1/notifications", strings.NewReader(saveJSON(recipient, "")))); resp.StatusCode != http.StatusOK {
		t.Fatalf("save: %d", resp.StatusCode)
	}
	// The notification is of the charges, of the master data's group: the
	// time series' peeks do not take it, and a master data peek whose
	// bundle id is dropped would cut its bundle under an id of the hub's.
	for _, path := range []string{
		"/v1/peek?recipient=" + recipient + "&group=PEEK_GROUP_TIME_SERIES%zz",
		"/v1/peek?recipient=" + recipient + "&group=PEEK_GROUP_TIME_SERIES%zz&wait=0s",
		"/v1/peek/content?recipient=" + recipient + "&group=PEEK_GROUP_TIME_SERIES%zz",
		"/v1/peek/masterdata?recipient=" + recipient + "&bundleId=%zz",
		"/v1/peek/masterdata?recipient=" + recipient + "&bundleId=%zz&wait=0s",
	} {
		if resp, e := call(t, newRequest(t, http.MethodGet, s.url+path, nil)); resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Message, "%zz") {
			t.Errorf("GET %s: %d %q; want 400 naming the bad escape", path, resp.StatusCode, e.Message)
		}
	}
	if b, err := s.repo.Backlog(t.Context(), recipient); err != nil || len(b.Pending) > 0 {
		t.Fatalf("the refused peeks made bundles pending: %v, %v", b.Pending, err)
	}
}

// GET /v1/peek/content takes the same query as GET /v1/peek: what one
// refuses (a field given twice, under one name or both) the other refuses,
// and what one takes (either spelling of a field, a group by its number)
// the other takes.
func TestAContentPeekTakesTheQueryOfAPeek(t *testing.T) {
	s := newStack(t)
	r, other, id := uuid.NewString(), uuid.NewString(), uuid.NewString()
	for _, query := range []string{
		"recipient=" + r,
		"recipient=" + r + "&bundleId=" + id,
		"recipient=" + r + "&bundle_id=" + id,
		"recipient=" + r + "&group=PEEK_GROUP_TIME_SERIES",
		"recipient=" + r + "&group=2",
		"recipient=" + r + "&recipient=" + other,
		"recipient=" + r + "&bundleId=" + id + "&bundleId=" + uuid.NewString(),
		"recipient=" + r + "&bundleId=" + id + "&bundle_id=" + uuid.NewString(),
		"recipient=" + r + "&group=PEEK_GROUP_WEATHER",
		"recipient=" + r + "&wait=1ms",
	} {
		peek, _ := call(t, newRequest(t, http.MethodGet, s.url+"/v1/peek?"+query, nil))
		content, e := call(t, newRequest(t, http.MethodGet, s.url+"/v1/peek/content?"+query, nil))
		if peek.StatusCode != content.StatusCode {
			t.Errorf("%s: /v1/peek %d, /v1/peek/content %d %q; want the same", query, peek.StatusCode, content.StatusCode, e.Message)
		}
	}
}

func TestAWrongMethodOnAKnownRouteIs405(t *testing.T) {
	s := newStack(t)
	for _, tc := range []struct{ method, path, allow string }{
		{http.MethodPost, "/v1/peek", "GET, HEAD"},
		{http.MethodDelete, "/v1/peek/timeseries", "GET, HEAD"},
		{http.MethodGet, "/v1/notifications", "POST"},
		{http.MethodPost, "/v1/dequeue/" + uuid.NewString(), "DELETE"},
		{http.MethodPut, "/openapi.json", "GET, HEAD"},
	} {
		resp, e := call(t, newRequest(t, tc.method, s.url+tc.path, nil))
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != tc.allow || !strings.Contains(e.Message, tc.method) {
			t.Errorf("%s %s: %d, Allow %q, %q; want 405 allowing %s", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), e.Message, tc.allow)
		}
	}
	if resp, _ := call(t, newRequest(t, http.MethodGet, s.url+"/v1/nothing", nil)); resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown route: %d, want 404", resp.StatusCode)
	}
}

// A HEAD of a GET route answers as its GET does, without the body: the 405
// of another method allows HEAD, and load balancers probe /healthz with it.
func TestAHeadOfAGetRouteAnswersAsItsGet(t *testing.T) {
	s := newStack(t)
	recipient := uuid.NewString()
	s.saveOne(t, recipient, domain.OriginCharges)
	for _, path := range []string{"/healthz", "/v1/peek?recipient=" + recipient, "/v1/peek/masterdata?recipient=" + recipient + "&wait=1s",
		"/v1/peek/content?recipient=" + recipient, "/admin/v1/recipients", "/openapi.json"} {
		got, _ := call(t, newRequest(t, http.MethodGet, s.url+path, nil))
		head, err := http.DefaultClient.Do(newRequest(t, http.MethodHead, s.url+path, nil))
		if err != nil {
			t.Fatal(err)
		}
		_ = head.Body.Close()
		if head.StatusCode != got.StatusCode || head.Header.Get(gateway.MessageIDHeader) != got.Header.Get(gateway.MessageIDHeader) {
			t.Errorf("HEAD %s: %d, MessageId %q; GET: %d, MessageId %q", path,
				head.StatusCode, head.Header.Get(gateway.MessageIDHeader), got.StatusCode, got.Header.Get(gateway.MessageIDHeader))
		}
	}
}

// endless is a body of n bytes that never ends in valid JSON, produced as it
// is read.
type endless struct{ left int64 }

func (e *endless) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), e.left)
	for i := range p[:n] {
		p[i] = ' '
	}
	e.left -= n
	return int(n), nil
}

func TestOversizedBodiesAre413AndNeverHeldWhole(t *testing.T) {
	s := newStack(t) // the default limit, just above the gRPC message limit
	const size = 300 << 20
	for name, declare := range map[string]bool{"declared": true, "chunked": false} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		req := newRequest(t, http.MethodPost, s.url+"/v1/notifications", &endless{left: size})
		if declare {
			req.ContentLength = size
		} else {
			req.ContentLength = -1 // chunked: the size shows only while reading
		}
		resp, err := http.DefaultClient.Do(req)
		var status int
		if err == nil {
			status = resp.StatusCode
			_ = resp.Body.Close()
		} else if !errors.Is(err, io.ErrClosedPipe) && !strings.Contains(err.Error(), "connection reset") && !strings.Contains(err.Error(), "broken pipe") {
			t.Fatalf("%s: %v", name, err)
		}
		runtime.ReadMemStats(&after)
		if err == nil && status != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: %d, want 413", name, status)
		}
		// The client and server allocate in this process: a body held whole
		// would allocate more than its 300 MB.
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 150<<20 {
			t.Errorf("%s: %d MB allocated for a refused body", name, grew>>20)
		}
	}
	if n := s.saves.Load(); n != 0 {
		t.Fatalf("%d oversized saves reached the server", n)
	}
}

func TestTheTokenIsCheckedBeforeTheBody(t *testing.T) {
	var checked atomic.Int32
	s := newStack(t, gateway.WithMaxBodyBytes(1<<20), gateway.WithAuthentication(func(_ string, h []string, _ string) error {
		checked.Add(1)
		if len(h) == 1 && h[0] == "Bearer good" {
			return nil
		}
		return fmt.Errorf("%w: no valid token", domain.ErrUnauthenticated)
	}))
	recipient := uuid.NewString()
	big := newRequest(t, http.MethodPost, s.url+"/v1/notifications", &endless{left: 10 << 20})
	big.ContentLength = 10 << 20
	if resp, _ := call(t, big); resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("an oversized body without token: %d; want 401 with a challenge, before its size is looked at", resp.StatusCode)
	}
	tooBig := newRequest(t, http.MethodPost, s.url+"/v1/notifications", &endless{left: 10 << 20})
	tooBig.ContentLength = 10 << 20
	tooBig.Header.Set("Authorization", "Bearer good")
	if resp, _ := call(t, tooBig); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("an oversized body with a token: %d, want 413", resp.StatusCode)
	}
	if checked.Load() != 2 || s.saves.Load() != 0 {
		t.Fatalf("token checked %d times, %d saves reached the server", checked.Load(), s.saves.Load())
	}
	s.nothingPending(t, recipient)
}

// Bodies in flight together are bounded: while one request holds the whole
// budget, another with a body is refused at once with 503 and Retry-After
// (a retryable answer), and requests without a body go on.
func TestBodiesInFlightTogetherAreBounded(t *testing.T) {
	s := newStack(t, gateway.WithMaxBodyBytes(1<<20), gateway.WithMaxBodyMemory(1<<20))
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	// Only keeps a broken gateway from hanging the test.
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// The server says 100 Continue once the handler reads the body: from
	// then on this request holds the whole budget.
	if _, err := fmt.Fprintf(conn, "POST /v1/notifications HTTP/1.1\r\nHost: hub\r\nContent-Type: application/json\r\n"+
		"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n", 1<<20); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.Contains(line, "100 Continue") {
		t.Fatalf("the body is not being read: %q, %v", line, err)
	}

	recipient := uuid.NewString()
	resp, e := call(t, newRequest(t, http.MethodPost, s.url+"/v1/notifications", strings.NewReader(saveJSON(recipient, ""))))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(e.Message, "in flight") {
		t.Fatalf("a save while the budget is taken: %d, Retry-After %q, %q; want 503 with Retry-After",
			resp.StatusCode, resp.Header.Get("Retry-After"), e.Message)
	}
	if resp, _ := call(t, newRequest(t, http.MethodGet, s.url+"/v1/peek?recipient="+recipient, nil)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("a peek (no body) while the budget is taken: %d, want 204", resp.StatusCode)
	}
	s.nothingPending(t, recipient)
}

// countSaves counts the Save calls that reach the gRPC server.
type countSaves struct{ n *atomic.Int32 }

func (c countSaves) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if info.FullMethodName == messagehubv1.MessageHub_Save_FullMethodName {
		c.n.Add(1)
	}
	return ctx
}
func (countSaves) HandleRPC(context.Context, stats.RPCStats)                         {}
func (countSaves) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (countSaves) HandleConn(context.Context, stats.ConnStats)                       {}

// lines hands each log line to the test as it is written.
type lines chan string

func (l lines) Write(p []byte) (int, error) { l <- string(p); return len(p), nil }

func TestRequestsAreInTheDebugAccessLog(t *testing.T) {
	logged := make(lines, 1)
	s := newStack(t, gateway.WithAccessLog(slog.New(slog.NewJSONHandler(logged, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	recipient := uuid.NewString()
	if resp, _ := call(t, newRequest(t, http.MethodGet, s.url+"/v1/peek?recipient="+recipient, nil)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("peek: %d", resp.StatusCode)
	}
	line := <-logged // written once the response is
	for _, want := range []string{`"msg":"http request"`, `"method":"GET"`, `"path":"/v1/peek"`, `"status":204`} {
		if !strings.Contains(line, want) {
			t.Errorf("access log lacks %s: %s", want, line)
		}
	}
}

// A body is one JSON document: a second document, or anything but white
// space after the first, is refused with 400 and nothing of it is stored,
// rather than the first document being saved and the rest ignored.
func TestABodyWithMoreThanOneDocumentIsRefused(t *testing.T) {
	s := newStack(t)
	recipient := uuid.NewString()
	for name, body := range map[string]string{
		"two documents":                saveJSON(recipient, "") + saveJSON(recipient, ""),
		"two documents on two lines":   saveJSON(recipient, "") + "\n" + saveJSON(recipient, ""),
		"a document and garbage":       saveJSON(recipient, "") + "garbage",
		"a document and a brace":       saveJSON(recipient, "") + "}",
		"a document and a bracket":     saveJSON(recipient, "") + " ]",
		"a document, spaces and a nul": saveJSON(recipient, "") + " \t\r\n\x00",
	} {
		resp, e := call(t, newRequest(t, http.MethodPost, s.url+"/v1/notifications", strings.NewReader(body)))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Message, "after the JSON document") {
			t.Errorf("%s: %d %q; want 400 saying what follows the document", name, resp.StatusCode, e.Message)
		}
	}
	if n := s.saves.Load(); n != 0 {
		t.Errorf("%d refused bodies reached the server", n)
	}
	s.nothingPending(t, recipient)
	resp, _ := call(t, newRequest(t, http.MethodPost, s.url+"/v1/notifications", strings.NewReader(" "+saveJSON(recipient, "")+" \r\n\t ")))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a document between white space: %d, want 200", resp.StatusCode)
	}
}

// A Save of millions of empty notifications ({} is three bytes) is refused
// before it is decoded into messages: its count is checked on the JSON,
// stopping at the limit, so the hub allocates about the body, not the
// gigabytes the messages would take.
func TestASaveOfManyEmptyNotificationsIsRefusedBeforeItIsDecoded(t *testing.T) {
	s := newStack(t)
	const n = 4 << 20 // 4 Mi notifications, 12 MiB of JSON
	body := bytes.NewBufferString(`{"notifications":[{}`)
	body.WriteString(strings.Repeat(`,{}`, n-1))
	body.WriteString(`]}`)
	size := body.Len()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	resp, e := call(t, newRequest(t, http.MethodPost, s.url+"/v1/notifications", body))
	runtime.ReadMemStats(&after)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Message, "at most 10000 notifications") {
		t.Fatalf("%d %q; want 400 naming the limit", resp.StatusCode, e.Message)
	}
	// The body is held about three times (read, buffered, kept raw);
	// decoding the messages took 200 bytes and more a notification.
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > uint64(8*size) {
		t.Fatalf("refusing a body of %d MiB allocated %d MiB", size>>20, allocated>>20)
	}
	if n := s.saves.Load(); n != 0 {
		t.Errorf("%d refused bodies reached the server", n)
	}
}

// The routes named in New are the only ones served: a path that names a
// route with an escaped slash (%2F) in place of one of its slashes is no
// route of the gateway, whose checks (the token before the body, the body's
// bound, the budgets of peeks) are those of its routes, and grpc-gateway,
// which matches the path unescaped, must not serve it past them.
func TestAPathWithAnEscapedSlashIsNoRoute(t *testing.T) {
	s := newStack(t, gateway.WithMaxBodyBytes(1<<20), gateway.WithAuthentication(func(_ string, h []string, _ string) error {
		if len(h) == 1 && h[0] == "Bearer good" {
			return nil
		}
		return fmt.Errorf("%w: no valid token", domain.ErrUnauthenticated)
	}))
	recipient := uuid.NewString()
	withToken := func(req *http.Request) *http.Request {
		req.Header.Set("Authorization", "Bearer good")
		return req
	}
	// Over the body limit, without a token.
	big := newRequest(t, http.MethodPost, s.url+"/v1%2Fnotifications", &endless{left: 10 << 20})
	big.ContentLength = -1 // chunked
	for name, req := range map[string]*http.Request{
		"a save":                 withToken(newRequest(t, http.MethodPost, s.url+"/v1%2Fnotifications", strings.NewReader(saveJSON(recipient, "")))),
		"an unbounded body":      big,
		"a peek":                 withToken(newRequest(t, http.MethodGet, s.url+"/v1%2Fpeek?recipient="+recipient, nil)),
		"a release (admin verb)": withToken(newRequest(t, http.MethodPost, s.url+"/admin/v1/recipients/"+recipient+"%2Fbundles%2F"+uuid.NewString()+":release", strings.NewReader(`{"reason":"x"}`))),
	} {
		if resp, e := call(t, req); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d %q, want 404", name, resp.StatusCode, e.Message)
		}
	}
	if n := s.saves.Load(); n != 0 {
		t.Fatalf("%d saves reached the server", n)
	}
	s.nothingPending(t, recipient)
}

// Every answer of the API is one caller's data (a bundle, a backlog, an
// audit page) or an error about it: no cache, a browser's or a shared
// one, may keep it.
func TestAnswersOfTheAPIAreNotStored(t *testing.T) {
	s := newStack(t)
	recipient := uuid.NewString()
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/notifications", saveJSON(recipient, "")},
		{http.MethodGet, "/v1/peek?recipient=" + recipient, ""},
		{http.MethodGet, "/v1/peek/content?recipient=" + uuid.NewString(), ""},
		{http.MethodDelete, "/v1/dequeue/" + uuid.NewString() + "?recipient=" + recipient, ""},
		{http.MethodGet, "/admin/v1/recipients/" + recipient + "/backlog", ""},
		{http.MethodGet, "/admin/v1/recipients", ""},
		{http.MethodGet, "/admin/v1/recipients/not-a-uuid/backlog", ""},
	} {
		var body io.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		req := newRequest(t, tc.method, s.url+tc.path, body)
		if tc.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, _ := call(t, req)
		if got := resp.Header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s %s: %d with Cache-Control %q, want no-store", tc.method, tc.path, resp.StatusCode, got)
		}
	}
}

// Every answer under the console's path carries its headers, a method it
// does not serve (405) included, as docs/operations.md says.
func TestEveryConsoleAnswerCarriesItsSecurityHeaders(t *testing.T) {
	s := newStack(t)
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, console.Path}, {http.MethodGet, console.Path + "/nosuch.js"},
		{http.MethodPost, console.Path}, {http.MethodDelete, console.Path + "/"}, {http.MethodPut, console.Path + "/app.js"},
	} {
		resp, err := http.DefaultClient.Do(newRequest(t, c.method, s.url+c.path, nil))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if got := resp.Header.Get("Content-Security-Policy"); got != console.ContentSecurityPolicy || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s: %d with Content-Security-Policy %q, X-Content-Type-Options %q; want the console's",
				c.method, c.path, resp.StatusCode, got, resp.Header.Get("X-Content-Type-Options"))
		}
	}
}
