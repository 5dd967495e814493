package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// BundleMediaType is the Content-Type of a content peek's answer when the
// bundle's domain has no document provider: the bundle itself, as JSON.
const BundleMediaType = "application/vnd.messagehub.bundle+json"

// retryAfterSeconds is what a 503 of a content peek asks the actor to wait:
// the hub goes on building the document meanwhile.
const retryAfterSeconds = 5

// peekContent serves GET /v1/peek/content: the bundle's document itself,
// with its media type and the bundle id in MessageId, through the gRPC
// server's PeekContent (so authentication and validation are the same).
func peekContent(mux *runtime.ServeMux, hub messagehubv1.MessageHubClient) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := peekRequestOf(r)
		if err != nil {
			writeError(mux, w, r, http.StatusBadRequest, status.Error(codes.InvalidArgument, err.Error()))
			return
		}
		ctx := r.Context()
		if auth := r.Header.Values("Authorization"); len(auth) > 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth[0])
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := hub.PeekContent(ctx, req)
		if err != nil {
			contentError(mux, w, r, err)
			return
		}
		first, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if err != nil {
			contentError(mux, w, r, err)
			return
		}
		w.Header()[MessageIDHeader] = []string{first.GetBundle().GetId()} //nolint:staticcheck // SA1008: sent as the clients spell it
		// A document is data for a machine, whatever its media type: no
		// browser may sniff it or run it in the hub's origin.
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "sandbox; default-src 'none'")
		if first.GetMediaType() == "" {
			body, err := protojson.Marshal(first.GetBundle())
			if err != nil {
				contentError(mux, w, r, err)
				return
			}
			w.Header().Set("Content-Type", BundleMediaType)
			_, _ = w.Write(body) //nolint:gosec // JSON of our own, sandboxed above
			return
		}
		w.Header().Set("Content-Type", first.GetMediaType())
		// The document streams as it comes; an error half-way can only cut
		// the response short, which the client sees as a broken body.
		for msg := first; ; {
			if _, err := w.Write(msg.GetData()); err != nil { //nolint:gosec // a domain's document, sandboxed above
				return
			}
			if msg, err = stream.Recv(); err != nil {
				return
			}
		}
	})
}

// peekRequestOf reads the query of a content peek as /v1/peek takes it.
func peekRequestOf(r *http.Request) (*messagehubv1.PeekRequest, error) {
	q := r.URL.Query()
	for key := range q {
		if key != "recipient" && key != "bundleId" && key != "group" {
			return nil, fmt.Errorf("unknown query parameter %q: a content peek takes recipient, group, bundleId", key)
		}
	}
	req := &messagehubv1.PeekRequest{Recipient: q.Get("recipient"), BundleId: q.Get("bundleId")}
	if g := q.Get("group"); g != "" {
		n, ok := messagehubv1.PeekGroup_value[g]
		if !ok {
			return nil, errors.New("group " + strconv.Quote(g) + " is not a peek group (e.g. PEEK_GROUP_TIME_SERIES)")
		}
		req.Group = messagehubv1.PeekGroup(n)
	}
	return req, nil
}

// contentError answers a failed content peek like any gateway error, and a
// document not ready yet with Retry-After.
func contentError(mux *runtime.ServeMux, w http.ResponseWriter, r *http.Request, err error) {
	code := status.Code(err)
	if code == codes.Unavailable {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
	}
	if code == codes.Unauthenticated {
		w = bearerChallenge{w}
	}
	writeError(mux, w, r, runtime.HTTPStatusFromCode(code), err)
}
