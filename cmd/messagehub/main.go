// Command messagehub runs the MessageHub gRPC service: Save, Peek and Dequeue
// over the embedded store, with gRPC health and reflection.
//
// Configuration is by flags with environment fallbacks; run with -h to list
// them. SIGTERM or SIGINT stops it gracefully: health turns NOT_SERVING,
// in-flight calls finish (bounded by a timeout), then the store is closed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/energydatahub/messagehub/internal/repository"
	"github.com/energydatahub/messagehub/internal/repository/embedded"
	"github.com/energydatahub/messagehub/internal/server"
)

// gracefulTimeout bounds how long shutdown waits for in-flight calls before
// cutting them off, so the process exits well within 15 s of SIGTERM.
const gracefulTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	cfg, err := ParseConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "messagehub:", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	if err := run(ctx, stop, cfg, logger); err != nil {
		logger.Error("messagehub failed", "error", err)
		stop()
		os.Exit(1)
	}
}

// run serves until ctx is done, then shuts down in order. stop releases the
// signal handler once shutdown starts, so a second signal ends the process
// at once.
func run(ctx context.Context, stop context.CancelFunc, cfg Config, logger *slog.Logger) (err error) {
	store, err := embedded.Open(cfg.DataDir, logger)
	if err != nil {
		return fmt.Errorf("open %s store in %s: %w", cfg.Store, cfg.DataDir, err)
	}
	repo := repository.New(store, repository.Options{
		MaxBundleWeight: cfg.MaxBundleWeight,
		Retention:       cfg.Retention,
	}, logger)
	// Close in reverse order of opening, after the server has stopped.
	defer func() {
		repo.Close()
		if cerr := store.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close store: %w", cerr))
		} else {
			logger.Info("store closed")
		}
	}()

	srv, hs := server.NewGRPCServer(repo, logger)
	lis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.GRPCAddr, err)
	}
	server.SetServing(hs, true)
	logger.Info("listening",
		"grpc_addr", lis.Addr().String(),
		"store", cfg.Store,
		"data_dir", cfg.DataDir,
		"max_bundle_weight", cfg.MaxBundleWeight,
		"retention", cfg.Retention.String(),
	)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		// Serve returns nil once GracefulStop or Stop is called.
		if err := srv.Serve(lis); err != nil {
			return fmt.Errorf("serve gRPC: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		stop()
		logger.Info("shutting down")
		server.SetServing(hs, false)
		hs.Shutdown()
		done := make(chan struct{})
		go func() {
			srv.GracefulStop()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(gracefulTimeout):
			logger.Warn("graceful stop timed out; cancelling in-flight calls", "timeout", gracefulTimeout.String())
			srv.Stop()
			<-done
		}
		logger.Info("gRPC server stopped")
		return nil
	})
	return g.Wait()
}
