package server

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/energydatahub/messagehub/internal/lograte"
)

// authFailuresPerSecond bounds the info lines about refused credentials: a
// client retrying a bad token in a loop must not flood the log.
const authFailuresPerSecond = 10

// accessLog logs every call at debug level (method, code, duration, peer)
// and refused credentials at info, at most authFailuresPerSecond a second.
type accessLog struct {
	logger *slog.Logger
	limit  lograte.Limiter
	now    func() time.Time // the limiter's clock; nil: time.Now
}

// record logs a call that started at start (zero: no debug line is wanted)
// and ended with err.
func (a *accessLog) record(ctx context.Context, method string, start time.Time, err error) {
	code := status.Code(err)
	if code == codes.Unauthenticated || code == codes.PermissionDenied {
		now := time.Now
		if a.now != nil {
			now = a.now
		}
		if ok, suppressed := a.limit.Allow(now()); ok {
			a.logger.Info("call refused for its credentials", "method", method, "code", code.String(), "peer", peerOf(ctx),
				"error", status.Convert(err).Message(), "suppressed_since_last", suppressed)
		}
	}
	if !start.IsZero() && a.logger.Enabled(ctx, slog.LevelDebug) {
		a.logger.Debug("call", "method", method, "code", code.String(), "duration", time.Since(start), "peer", peerOf(ctx))
	}
}

// peerOf is the address of the call's client ("" if unknown). It is only
// formatted for a line that is logged: that costs allocations.
func peerOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
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
			a.record(ctx, info.FullMethod, start, err)
		}
		return resp, err
	}
}

func (a *accessLog) stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := a.begin(ss.Context())
		err := handler(srv, ss)
		a.record(ss.Context(), info.FullMethod, start, err)
		return err
	}
}
