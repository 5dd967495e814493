package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/lograte"
)

func TestToStatusMapsEveryDomainError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want codes.Code
	}{
		{"invalid argument is INVALID_ARGUMENT", domain.ErrInvalidArgument, codes.InvalidArgument},
		{"a wrapped invalid argument is INVALID_ARGUMENT", fmt.Errorf("%w: recipient must be a UUID", domain.ErrInvalidArgument), codes.InvalidArgument},
		{"a conflicting notification is ALREADY_EXISTS", domain.ErrNotificationConflict, codes.AlreadyExists},
		{"a reused bundle id is ALREADY_EXISTS", domain.ErrBundleIDInUse, codes.AlreadyExists},
		{"another pending bundle is FAILED_PRECONDITION", domain.ErrOtherBundlePending, codes.FailedPrecondition},
		{"an operation the store does not support is FAILED_PRECONDITION", domain.ErrNotSupported, codes.FailedPrecondition},
		{"not found is NOT_FOUND", domain.ErrNotFound, codes.NotFound},
		{"a deeply wrapped not found is NOT_FOUND", fmt.Errorf("dequeue: %w", fmt.Errorf("bundle x: %w", domain.ErrNotFound)), codes.NotFound},
		{"a full data volume is RESOURCE_EXHAUSTED", fmt.Errorf("%w: 10MiB free", domain.ErrStorageFull), codes.ResourceExhausted},
		{"a full cabinet is RESOURCE_EXHAUSTED", fmt.Errorf("%w: dequeue first", domain.ErrCabinetFull), codes.ResourceExhausted},
		{"unavailable is UNAVAILABLE", fmt.Errorf("store closed: %w", domain.ErrUnavailable), codes.Unavailable},
		{"a missing or bad token is UNAUTHENTICATED", fmt.Errorf("%w: token is expired", domain.ErrUnauthenticated), codes.Unauthenticated},
		{"acting for another actor is PERMISSION_DENIED", fmt.Errorf("%w: recipient is not the caller", domain.ErrPermissionDenied), codes.PermissionDenied},
		{"a cancelled context is CANCELED", context.Canceled, codes.Canceled},
		{"a wrapped cancelled context is CANCELED", fmt.Errorf("read drawer: %w", context.Canceled), codes.Canceled},
		{"an expired deadline is DEADLINE_EXCEEDED", fmt.Errorf("commit: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{"an unexpected error is INTERNAL", errors.New("disk on fire"), codes.Internal},
		{"a joined domain error keeps its code", errors.Join(errors.New("context"), domain.ErrNotFound), codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			got := ToStatus(slog.New(slog.NewJSONHandler(&logs, nil)), "/messagehub.v1.MessageHub/Peek", tt.err)
			st, ok := status.FromError(got)
			if !ok {
				t.Fatalf("ToStatus(%v) = %v, not a status error", tt.err, got)
			}
			if st.Code() != tt.want {
				t.Errorf("code = %s, want %s", st.Code(), tt.want)
			}
			if tt.want != codes.Internal && st.Message() != tt.err.Error() {
				t.Errorf("message = %q, want the domain message %q", st.Message(), tt.err.Error())
			}
		})
	}
}

func TestToStatusHidesInternalDetailAndLogsIt(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	err := ToStatus(logger, "/messagehub.v1.MessageHub/Save", errors.New("bolt: page 42 corrupt"))

	st := status.Convert(err)
	if st.Code() != codes.Internal || st.Message() != internalMessage {
		t.Errorf("got %s %q, want INTERNAL %q", st.Code(), st.Message(), internalMessage)
	}
	for _, want := range []string{"page 42 corrupt", "/messagehub.v1.MessageHub/Save", `"level":"ERROR"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log does not hold %q: %s", want, logs.String())
		}
	}
}

// A domain error's private part (what a store said of its account) is
// logged whole, but the client reads its public text in its place, however
// deep it is wrapped.
func TestToStatusTellsThePrivatePartOnlyToTheLog(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	sdk := &domain.Private{Err: errors.New("POST https://account.example/dbs/hub/colls/heads: 403"), Public: "the store answered 403"}
	err := ToStatus(logger, "/messagehub.v1.MessageHub/Save",
		fmt.Errorf("saving: %w", fmt.Errorf("%w: a request was refused: %w", domain.ErrStoreRefuses, sdk)))

	st := status.Convert(err)
	if want := "saving: store refuses the service: a request was refused: the store answered 403"; st.Code() != codes.FailedPrecondition || st.Message() != want {
		t.Errorf("got %s %q, want FAILED_PRECONDITION %q", st.Code(), st.Message(), want)
	}
	if !strings.Contains(logs.String(), "https://account.example/dbs/hub/colls/heads") {
		t.Errorf("the log does not hold the private part: %s", logs.String())
	}
}

func TestToStatusOfNilIsNil(t *testing.T) {
	if err := ToStatus(slog.New(slog.DiscardHandler), "m", nil); err != nil {
		t.Fatalf("ToStatus(nil) = %v", err)
	}
}

func TestUnaryErrorInterceptor(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: "/messagehub.v1.MessageHub/Dequeue"}
	tests := []struct {
		name     string
		handler  grpc.UnaryHandler
		wantCode codes.Code
		wantResp any
	}{
		{
			name:     "a successful call passes through",
			handler:  func(context.Context, any) (any, error) { return "ok", nil },
			wantCode: codes.OK,
			wantResp: "ok",
		},
		{
			name:     "a domain error becomes its status",
			handler:  func(context.Context, any) (any, error) { return nil, domain.ErrNotFound },
			wantCode: codes.NotFound,
		},
		{
			name:     "a handler panic becomes INTERNAL",
			handler:  func(context.Context, any) (any, error) { panic("boom") },
			wantCode: codes.Internal,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			icpt := UnaryErrorInterceptor(slog.New(slog.NewJSONHandler(&logs, nil)))
			resp, err := icpt(context.Background(), "req", info, tt.handler)
			if got := status.Code(err); got != tt.wantCode {
				t.Errorf("code = %s, want %s (err %v)", got, tt.wantCode, err)
			}
			if resp != tt.wantResp {
				t.Errorf("resp = %v, want %v", resp, tt.wantResp)
			}
			if tt.wantCode == codes.Internal && !strings.Contains(logs.String(), "boom") {
				t.Errorf("panic not logged: %s", logs.String())
			}
		})
	}
}

// Errors that are already statuses (gRPC's own services answer with them)
// keep their code and are no server fault: nothing reaches the ERROR log.
func TestStatusErrorsPassThroughWithoutAnErrorLog(t *testing.T) {
	for _, code := range []codes.Code{
		codes.NotFound, codes.InvalidArgument, codes.Unimplemented, codes.PermissionDenied, codes.Unauthenticated,
		codes.AlreadyExists, codes.FailedPrecondition, codes.ResourceExhausted, codes.Canceled, codes.DeadlineExceeded,
	} {
		var logs bytes.Buffer
		got := ToStatus(slog.New(slog.NewJSONHandler(&logs, nil)), "/grpc.health.v1.Health/Check", status.Error(code, "as the library said"))
		if st := status.Convert(got); st.Code() != code || st.Message() != "as the library said" {
			t.Errorf("%s became %s %q", code, st.Code(), st.Message())
		}
		if logs.Len() > 0 {
			t.Errorf("%s was logged at info or above: %s", code, logs.String())
		}
	}
}

// A status that says the server failed is passed on too, but it is the
// server's fault and must not hide in the debug log.
func TestServerFaultStatusesAreLoggedAtError(t *testing.T) {
	for _, code := range []codes.Code{codes.Internal, codes.Unknown, codes.DataLoss} {
		var logs bytes.Buffer
		got := ToStatus(slog.New(slog.NewJSONHandler(&logs, nil)), "/grpc.health.v1.Health/Watch", status.Error(code, "broken"))
		if status.Code(got) != code {
			t.Errorf("%s became %s", code, status.Code(got))
		}
		if !strings.Contains(logs.String(), `"level":"ERROR"`) || !strings.Contains(logs.String(), code.String()) {
			t.Errorf("%s was not logged at ERROR: %q", code, logs.String())
		}
	}
}

func TestClientErrorsAreNotLoggedAtError(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	for _, err := range []error{
		domain.ErrInvalidArgument, domain.ErrNotFound, domain.ErrUnauthenticated, domain.ErrPermissionDenied,
		domain.ErrNotificationConflict, domain.ErrBundleIDInUse, domain.ErrOtherBundlePending, domain.ErrStorageFull,
		domain.ErrCabinetFull, context.Canceled, context.DeadlineExceeded,
	} {
		_ = ToStatus(logger, "/messagehub.v1.MessageHub/Peek", err)
	}
	if logs.Len() > 0 {
		t.Fatalf("client errors were logged at info or above: %s", logs.String())
	}
}

func TestAHealthCheckOfAnUnknownServiceIsNotFound(t *testing.T) {
	_, healthClient, _ := testServer(t, &recordingHub{})
	_, err := healthClient.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: "no.such.Service"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("got %v, want NOT_FOUND", err)
	}
}

// Refused credentials are logged at info, but a client hammering with a bad
// token gets at most authFailuresPerSecond lines a second; every call is in
// the debug access log.
func TestAccessLogAndRateLimitedAuthFailures(t *testing.T) {
	var logs bytes.Buffer
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // the 100 refusals fall within one second
	a := &accessLog{
		logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		limit:  lograte.Limiter{Max: authFailuresPerSecond},
		now:    func() time.Time { return clock },
	}
	refused := status.Error(codes.Unauthenticated, "token expired")
	for range 100 {
		a.record(context.Background(), "/messagehub.v1.MessageHub/Peek", time.Now(), call{}, refused)
	}
	a.record(context.Background(), "/messagehub.v1.MessageHub/Peek", time.Now(), call{}, nil)
	if n := strings.Count(logs.String(), "call refused for its credentials"); n != authFailuresPerSecond {
		t.Fatalf("%d info lines for 100 refusals within a second, want %d", n, authFailuresPerSecond)
	}
	if strings.Contains(logs.String(), `"msg":"call"`) {
		t.Fatal("the access log appeared at info level")
	}

	logs.Reset()
	a.logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a.record(context.Background(), "/messagehub.v1.MessageHub/Save", time.Now(), call{}, nil)
	for _, want := range []string{`"msg":"call"`, "/messagehub.v1.MessageHub/Save", `"code":"OK"`, "duration"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("debug access log lacks %s: %s", want, logs.String())
		}
	}
}
