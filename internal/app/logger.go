package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"google.golang.org/grpc/grpclog"

	"github.com/energydatahub/messagehub/internal/lograte"
)

// NewLogger is the hub's logger: JSON lines to w at level and above. A
// duration is written as Go writes it ("1.5s", "250µs"), as every line
// that says how long something took does, rather than the JSON handler's
// raw nanoseconds.
func NewLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsText}))
}

func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// otelErrorsPerSecond bounds the lines of the errors OpenTelemetry
// reports: a collector that is down or refuses spans fails every batch.
const otelErrorsPerSecond = 1

// NewOTelErrorHandler sends the errors OpenTelemetry reports (otel.Handle: a
// failed export of spans, once a batch while the collector is down or
// refuses them), which it would write to stderr as plain text, to logger as
// JSON with component=otel: at warn (the collector's or the network's fault,
// not the hub's), at most otelErrorsPerSecond a second with a count of those
// held back. cmd/messagehub installs it (otel.SetErrorHandler) with
// NewOTelLogger.
func NewOTelErrorHandler(logger *slog.Logger) otel.ErrorHandler {
	return &otelErrors{componentLog{l: logger, component: "otel", limit: lograte.Limiter{Max: otelErrorsPerSecond}}}
}

type otelErrors struct{ componentLog }

func (h *otelErrors) Handle(err error) { h.log(slog.LevelWarn, "OpenTelemetry error", "error", err) }

// NewOTelLogger is OpenTelemetry's own logger (otel.SetLogger), which would
// write plain text to stderr: its lines on logger, with component=otel (its
// errors, e.g. an OTEL_* variable it cannot read, at error; its warnings
// and informational lines below info).
func NewOTelLogger(logger *slog.Logger) logr.Logger {
	return logr.FromSlogHandler(logger.With("component", "otel").Handler())
}

// GRPCInfoLevel is the level of the informational lines of gRPC and
// grpc-gateway: below debug, as the embedded store's are, so that the
// hub's debug lines (the access log) are not mixed with them; --log-level
// debug-4 shows them.
const GRPCInfoLevel = slog.LevelDebug - 4

// grpcWarningsPerSecond bounds the lines of gRPC's and grpc-gateway's
// errors: a client can cause one per request (grpc-gateway logs each
// header it cannot forward as metadata).
const grpcWarningsPerSecond = 10

// NewGRPCLogger sends what gRPC and grpc-gateway log (grpclog, which
// would write plain text to stderr) to logger, as JSON like every other
// line, with component=grpc: their errors at warn (a client's request can
// cause them), at most grpcWarningsPerSecond a second with a count of those
// held back, their warnings at debug, their informational lines at
// GRPCInfoLevel. cmd/messagehub installs it (grpclog.SetLoggerV2) before
// anything of gRPC runs.
func NewGRPCLogger(logger *slog.Logger) grpclog.LoggerV2 {
	return &grpcLogger{componentLog{l: logger, component: "grpc", limit: lograte.Limiter{Max: grpcWarningsPerSecond}}}
}

type grpcLogger struct{ componentLog }

// componentLog logs the lines of a library that would write plain text
// to stderr, with component=<its name>: those at warn and above at most
// limit's a second, with a count of those held back.
type componentLog struct {
	l         *slog.Logger
	component string
	limit     lograte.Limiter
}

func (g *componentLog) log(level slog.Level, msg string, args ...any) {
	ctx := context.Background()
	if !g.l.Enabled(ctx, level) {
		return
	}
	attrs := append([]any{"component", g.component}, args...)
	if level >= slog.LevelWarn {
		ok, held := g.limit.Allow(time.Now())
		if !ok {
			return
		}
		attrs = append(attrs, "suppressed_since_last", held)
	}
	g.l.Log(ctx, level, msg, attrs...)
}

// line is what fmt.Sprintln makes of args, without its newline.
func line(args []any) string { return strings.TrimSuffix(fmt.Sprintln(args...), "\n") }

func (g *grpcLogger) Info(args ...any)   { g.log(GRPCInfoLevel, fmt.Sprint(args...)) }
func (g *grpcLogger) Infoln(args ...any) { g.log(GRPCInfoLevel, line(args)) }
func (g *grpcLogger) Infof(format string, args ...any) {
	g.log(GRPCInfoLevel, fmt.Sprintf(format, args...))
}
func (g *grpcLogger) Warning(args ...any)   { g.log(slog.LevelDebug, fmt.Sprint(args...)) }
func (g *grpcLogger) Warningln(args ...any) { g.log(slog.LevelDebug, line(args)) }
func (g *grpcLogger) Warningf(format string, args ...any) {
	g.log(slog.LevelDebug, fmt.Sprintf(format, args...))
}
func (g *grpcLogger) Error(args ...any)   { g.log(slog.LevelWarn, fmt.Sprint(args...)) }
func (g *grpcLogger) Errorln(args ...any) { g.log(slog.LevelWarn, line(args)) }
func (g *grpcLogger) Errorf(format string, args ...any) {
	g.log(slog.LevelWarn, fmt.Sprintf(format, args...))
}

// Fatal and its kin log at error and exit, as grpclog's own logger does.
func (g *grpcLogger) Fatal(args ...any) { g.fatal(fmt.Sprint(args...)) }
func (g *grpcLogger) Fatalln(args ...any) {
	g.fatal(line(args))
}
func (g *grpcLogger) Fatalf(format string, args ...any) { g.fatal(fmt.Sprintf(format, args...)) }

func (g *grpcLogger) fatal(msg string) {
	g.l.Error(msg, "component", "grpc")
	os.Exit(1)
}

// V reports whether verbose lines of level l are wanted: gRPC's own logger
// wants none above 0 unless told by its environment.
func (g *grpcLogger) V(l int) bool { return l <= 0 }
