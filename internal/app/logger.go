package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

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
	return &grpcLogger{l: logger, limit: lograte.Limiter{Max: grpcWarningsPerSecond}}
}

type grpcLogger struct {
	l     *slog.Logger
	limit lograte.Limiter
}

func (g *grpcLogger) log(level slog.Level, msg string) {
	ctx := context.Background()
	if !g.l.Enabled(ctx, level) {
		return
	}
	attrs := []any{"component", "grpc"}
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
