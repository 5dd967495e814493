package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// authFailuresPerSecond bounds the info lines about refused credentials: a
// client retrying a bad token in a loop must not flood the log.
const authFailuresPerSecond = 10

// accessLog logs every call at debug level (method, code, duration, peer)
// and refused credentials at info, at most authFailuresPerSecond a second.
type accessLog struct {
	logger *slog.Logger
	limit  windowLimiter
}

func (a *accessLog) record(ctx context.Context, method string, start time.Time, err error) {
	code := status.Code(err)
	from := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		from = p.Addr.String()
	}
	if code == codes.Unauthenticated || code == codes.PermissionDenied {
		if ok, suppressed := a.limit.allow(time.Now()); ok {
			a.logger.Info("call refused for its credentials", "method", method, "code", code.String(), "peer", from,
				"error", status.Convert(err).Message(), "suppressed_since_last", suppressed)
		}
	}
	if a.logger.Enabled(ctx, slog.LevelDebug) {
		a.logger.Debug("call", "method", method, "code", code.String(), "duration", time.Since(start), "peer", from)
	}
}

func (a *accessLog) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		a.record(ctx, info.FullMethod, start, err)
		return resp, err
	}
}

func (a *accessLog) stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)
		a.record(ss.Context(), info.FullMethod, start, err)
		return err
	}
}

// windowLimiter allows at most max events per one-second window and counts
// the ones it refused.
type windowLimiter struct {
	max int

	mu         sync.Mutex
	window     time.Time
	n          int
	suppressed int
}

// allow says whether an event at now may be logged and, if so, how many
// were refused since the last one allowed.
func (l *windowLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.window) >= time.Second {
		l.window, l.n = now, 0
	}
	if l.n >= l.max {
		l.suppressed++
		return false, 0
	}
	l.n++
	suppressed := l.suppressed
	l.suppressed = 0
	return true, suppressed
}
