package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/lograte"
)

// internalMessage is all a client learns about an unexpected error; the
// detail goes to the log only.
const internalMessage = "internal error"

// ToStatus maps an error returned by a handler to the gRPC status the client
// sees. It is the only place where status codes are chosen. Domain errors keep
// their message (it says what is wrong with the request), less what it
// holds of the hub's infrastructure (domain.Private), which only the log
// keeps; anything unexpected becomes INTERNAL with a generic message and is
// logged with its detail.
func ToStatus(logger *slog.Logger, method string, err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok {
		// Already a status (e.g. the health server's NOT_FOUND for an unknown
		// service): it says what it means. Only a fault of the server is
		// worth an ERROR line; the rest the caller caused or chose.
		level := slog.LevelDebug
		switch st.Code() {
		case codes.Internal, codes.Unknown, codes.DataLoss:
			level = slog.LevelError
		case codes.Unavailable:
			warnUnavailable(logger, method, err)
			return st.Err()
		}
		logger.Log(context.Background(), level, "call failed", "method", method, "code", st.Code().String(), "error", err)
		return st.Err()
	}
	var code codes.Code
	switch {
	case errors.Is(err, domain.ErrInvalidArgument):
		code = codes.InvalidArgument
	case errors.Is(err, domain.ErrNotificationConflict), errors.Is(err, domain.ErrBundleIDInUse):
		code = codes.AlreadyExists
	case errors.Is(err, domain.ErrOtherBundlePending), errors.Is(err, domain.ErrNotSupported):
		code = codes.FailedPrecondition
	case errors.Is(err, domain.ErrStoreRefuses):
		logger.Error("store refuses the service", "method", method, "error", err)
		code = codes.FailedPrecondition
	case errors.Is(err, domain.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, domain.ErrUnauthenticated):
		code = codes.Unauthenticated
	case errors.Is(err, domain.ErrPermissionDenied):
		code = codes.PermissionDenied
	case errors.Is(err, domain.ErrStorageFull):
		code = codes.ResourceExhausted // the guard logs the condition once, not every refusal
	case errors.Is(err, domain.ErrCabinetFull):
		code = codes.ResourceExhausted // the actor must drain the cabinet first
	case errors.Is(err, domain.ErrUnavailable):
		if errors.As(err, new(routine)) {
			logger.Debug("call unavailable for now", "method", method, "error", err)
		} else {
			warnUnavailable(logger, method, err)
		}
		code = codes.Unavailable
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	default:
		logger.Error("internal error", "method", method, "error", err)
		return status.Error(codes.Internal, internalMessage)
	}
	if code != codes.Unavailable {
		// The caller's mistake or choice, not the service's: anyone could
		// fill an ERROR log with these.
		logger.Debug("call refused", "method", method, "code", code.String(), "error", err)
	}
	return &mappedError{st: status.New(code, domain.PublicText(err)), cause: err}
}

// mappedError is a domain error as the status the client gets: gRPC sends
// the status, and the access log, before it, still finds what the error
// wraps (the subject of a refused token).
type mappedError struct {
	st    *status.Status
	cause error
}

func (e *mappedError) Error() string              { return e.st.Err().Error() }
func (e *mappedError) GRPCStatus() *status.Status { return e.st }
func (e *mappedError) Unwrap() error              { return e.cause }

// unavailablePerSecond bounds the warnings about UNAVAILABLE answers: a
// store that is down, or a client retrying in a loop while a domain hangs,
// must not flood the log with one line per call.
const unavailablePerSecond = 10

// unavailableLines limits those warnings process-wide: they say the same
// thing whichever server answered.
var unavailableLines = lograte.Limiter{Max: unavailablePerSecond}

// warnUnavailable logs an UNAVAILABLE answer at warn, within
// unavailablePerSecond, with how many were left out since the last line.
// The line names no cause: the error says whether it was the store, a
// domain, or the hub shutting down.
func warnUnavailable(logger *slog.Logger, method string, err error) {
	if ok, suppressed := unavailableLines.Allow(time.Now()); ok {
		logger.Warn("call answered UNAVAILABLE", "method", method, "error", err, "suppressed_since_last", suppressed)
	}
}

// routine marks an UNAVAILABLE answer that is part of normal work, not a
// fault (a document its domain has not built yet: the caller asks again):
// it is answered as usual and logged at debug only.
type routine struct{ error }

func (r routine) Unwrap() error { return r.error }

// UnaryErrorInterceptor applies ToStatus to every unary call and turns a
// handler panic into INTERNAL instead of taking the process down.
func UnaryErrorInterceptor(logger *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				resp = nil
				err = ToStatus(logger, info.FullMethod, fmt.Errorf("panic: %v\n%s", r, debug.Stack()))
			}
		}()
		resp, err = handler(ctx, req)
		if err != nil {
			return nil, ToStatus(logger, info.FullMethod, err)
		}
		return resp, nil
	}
}

// StreamErrorInterceptor is UnaryErrorInterceptor for streaming calls (health
// Watch, reflection): it maps their errors, including the authorizer's, and
// recovers from panics.
func StreamErrorInterceptor(logger *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = ToStatus(logger, info.FullMethod, fmt.Errorf("panic: %v\n%s", r, debug.Stack()))
			}
		}()
		return ToStatus(logger, info.FullMethod, handler(srv, ss))
	}
}
