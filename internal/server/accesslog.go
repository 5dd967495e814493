package server

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/lograte"
)

// authFailuresPerSecond bounds the info lines about refused credentials: a
// client retrying a bad token in a loop must not flood the log.
const authFailuresPerSecond = 10

// ForwardedClientKey is the metadata key under which the HTTP gateway names
// the address of the HTTP client a call comes from. Only a server made
// WithForwardedClient (the gateway's in-process one) believes it; the
// gateway drops the header an HTTP client could send to set it.
const ForwardedClientKey = "x-messagehub-forwarded-client"

// WithForwardedClient makes the server log a call's client as the
// ForwardedClientKey metadata names it, for a server only the gateway
// reaches; any other would let its clients name themselves.
func WithForwardedClient() Option { return func(o *options) { o.forwardedClient = true } }

// accessLog logs every call at debug level (method, code, duration, client,
// and the recipient and bundle its request or answer names) and refused
// credentials at info, at most authFailuresPerSecond a second, with the
// token's subject when it was verified.
type accessLog struct {
	logger *slog.Logger
	limit  lograte.Limiter
	now    func() time.Time // the limiter's clock
	// forwarded says whether the client named in ForwardedClientKey
	// metadata is believed (WithForwardedClient).
	forwarded bool
}

// call is what a call's log lines say about it beyond its method and
// outcome: its request and answer, read only for a line that is logged.
type call struct {
	req, resp any
}

// record logs a call that started at start (zero: no debug line is wanted)
// and ended with err.
func (a *accessLog) record(ctx context.Context, method string, start time.Time, c call, err error) {
	code := status.Code(err)
	if code == codes.Unauthenticated || code == codes.PermissionDenied {
		if ok, suppressed := a.limit.Allow(a.now()); ok {
			attrs := []any{"method", method, "code", code.String(), "client", a.client(ctx)}
			var refusal interface{ Subject() string }
			if errors.As(err, &refusal) {
				attrs = append(attrs, "subject", refusal.Subject())
			}
			a.logger.Info("call refused for its credentials", append(attrs,
				"error", status.Convert(err).Message(), "suppressed_since_last", suppressed)...)
		}
	}
	if !start.IsZero() && a.logger.Enabled(ctx, slog.LevelDebug) {
		attrs := append([]any{"method", method, "code", code.String(), "duration", time.Since(start), "client", a.client(ctx)},
			c.attrs()...)
		a.logger.Debug("call", attrs...)
	}
}

// client is the address of the call's client ("" if unknown): the HTTP
// client's for a call through the gateway. It is only formatted for a line
// that is logged: that costs allocations.
func (a *accessLog) client(ctx context.Context) string {
	if a.forwarded {
		if v := metadata.ValueFromIncomingContext(ctx, ForwardedClientKey); len(v) == 1 {
			return v[0]
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// maxLoggedValue bounds a request's value in an access log line: a request
// may give any string up to the message limit, and a valid id (36 bytes)
// fits whole.
const maxLoggedValue = 64

// loggedValue is s cut to maxLoggedValue bytes.
func loggedValue(s string) string {
	if len(s) <= maxLoggedValue {
		return s
	}
	return truncate(s, maxLoggedValue) + "..."
}

// attrs are the recipient and bundle id of the call's request, else of its
// answer (Peek's bundle), and the notifications of a Save.
func (c call) attrs() []any {
	var attrs []any
	if r, ok := c.req.(interface{ GetRecipient() string }); ok && r.GetRecipient() != "" {
		attrs = append(attrs, "recipient", loggedValue(r.GetRecipient()))
	}
	bundle := ""
	if r, ok := c.req.(interface{ GetBundleId() string }); ok {
		bundle = r.GetBundleId()
	}
	if r, ok := c.resp.(interface{ GetBundle() *messagehubv1.Bundle }); ok && bundle == "" {
		bundle = r.GetBundle().GetId()
	}
	if bundle != "" {
		attrs = append(attrs, "bundle_id", loggedValue(bundle))
	}
	if s, ok := c.req.(*messagehubv1.SaveRequest); ok {
		attrs = append(attrs, "notifications", len(s.GetNotifications()))
	}
	return attrs
}

// begin is when a call started if its debug line will be logged, else the
// zero time: the clock is not read for a line nobody wants.
func (a *accessLog) begin(ctx context.Context) time.Time {
	if a.logger.Enabled(ctx, slog.LevelDebug) {
		return time.Now()
	}
	return time.Time{}
}

func (a *accessLog) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := a.begin(ctx)
		resp, err := handler(ctx, req)
		if err != nil || !start.IsZero() {
			// req is decoded in place further down the chain (decode.go),
			// and the authorizer fills in an actor's own recipient.
			a.record(ctx, info.FullMethod, start, call{req: req, resp: resp}, err)
		}
		return resp, err
	}
}

func (a *accessLog) stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := a.begin(ss.Context())
		if start.IsZero() {
			err := handler(srv, ss)
			a.record(ss.Context(), info.FullMethod, start, call{}, err)
			return err
		}
		seen := &loggedStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), loggedCallKey{}, &call{})}
		err := handler(srv, seen)
		a.record(ss.Context(), info.FullMethod, start, *seen.ctx.Value(loggedCallKey{}).(*call), err)
		return err
	}
}

// loggedStream notes the first answer of a stream whose call is logged;
// its request is noted where it is decoded (noteRequest).
type loggedStream struct {
	grpc.ServerStream
	ctx context.Context
}

type loggedCallKey struct{}

func (s *loggedStream) Context() context.Context { return s.ctx }

func (s *loggedStream) SendMsg(m any) error {
	if c := s.ctx.Value(loggedCallKey{}).(*call); c.resp == nil {
		c.resp = m
		if h, ok := m.(*heldAnswer); ok {
			c.resp = h.msg
		}
	}
	return s.ServerStream.SendMsg(m)
}

// noteRequest notes a stream's decoded request for its access log line,
// when the call is logged.
func noteRequest(ctx context.Context, req any) {
	if c, ok := ctx.Value(loggedCallKey{}).(*call); ok && c.req == nil {
		c.req = req
	}
}
