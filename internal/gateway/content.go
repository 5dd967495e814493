package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/server"
)

// BundleMediaType is the Content-Type of a content peek's answer when the
// bundle's domain has no document provider: the bundle itself, as JSON.
const BundleMediaType = "application/vnd.messagehub.bundle+json"

// retryAfterSeconds is what a 503 of a content peek asks the actor to wait:
// the hub goes on building the document meanwhile.
const retryAfterSeconds = 5

// Limits of the documents being answered. Each one being answered holds at
// most about ContentPeekBytes of the hub's memory, however slowly its client
// reads: the message the gateway is writing, the in-process connection's
// window, and the message and read buffer of the gRPC server's PeekContent
// (see InProcessDialOptions). The defaults hold at most 32 of them, about
// 128 MiB, as much as the request bodies in flight (DefaultMaxBodyMemory).
const (
	DefaultContentPeeks        = 32
	DefaultContentPeeksPerConn = 4
	// ContentPeekBytes is what one document being answered may hold.
	ContentPeekBytes = 3*content.MaxMessageBytes + InProcessWindow
	// DefaultContentStall is how long a client may read nothing of a
	// document before its answer is cut. It is counted per piece of
	// contentPiece bytes, not for the whole answer, which may take as long
	// as a slow client needs to read 50 MiB.
	DefaultContentStall = 30 * time.Second
	contentPiece        = 64 << 10
)

// InProcessWindow is the flow-control window of each call on the gateway's
// in-process connection: what the connection buffers of an answer the
// gateway has not taken yet (its client reads slowly, or not at all).
// gRPC's default lets the window grow with the bandwidth it measures (BDP),
// to 16 MiB per call on an in-process connection, so 200 unread content
// peeks held 3.3 GB; a fixed window turns that off.
const (
	InProcessWindow     = 64 << 10
	inProcessConnWindow = 1 << 20
)

// InProcessDialOptions are the options of the gateway's in-process
// connection to the gRPC server: fixed, small flow-control windows (see
// InProcessWindow). The connection-wide window is not what an unread call
// holds (gRPC opens it as data arrives), only what passes at once.
func InProcessDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(InProcessWindow),
		grpc.WithInitialConnWindowSize(inProcessConnWindow),
	}
}

// peekContent serves GET /v1/peek/content: the bundle's document itself,
// with its media type and the bundle id in MessageId, through the gRPC
// server's PeekContent (so authentication and validation are the same).
//
// A document's answer is bounded in memory and in time: it takes one of the
// places of o.contentPeeks, within its connection's and its actor's
// (server.ActorShare) limits (503 with Retry-After when there is none),
// once its document is ready, and is cut when its client reads nothing for
// o.contentStall. A bundle without a document is answered as a Peek is,
// under the Peek answers' budget (peekAnswers).
func peekContent(mux *runtime.ServeMux, hub messagehubv1.MessageHubClient, peekAnswers *answersInFlight, o options) http.Handler {
	places := newAnswersInFlight(int64(o.contentPeeks), int64(o.contentPeeksPerConn)) // a place per document
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := peekRequestOf(r)
		if err != nil {
			writeError(mux, w, r, http.StatusBadRequest, status.Error(codes.InvalidArgument, err.Error()))
			return
		}
		ctx := metadata.AppendToOutgoingContext(r.Context(), server.ForwardedClientKey, r.RemoteAddr)
		// As grpc-gateway forwards it for the other routes: a value gRPC
		// metadata cannot carry (printable ASCII only) is left out, so the
		// call is answered as one without a token, not failed by the
		// in-process connection as the hub's fault.
		if auth := r.Header.Values("Authorization"); len(auth) > 0 && printableASCII(auth[0]) {
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
		// Who the document is for: with authentication the bundle is the
		// caller's own (the server refuses another recipient), without it
		// the recipient the request names.
		actor := first.GetBundle().GetRecipient()
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
			// As large as a Peek's answer (the largest bundle is about 15
			// MiB of JSON): it shares their budget and their stall.
			bw := newBudgetedWriter(mux, w, r, peekAnswers, o)
			bw.actor = actor
			defer bw.release()
			_, _ = bw.Write(body)
			return
		}
		if full := places.take(r.RemoteAddr, actor, 1); full != 0 {
			// Cancelling the call (deferred) frees what it holds at once.
			w.Header().Del(MessageIDHeader)
			refuseBusy(mux, w, r, documentsBusy(full, places))
			return
		}
		defer places.give(r.RemoteAddr, actor, 1)
		w.Header().Set("Content-Type", first.GetMediaType())
		// The document streams as it comes; an error half-way can only cut
		// the response short, which the client must see as a broken body:
		// a handler that returns finishes the chunked answer as if the
		// document were whole, so it aborts instead (http.ErrAbortHandler:
		// the connection is closed, or the HTTP/2 stream reset).
		out := stallingWriter{w: w, rc: http.NewResponseController(w), stall: o.contentStall}
		for msg := first; ; {
			if err := out.write(msg.GetData()); err != nil {
				if o.accessLog != nil {
					o.accessLog.Debug("content answer cut: its client stopped reading it",
						"path", r.URL.Path, "client", r.RemoteAddr, "stall", o.contentStall, "error", err)
				}
				return
			}
			if msg, err = stream.Recv(); errors.Is(err, io.EOF) {
				return
			} else if err != nil {
				if o.accessLog != nil {
					o.accessLog.Debug("content answer cut: its document broke off", "path", r.URL.Path, "client", r.RemoteAddr, "error", err)
				}
				panic(http.ErrAbortHandler)
			}
		}
	})
}

// documentsBusy is the message of a content peek refused for want of a
// place: which limit is full (take's answer), and how many it allows.
func documentsBusy(full int, places *answersInFlight) string {
	switch full {
	case fullActor:
		return fmt.Sprintf("too many documents being answered to this actor (at most %d at once, on all its connections); read them, or try again shortly",
			places.perActor)
	case fullConn:
		return fmt.Sprintf("too many documents being answered on this connection (at most %d at once); try again shortly", places.perConn)
	default:
		return "too many documents being answered; try again shortly"
	}
}

// stallingWriter writes a document in pieces, each of which its client must
// take within stall: a client that stops reading has its answer cut (and
// what the answer holds freed) without a bound on the whole answer's time,
// which would cut slow clients' large documents.
type stallingWriter struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
}

func (s stallingWriter) write(p []byte) error {
	for len(p) > 0 {
		n := min(len(p), contentPiece)
		// A writer without deadlines (none of net/http's) keeps the
		// server's WriteTimeout for the whole answer.
		if err := s.rc.SetWriteDeadline(time.Now().Add(s.stall)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		if _, err := s.w.Write(p[:n]); err != nil { //nolint:gosec // a domain's document, sandboxed by peekContent
			return err
		}
		p = p[n:]
	}
	return nil
}

// peekRequestOf reads the query of a content peek as /v1/peek takes it:
// with the same parser, so that both refuse and take the same queries.
func peekRequestOf(r *http.Request) (*messagehubv1.PeekRequest, error) {
	q, err := url.ParseQuery(r.URL.RawQuery) // not r.URL.Query, which leaves a malformed pair out (see peekWait)
	if err != nil {
		return nil, err
	}
	wait, err := takeWait(q)
	if err != nil {
		return nil, err
	}
	req := &messagehubv1.PeekRequest{}
	if err := (&strictQuery{}).Parse(req, q, utilities.NewDoubleArray(nil)); err != nil {
		return nil, err
	}
	req.WaitMs = wait
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

// printableASCII reports whether v can be a gRPC metadata value: bytes 0x20
// to 0x7E only.
func printableASCII(v string) bool {
	for i := range len(v) {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}
