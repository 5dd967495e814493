// Package gateway is MessageHub's HTTP face for market actors: grpc-gateway
// routes (generated from proto/messagehub/v1/messagehub_http.yaml) in front of
// a connection to the gRPC server, plus /openapi.json, /healthz and /metrics,
// the operators' Admin routes under /admin/v1, and their console (static
// pages calling those routes) under /console.
//
// The gateway forwards the Authorization header, and the gRPC server
// authenticates, authorizes and validates every call, so HTTP and gRPC
// callers meet the same rules. With WithAuthentication the gateway also asks,
// before it reads a request's body, whether the token may make the route's
// call at all, so that a caller's body is read only when it may.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/felixge/httpsnoop"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	adminv1gw "github.com/energydatahub/messagehub/gen/gateway/messagehub/admin/v1"
	messagehubv1gw "github.com/energydatahub/messagehub/gen/gateway/messagehub/v1"
	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/gen/openapi"
	"github.com/energydatahub/messagehub/internal/console"
	"github.com/energydatahub/messagehub/internal/server"
)

// MessageIDHeader carries the id of the bundle a Peek returned, spelled as
// the market actors' clients expect it.
const MessageIDHeader = "MessageId"

// peekGroups are the Peek routes per group: GET /v1/peek/<name> is GET
// /v1/peek?group=<value> (an HTTP rule cannot fix a field's value).
var peekGroups = map[string]string{
	"/v1/peek/timeseries":   messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES.String(),
	"/v1/peek/aggregations": messagehubv1.PeekGroup_PEEK_GROUP_AGGREGATIONS.String(),
	"/v1/peek/masterdata":   messagehubv1.PeekGroup_PEEK_GROUP_MASTER_DATA.String(),
}

// DefaultMaxBodyBytes bounds a request body: just above the gRPC server's
// message limit (32 MiB), which a full Save in JSON stays well below.
const DefaultMaxBodyBytes = 33 << 20

// DefaultMaxBodyMemory bounds the bodies all requests together may be
// reading or holding: a body being decoded costs about three times its size.
const DefaultMaxBodyMemory = 128 << 20

// busyRetryAfterSeconds is what a 503 for too much in flight (bodies,
// answers, documents) asks the client to wait.
const busyRetryAfterSeconds = 1

// refuseBusy answers 503 with Retry-After and msg.
func refuseBusy(mux *runtime.ServeMux, w http.ResponseWriter, r *http.Request, msg string) {
	w.Header().Set("Retry-After", strconv.Itoa(busyRetryAfterSeconds))
	writeError(mux, w, r, http.StatusServiceUnavailable, status.Error(codes.Unavailable, msg))
}

// Option configures New.
type Option func(*options)

type options struct {
	maxBodyBytes  int64
	maxBodyMemory int64
	bodies        *semaphore.Weighted
	authenticate  func(method string, authorization []string, client string) error
	accessLog     *slog.Logger

	contentPeeks        int           // documents being answered at once
	contentPeeksPerConn int           // of them on one connection
	contentStall        time.Duration // longest a client may read nothing of a document
}

// WithAccessLog logs every request at debug level on logger.
func WithAccessLog(logger *slog.Logger) Option { return func(o *options) { o.accessLog = logger } }

// refusalLog is where a refusal the gateway answers itself is logged as
// the gRPC server logs its own (server.ToStatus): the access log's logger,
// or nowhere without one.
func (o options) refusalLog() *slog.Logger {
	if o.accessLog == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.accessLog
}

// WithMaxBodyBytes refuses request bodies over n bytes with 413.
func WithMaxBodyBytes(n int64) Option { return func(o *options) { o.maxBodyBytes = n } }

// WithMaxBodyMemory bounds the bytes of request bodies all requests together
// may have in flight; a request whose body does not fit is refused with 503
// and Retry-After. Less than the body limit is raised to it.
func WithMaxBodyMemory(n int64) Option { return func(o *options) { o.maxBodyMemory = n } }

// WithAuthentication checks every API request's Authorization header with
// fn before its body is read: whether it may make the call of method (the
// gRPC method of the request's route; fn is told the client's address too,
// for its log). A refusal is answered as the gRPC server answers it: 401
// for a missing or bad token, 403 for one whose role may not make the call.
func WithAuthentication(fn func(method string, authorization []string, client string) error) Option {
	return func(o *options) { o.authenticate = fn }
}

// New returns the HTTP handler of the gateway. conn reaches the gRPC server
// (MessageHub and health); metrics serves /metrics (nil: /metrics is served
// elsewhere and is not found here).
func New(ctx context.Context, conn grpc.ClientConnInterface, metrics http.Handler, opts ...Option) (http.Handler, error) {
	o := options{
		maxBodyBytes: DefaultMaxBodyBytes, maxBodyMemory: DefaultMaxBodyMemory,
		contentPeeks: DefaultContentPeeks, contentPeeksPerConn: DefaultContentPeeksPerConn, contentStall: DefaultContentStall,
	}
	for _, opt := range opts {
		opt(&o)
	}
	o.bodies = semaphore.NewWeighted(max(o.maxBodyMemory, o.maxBodyBytes))
	mux := runtime.NewServeMux(
		runtime.WithHealthzEndpoint(healthpb.NewHealthClient(conn)),
		runtime.WithForwardResponseOption(peekResponse),
		runtime.WithErrorHandler(errorHandler),
		// Unknown fields, and anything after the body's one document, are
		// refused: a misspelt field must not silently change what is stored.
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{Marshaler: oneDocumentJSON{&runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}}}),
		// So are unknown query parameters.
		runtime.SetQueryParameterParser(&strictQuery{}),
		// No response metadata is worth a Grpc-Metadata-* header.
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
		// The gRPC server logs the HTTP client's address, which only the
		// gateway names: a client's header that would name it is dropped.
		runtime.WithIncomingHeaderMatcher(func(key string) (string, bool) {
			name, ok := runtime.DefaultHeaderMatcher(key)
			return name, ok && !strings.EqualFold(name, server.ForwardedClientKey)
		}),
		runtime.WithMetadata(func(_ context.Context, r *http.Request) metadata.MD {
			return metadata.Pairs(server.ForwardedClientKey, r.RemoteAddr)
		}),
	)
	if err := messagehubv1gw.RegisterMessageHubHandlerClient(ctx, mux, messagehubv1.NewMessageHubClient(conn)); err != nil {
		return nil, fmt.Errorf("register gateway routes: %w", err)
	}
	if err := adminv1gw.RegisterAdminHandlerClient(ctx, mux, adminv1.NewAdminClient(conn)); err != nil {
		return nil, fmt.Errorf("register admin routes: %w", err)
	}
	// api serves a route of the gRPC method named (the one grpc-gateway
	// calls for it) behind its checks.
	api := func(method string) http.Handler { return guard(mux, mux, o, method) }
	peekAnswers := newAnswersInFlight(DefaultPeekAnswerBytes, DefaultPeekAnswerBytesPerConn)
	peeks := budgetedPeeks(mux, api(messagehubv1.MessageHub_Peek_FullMethodName), peekAnswers, o)
	type route struct {
		method, path string
		handler      http.Handler
	}
	routes := []route{
		{http.MethodGet, "/openapi.json", serveJSON(openapi.Document)},
		{http.MethodGet, "/openapi.v3.json", serveJSON(openapi.DocumentV3)},
		{http.MethodGet, "/healthz", mux},
		{http.MethodPost, "/v1/notifications", api(messagehubv1.MessageHub_Save_FullMethodName)},
		{http.MethodGet, "/v1/peek", peekWait(mux, peeks)},
		{http.MethodDelete, "/v1/dequeue/{bundleId}", api(messagehubv1.MessageHub_Dequeue_FullMethodName)},
		{http.MethodGet, "/v1/peek/content", guard(mux, peekContent(mux, messagehubv1.NewMessageHubClient(conn), peekAnswers, o), o,
			messagehubv1.MessageHub_PeekContent_FullMethodName)},
		{http.MethodGet, "/admin/v1/recipients/{recipient}/backlog", api(adminv1.Admin_GetBacklog_FullMethodName)},
		{http.MethodGet, "/admin/v1/recipients/{recipient}/next-bundle", api(adminv1.Admin_PreviewNextBundle_FullMethodName)},
		{http.MethodGet, "/admin/v1/recipients/{recipient}/notifications/{notificationId}", api(adminv1.Admin_TraceNotification_FullMethodName)},
		{http.MethodGet, "/admin/v1/recipients", api(adminv1.Admin_ListRecipients_FullMethodName)},
		{http.MethodGet, "/admin/v1/backlog-history", api(adminv1.Admin_GetBacklogHistory_FullMethodName)},
		{http.MethodPost, "/admin/v1/recipients/{recipient}/bundles/{bundleId}:release", api(adminv1.Admin_ReleaseBundle_FullMethodName)},
		{http.MethodPost, "/admin/v1/recipients/{recipient}:acknowledge", api(adminv1.Admin_AcknowledgeOnBehalf_FullMethodName)},
		{http.MethodPost, "/admin/v1/backup", api(adminv1.Admin_Backup_FullMethodName)},
		{http.MethodGet, "/admin/v1/recipients/{recipient}/audit", api(adminv1.Admin_ListAuditEvents_FullMethodName)},
		{http.MethodGet, console.Path, console.Handler()}, {http.MethodGet, console.Path + "/", console.Handler()},
	}
	if metrics != nil {
		routes = append(routes, route{http.MethodGet, "/metrics", metrics})
	}
	for path, group := range peekGroups {
		routes = append(routes, route{http.MethodGet, path, peekWait(mux, peekGroup(peeks, group))})
	}
	// Every route is named here so that request metrics name it
	// (http.route), and so that another method on it is 405; anything else
	// is 404. Only these routes reach grpc-gateway, behind their checks:
	// grpc-gateway matches a path once unescaped, so that it would serve
	// /v1%2Fnotifications as /v1/notifications, which no route here names.
	root := http.NewServeMux()
	notFound := notFound(mux)
	for _, rt := range routes {
		pattern, verb := splitVerb(rt.path)
		if strings.HasPrefix(pattern, "/v1/") || strings.HasPrefix(pattern, "/admin/v1/") {
			rt.handler = noStore(rt.handler)
		}
		if rt.method == http.MethodGet {
			rt.handler = headAsGet(rt.handler)
		}
		notAllowed := methodNotAllowed(mux, rt.method)
		if strings.HasPrefix(pattern, console.Path) {
			notAllowed = console.WithHeaders(notAllowed)
		}
		root.Handle(rt.method+" "+pattern, withVerb(verb, rt.handler, notFound))
		root.Handle(pattern, withVerb(verb, notAllowed, notFound))
	}
	root.Handle("/", notFound)
	handler := utf8Only(mux, root)
	if o.accessLog != nil {
		return accessLog(o.accessLog, handler), nil
	}
	return handler, nil
}

// utf8Only refuses (400) a request whose path or query, once its %-escapes
// are decoded, is not UTF-8. The strings of a request message must be, and
// gRPC refuses to send one that is not: grpc-gateway would answer the
// client's mistake 500, as a fault of the hub.
func utf8Only(mux *runtime.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		valid := utf8.ValidString(r.URL.Path)
		if q, err := url.ParseQuery(r.URL.RawQuery); err == nil { // a bad escape is grpc-gateway's 400
			for key, values := range q {
				valid = valid && utf8.ValidString(key) && !slices.ContainsFunc(values, func(v string) bool { return !utf8.ValidString(v) })
			}
		}
		if !valid {
			writeError(mux, w, r, http.StatusBadRequest,
				status.Error(codes.InvalidArgument, "the path and the query must be UTF-8 once their %-escapes are decoded"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// headAsGet serves a HEAD as the GET it asks about: http.ServeMux routes
// HEAD to GET patterns, and the 405 of another method allows it, but
// grpc-gateway knows GET only and would answer HEAD 501. The server drops
// the body, as it does for any HEAD.
func headAsGet(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			r = r.Clone(r.Context())
			r.Method = http.MethodGet
		}
		next.ServeHTTP(w, r)
	})
}

// splitVerb splits a custom method's path (…/{name}:verb, as in the HTTP
// rules) into the pattern http.ServeMux takes, whose wildcards are whole
// segments, and the verb (":verb"); a path without one is returned as it is.
func splitVerb(path string) (pattern, verb string) {
	last := path[strings.LastIndex(path, "/")+1:]
	if i := strings.Index(last, "}:"); strings.HasPrefix(last, "{") && i >= 0 {
		return path[:len(path)-len(last)+i+1], last[i+1:]
	}
	return path, ""
}

// withVerb passes on to next only requests whose path ends in verb (all
// when verb is empty); notFound answers the others, as any path no route
// names.
func withVerb(verb string, next, notFound http.Handler) http.Handler {
	if verb == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, verb) {
			notFound.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// notFound answers 404 in the gateway's JSON error shape, as grpc-gateway
// answers a path it does not know.
func notFound(mux *runtime.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(mux, w, r, http.StatusNotFound, status.Error(codes.NotFound, http.StatusText(http.StatusNotFound)))
	})
}

func accessLog(logger *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !logger.Enabled(r.Context(), slog.LevelDebug) {
			next.ServeHTTP(w, r)
			return
		}
		m := httpsnoop.CaptureMetrics(next, w, r)
		logger.Debug("http request", "method", r.Method, "path", r.URL.Path, "status", m.Code,
			"duration", m.Duration, "bytes", m.Written, "client", r.RemoteAddr)
	})
}

// methodNotAllowed answers 405 with the allowed methods, in the gateway's
// JSON error shape.
func methodNotAllowed(mux *runtime.ServeMux, method string) http.Handler {
	allow := method
	if method == http.MethodGet {
		allow += ", " + http.MethodHead
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(mux, w, r, http.StatusMethodNotAllowed,
			status.Errorf(codes.Unimplemented, "method %s is not allowed on %s: use %s", r.Method, r.URL.Path, allow))
	})
}

// guard checks that the caller's token may call method (the route's gRPC
// method) before anything of the body is read, and bounds the body: a
// declared length over the limit is refused at once, an undeclared one as
// soon as it passes the limit. Until the request is answered, its body
// counts against the memory of all bodies in flight.
func guard(mux *runtime.ServeMux, next http.Handler, o options, method string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o.authenticate != nil {
			if err := o.authenticate(method, r.Header.Values("Authorization"), r.RemoteAddr); err != nil {
				_, out := runtime.MarshalerForRequest(mux, r)
				errorHandler(r.Context(), mux, out, w, r, server.ToStatus(o.refusalLog(), method, err))
				return
			}
		}
		if r.ContentLength > o.maxBodyBytes {
			writeError(mux, w, r, http.StatusRequestEntityTooLarge, tooLarge(o.maxBodyBytes))
			return
		}
		if r.Method != http.MethodPost {
			// The HTTP rules give a body to POST routes only; grpc-gateway
			// would still read (and drop) what a client sends with a GET or
			// DELETE before making the call, holding room for it meanwhile:
			// such a body is left unread (one declared over the limit is
			// still refused, as on every route), and costs nothing.
			r = r.Clone(r.Context())
			r.Body = http.NoBody
			next.ServeHTTP(w, r)
			return
		}
		if weight := bodyWeight(r, o.maxBodyBytes); weight > 0 {
			if !o.bodies.TryAcquire(weight) {
				refuseBusy(mux, w, r, "too many request bodies in flight; try again shortly")
				return
			}
			defer o.bodies.Release(weight)
		}
		body := &limitedBody{ReadCloser: http.MaxBytesReader(w, r.Body, o.maxBodyBytes), limit: o.maxBodyBytes}
		r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, body))
		r.Body = body
		next.ServeHTTP(w, r)
	})
}

// bodyWeight is what r's body may cost: its declared length, or the limit
// when it is sent without one (chunked).
func bodyWeight(r *http.Request, limit int64) int64 {
	switch {
	case r.ContentLength >= 0:
		return r.ContentLength
	case r.Body == nil || r.Body == http.NoBody:
		return 0
	default:
		return limit
	}
}

func tooLarge(limit int64) error {
	return status.Errorf(codes.ResourceExhausted, "request body over %d bytes", limit)
}

// limitedBody remembers that the body went over its limit, so that the
// error handler answers 413 rather than a decoding error.
type limitedBody struct {
	io.ReadCloser
	limit   int64
	tripped bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		b.tripped = true
	}
	return n, err
}

type bodyKey struct{}

// writeError writes err in grpc-gateway's JSON error shape with httpStatus.
func writeError(mux *runtime.ServeMux, w http.ResponseWriter, r *http.Request, httpStatus int, err error) {
	_, out := runtime.MarshalerForRequest(mux, r)
	runtime.DefaultHTTPErrorHandler(r.Context(), mux, out, w, r, &runtime.HTTPStatusError{HTTPStatus: httpStatus, Err: err})
}

func serveJSON(doc []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	})
}

// peekGroup serves a per-group Peek route as GET /v1/peek with the group
// set; a group in the query is overridden by the path.
func peekGroup(next http.Handler, group string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.Clone(r.Context())
		q := r.URL.Query()
		q.Set("group", group)
		r.URL.Path, r.URL.RawPath, r.URL.RawQuery = "/v1/peek", "", q.Encode()
		next.ServeHTTP(w, r)
	})
}

// peekResponse shapes a Peek's HTTP answer: the bundle id in the MessageId
// header, or 204 No Content when there is no bundle. Other answers pass.
func peekResponse(_ context.Context, w http.ResponseWriter, m proto.Message) error {
	// With `response_body: bundle` the gateway hands over a generated wrapper.
	resp, ok := m.(interface{ GetBundle() *messagehubv1.Bundle })
	if !ok {
		return nil
	}
	if b := resp.GetBundle(); b != nil {
		w.Header()[MessageIDHeader] = []string{b.GetId()} //nolint:staticcheck // SA1008: sent as the clients spell it
		if bw, ok := w.(*budgetedWriter); ok {
			// The answer, written next, counts against its actor's share.
			bw.actor = b.GetRecipient()
		}
		return nil
	}
	// The gateway still writes the (empty) body, which a 204 drops.
	w.Header().Del("Content-Type")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// errorHandler is grpc-gateway's standard mapping (status code to HTTP
// status, JSON body) with an RFC 6750 challenge on 401.
func errorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if body, ok := ctx.Value(bodyKey{}).(*limitedBody); ok && body.tripped {
		err = &runtime.HTTPStatusError{HTTPStatus: http.StatusRequestEntityTooLarge, Err: tooLarge(body.limit)}
	}
	if status.Code(err) == codes.Unauthenticated {
		w = bearerChallenge{w}
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

// bearerChallenge replaces the WWW-Authenticate header grpc-gateway derives
// from the status message with a standard bearer challenge.
type bearerChallenge struct{ http.ResponseWriter }

func (b bearerChallenge) WriteHeader(code int) {
	b.Header().Set("WWW-Authenticate", `Bearer realm="messagehub"`)
	b.ResponseWriter.WriteHeader(code)
}

// noStore marks every answer of next as one no cache may keep: each is one
// caller's data (a bundle, its document, a backlog, an audit page) or an
// error about it.
func noStore(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}
