// Package gateway is MessageHub's HTTP face for market actors: grpc-gateway
// routes (generated from proto/messagehub/v1/messagehub_http.yaml) in front of
// a connection to the gRPC server, plus /openapi.json, /healthz and /metrics.
//
// The gateway checks nothing itself: it forwards the Authorization header,
// and the gRPC server authenticates, authorizes and validates every call, so
// HTTP and gRPC callers meet the same rules.
package gateway

import (
	"context"
	"fmt"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/gen/openapi"
)

// MessageIDHeader carries the id of the bundle a Peek returned, spelled as
// the market actors' clients expect it.
const MessageIDHeader = "MessageId"

// peekGroups are the Peek routes per group: GET /v1/peek/<name> is GET
// /v1/peek?group=<value>. An HTTP rule cannot fix a field's value, so the
// routes are added here rather than in messagehub_http.yaml.
var peekGroups = map[string]string{
	"/v1/peek/timeseries":   messagehubv1.PeekGroup_PEEK_GROUP_TIME_SERIES.String(),
	"/v1/peek/aggregations": messagehubv1.PeekGroup_PEEK_GROUP_AGGREGATIONS.String(),
	"/v1/peek/masterdata":   messagehubv1.PeekGroup_PEEK_GROUP_MASTER_DATA.String(),
}

// New returns the HTTP handler of the gateway. conn reaches the gRPC server
// (MessageHub and health); metrics serves /metrics.
func New(ctx context.Context, conn grpc.ClientConnInterface, metrics http.Handler) (http.Handler, error) {
	mux := runtime.NewServeMux(
		runtime.WithHealthzEndpoint(healthpb.NewHealthClient(conn)),
		runtime.WithForwardResponseOption(peekResponse),
		runtime.WithErrorHandler(errorHandler),
		// The server sets no response metadata worth exposing as
		// Grpc-Metadata-* headers.
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
	)
	if err := messagehubv1.RegisterMessageHubHandlerClient(ctx, mux, messagehubv1.NewMessageHubClient(conn)); err != nil {
		return nil, fmt.Errorf("register gateway routes: %w", err)
	}
	// The routes are repeated here so that request metrics name them
	// (http.route); anything else goes to grpc-gateway for its 404 or 405.
	root := http.NewServeMux()
	root.Handle("GET /metrics", metrics)
	root.HandleFunc("GET /openapi.json", serveOpenAPI)
	root.Handle("GET /healthz", mux)
	root.Handle("POST /v1/notifications", mux)
	root.Handle("GET /v1/peek", mux)
	for path, group := range peekGroups {
		root.Handle("GET "+path, peekGroup(mux, group))
	}
	root.Handle("DELETE /v1/dequeue/{bundleId}", mux)
	root.Handle("/", mux)
	return root, nil
}

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openapi.Document)
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
	// With `response_body: bundle` the gateway hands over a generated wrapper
	// of *PeekResponse, which still has GetBundle.
	resp, ok := m.(interface{ GetBundle() *messagehubv1.Bundle })
	if !ok {
		return nil
	}
	if b := resp.GetBundle(); b != nil {
		w.Header()[MessageIDHeader] = []string{b.GetId()} //nolint:staticcheck // SA1008: sent as the clients spell it
		return nil
	}
	// The gateway still writes the (empty) body; a 204 makes the writer
	// drop it.
	w.Header().Del("Content-Type")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// errorHandler is grpc-gateway's standard mapping (status code to HTTP
// status, JSON body) with an RFC 6750 challenge on 401.
func errorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
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
