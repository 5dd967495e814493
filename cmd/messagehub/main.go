// Command messagehub runs the MessageHub service: Save, Peek and Dequeue over
// gRPC (with gRPC health and reflection) and over an HTTP gateway for market
// actors (with /openapi.json, /healthz and /metrics), on the embedded store.
//
// Configuration is by flags with environment fallbacks; run with -h to list
// them. SIGTERM or SIGINT stops it gracefully: health turns NOT_SERVING,
// in-flight calls finish (bounded by a timeout), then the store is closed.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"golang.org/x/net/netutil"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/energydatahub/messagehub/internal/auth"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/gateway"
	"github.com/energydatahub/messagehub/internal/repository"
	"github.com/energydatahub/messagehub/internal/repository/cosmos"
	"github.com/energydatahub/messagehub/internal/repository/embedded"
	"github.com/energydatahub/messagehub/internal/repository/instrumented"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/internal/telemetry"
)

// gracefulTimeout bounds how long shutdown waits for in-flight HTTP and gRPC
// calls together before cutting them off, so the process exits well within
// 15 s of SIGTERM.
const gracefulTimeout = 10 * time.Second

// telemetryFlushTimeout bounds the flush of pending spans at exit.
const telemetryFlushTimeout = 2 * time.Second

// inProcessBufferSize is the buffer of each direction of the gateway's
// in-process connection to the gRPC server.
const inProcessBufferSize = 1 << 20

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
	tel, err := telemetry.Setup(ctx, version(), os.Getenv)
	if err != nil {
		return err
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), telemetryFlushTimeout)
		defer cancel()
		if terr := tel.Shutdown(fctx); terr != nil {
			logger.Warn("telemetry shutdown", "error", terr)
		}
	}()

	opts := []server.Option{
		server.WithMetrics(tel.Metrics),
		server.WithStatsHandler(tel.GRPCServerHandler()),
		server.WithLimits(server.Limits{
			MaxConcurrentStreams: cfg.Limits.GRPCMaxStreams,
			MaxConnectionAge:     cfg.Limits.GRPCMaxConnAge,
		}),
	}
	gatewayOpts := []gateway.Option{gateway.WithMaxBodyBytes(server.MaxRecvMsgSize + 1<<20)}
	if cfg.Auth == AuthJWT {
		v, err := auth.NewVerifier(auth.Config{
			JWKSFile: cfg.JWKSFile, Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience, ActorClaim: cfg.JWTActorClaim,
		})
		if err != nil {
			return err
		}
		authorizer := auth.NewAuthorizer(v)
		opts = append(opts, server.WithAuthorizer(authorizer))
		gatewayOpts = append(gatewayOpts, gateway.WithAuthentication(authorizer.Authenticate))
	}
	var tlsConfig *tls.Config
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return fmt.Errorf("load TLS certificate: %w", err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}

	store, err := openStore(ctx, cfg, logger, tel.Metrics)
	if err != nil {
		return err
	}
	repoOpts := repository.Options{MaxBundleWeight: cfg.MaxBundleWeight, Retention: cfg.Retention}
	// Bundles' documents live next to the embedded store, and are served
	// even for a domain whose provider has since been removed.
	var documents *content.DirStore
	if cfg.Store == StoreEmbedded {
		if documents, err = content.OpenDirStore(filepath.Join(cfg.DataDir, "content")); err != nil {
			_ = store.Close()
			return err
		}
		repoOpts.ForgetBundles = content.Forget(documents)
	}
	repo := repository.New(instrumented.New(store, tel.Metrics), repoOpts, logger)
	// Close in reverse order of opening, after the servers have stopped.
	defer func() {
		repo.Close()
		if documents != nil {
			_ = documents.Close()
		}
		if cerr := store.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close store: %w", cerr))
		} else {
			logger.Info("store closed")
		}
	}()
	if documents != nil {
		docs, closeDocs, err := contentService(cfg.Content, documents, repo, logger)
		if err != nil {
			return err
		}
		defer closeDocs() // before the repository closes: builds ask it whether bundles are pending
		opts = append(opts, server.WithDocuments(docs, cfg.ContentTimeout))
	}

	srv, hs := server.NewGRPCServer(repo, logger, opts...)
	grpcLis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.GRPCAddr, err)
	}
	defer func() { _ = grpcLis.Close() }()
	httpLis, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	defer func() { _ = httpLis.Close() }()
	if cfg.Auth == AuthNone {
		// "localhost" might not resolve to loopback: check what was bound.
		for _, lis := range []net.Listener{grpcLis, httpLis} {
			if a, ok := lis.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
				return fmt.Errorf("refusing to start: --auth none is only allowed on loopback, but a listener is bound to %s", lis.Addr())
			}
		}
	}

	// The gateway reaches the gRPC server over an in-process connection, so
	// that every HTTP call passes the same interceptors (auth, errors,
	// telemetry) as a gRPC call, without a network hop or a TLS handshake.
	inProcess := bufconn.Listen(inProcessBufferSize)
	conn, err := grpc.NewClient("passthrough:///messagehub-in-process",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return inProcess.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(tel.GRPCClientHandler()),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(server.MaxSendMsgSize),
			grpc.MaxCallSendMsgSize(server.MaxRecvMsgSize),
		),
	)
	if err != nil {
		return fmt.Errorf("gateway connection: %w", err)
	}
	defer func() { _ = conn.Close() }()
	handler, err := gateway.New(ctx, conn, tel.MetricsHandler(), gatewayOpts...)
	if err != nil {
		return err
	}
	httpSrv := &http.Server{
		Handler:           tel.HTTPHandler(handler),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: min(10*time.Second, cfg.Limits.HTTPReadTimeout),
		ReadTimeout:       cfg.Limits.HTTPReadTimeout,
		WriteTimeout:      cfg.Limits.HTTPWriteTimeout,
		IdleTimeout:       cfg.Limits.HTTPIdleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}

	server.SetServing(hs, true)
	logger.Info("listening",
		"grpc_addr", grpcLis.Addr().String(),
		"http_addr", httpLis.Addr().String(),
		"auth", cfg.Auth,
		"tls", tlsConfig != nil,
		"tracing", tel.Tracing(),
		"store", cfg.Store,
		"data_dir", cfg.DataDir,
		"max_bundle_weight", cfg.MaxBundleWeight,
		"retention", cfg.Retention.String(),
	)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		// Serve returns nil once GracefulStop or Stop is called.
		if err := srv.Serve(withTLS(netutil.LimitListener(grpcLis, cfg.Limits.MaxConnections), tlsConfig)); err != nil {
			return fmt.Errorf("serve gRPC: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := srv.Serve(inProcess); err != nil {
			return fmt.Errorf("serve gRPC in process: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		var err error
		limited := netutil.LimitListener(httpLis, cfg.Limits.MaxConnections)
		if tlsConfig != nil {
			err = httpSrv.ServeTLS(limited, "", "") // the certificate is in TLSConfig
		} else {
			err = httpSrv.Serve(limited)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve HTTP: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		stop()
		logger.Info("shutting down")
		server.SetServing(hs, false)
		hs.Shutdown()
		deadline := time.Now().Add(gracefulTimeout)

		sctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		if err := httpSrv.Shutdown(sctx); err != nil {
			logger.Warn("HTTP graceful shutdown timed out; closing connections", "error", err)
			_ = httpSrv.Close()
		}
		logger.Info("HTTP server stopped")
		_ = conn.Close()

		done := make(chan struct{})
		go func() {
			srv.GracefulStop()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(time.Until(deadline)):
			logger.Warn("graceful stop timed out; cancelling in-flight calls", "timeout", gracefulTimeout.String())
			srv.Stop()
			<-done
		}
		logger.Info("gRPC server stopped")
		return nil
	})
	return g.Wait()
}

// withTLS terminates TLS at the gRPC listener when tlsConfig is set, rather
// than with gRPC transport credentials, which would apply to every listener
// of the server: the gateway's in-process connection then needs no TLS.
func withTLS(lis net.Listener, tlsConfig *tls.Config) net.Listener {
	if tlsConfig == nil {
		return lis
	}
	c := tlsConfig.Clone()
	c.NextProtos = []string{"h2"} // gRPC clients insist on ALPN h2
	return tls.NewListener(lis, c)
}

// version is the module version the binary was built from, if known.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// openStore opens the configured store backend.
func openStore(ctx context.Context, cfg Config, logger *slog.Logger, recorder telemetry.RequestRecorder) (repository.Store, error) {
	if cfg.Store == StoreCosmos {
		store, err := cosmos.Open(ctx, cosmos.Config{
			Endpoint:  cfg.Cosmos.Endpoint,
			Key:       cfg.Cosmos.Key,
			Database:  cfg.Cosmos.Database,
			Provision: cfg.Cosmos.Provision,
			IDBuckets: cfg.Cosmos.IDBuckets,
			Retention: cfg.Retention,
			Logger:    logger,
			OnRequest: recorder.RecordRequest,
		})
		if err != nil {
			return nil, fmt.Errorf("open cosmos store at %s: %w", cfg.Cosmos.Endpoint, err)
		}
		return store, nil
	}
	store, err := embedded.Open(cfg.DataDir, logger)
	if err != nil {
		return nil, err // it names the directory
	}
	return store, nil
}
