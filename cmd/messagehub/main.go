// Command messagehub runs the MessageHub service: Save, Peek, PeekContent and
// Dequeue over gRPC (with gRPC health and reflection) and over an HTTP
// gateway for market actors (with /openapi.json, /healthz and /metrics), on
// the embedded store or on Azure Cosmos DB.
//
// Configuration is by flags with environment fallbacks; run with -h to list
// them. SIGTERM or SIGINT stops it gracefully: health turns NOT_SERVING,
// in-flight calls finish (bounded by a timeout), then the store is closed.
// The service itself is internal/app; this command parses the
// configuration, sets up logging and runs it. "messagehub admin …" calls the
// Admin service of a running hub (admin.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"go.opentelemetry.io/otel"
	"google.golang.org/grpc/grpclog"

	"github.com/energydatahub/messagehub/internal/app"
)

// defaultGCPercent is the garbage collector's GOGC unless the environment
// sets one. A Save makes garbage of about the size of its request while the
// heap kept between calls is small, so at Go's default of 100 the collector
// ran dozens of times a second and its assists slowed the one write path
// every Save goes through; at 400 the load tool's save-single and
// save-batch scenarios run faster for some tens of MiB more resident memory.
// The id index, the one large structure, is kept outside the heap, so it
// does not raise the collector's goal.
const defaultGCPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	if len(os.Args) > 1 && os.Args[1] == "admin" {
		if code := adminMain(ctx, os.Args[2:], os.Stdout, os.Stderr); code != 0 {
			os.Exit(code)
		}
		return
	}

	cfg, err := app.ParseConfig(os.Args[1:], os.Getenv, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return
	case errors.Is(err, app.ErrVersion):
		fmt.Print(readBuildInfo())
		return
	case err != nil:
		fmt.Fprintln(os.Stderr, "messagehub:", err)
		os.Exit(2)
	}
	logger := app.NewLogger(os.Stderr, cfg.LogLevel)
	grpclog.SetLoggerV2(app.NewGRPCLogger(logger))
	otel.SetErrorHandler(app.NewOTelErrorHandler(logger))
	otel.SetLogger(app.NewOTelLogger(logger))
	cfg.Logger = logger
	info := readBuildInfo()
	cfg.Build = app.Build{Version: info.Version, Revision: info.Revision, GoVersion: info.GoVersion}
	if err := run(ctx, stop, cfg); err != nil {
		logger.Error("messagehub failed", "error", err)
		stop()
		os.Exit(1)
	}
}

// run opens the service, serves until ctx is done, then shuts it down.
// stop releases the signal handler once shutdown starts, so a second signal
// ends the process at once.
func run(ctx context.Context, stop context.CancelFunc, cfg app.Config) error {
	a, err := app.New(ctx, cfg)
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, stop)
	err = a.Run(ctx)
	stop()
	return errors.Join(err, a.Close())
}
