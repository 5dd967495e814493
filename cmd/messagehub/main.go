// Command messagehub runs the MessageHub service: Save, Peek, PeekContent and
// Dequeue over gRPC (with gRPC health and reflection) and over an HTTP
// gateway for market actors (with /openapi.json, /healthz and /metrics), on
// the embedded store or on Azure Cosmos DB.
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

	"golang.org/x/net/http2"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/test/bufconn"

	"github.com/energydatahub/messagehub/internal/auth"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/blobstore"
	"github.com/energydatahub/messagehub/internal/diskguard"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/gateway"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/cosmos"
	"github.com/energydatahub/messagehub/internal/store/instrumented"
	"github.com/energydatahub/messagehub/internal/store/pebble"
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

// defaultGCPercent is the garbage collector's GOGC unless the environment
// sets one. A Save makes garbage of about the size of its request while the
// heap kept between calls is small, so at Go's default of 100 the collector
// ran dozens of times a second and its assists slowed the one write path
// every Save goes through: at 400, Saves of 1 ran 15-35 % faster and Saves
// of 1,000 over 100 recipients 0-15 %, for 25-75 MiB more resident memory
// (docs/performance.md). The id index, the one large structure, is kept
// outside the heap, so it does not raise the collector's goal.
const defaultGCPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	cfg, err := ParseConfig(os.Args[1:], os.Getenv, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return
	case errors.Is(err, ErrVersion):
		fmt.Print(readBuildInfo())
		return
	case err != nil:
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

// run builds the service, serves until ctx is done, then shuts down in
// order. stop releases the signal handler once shutdown starts, so a second
// signal ends the process at once.
func run(ctx context.Context, stop context.CancelFunc, cfg Config, logger *slog.Logger) (err error) {
	h, err := build(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, h.close()) }()
	return h.serve(ctx, stop)
}

// hub is the running service: its parts, its listeners and what closes them.
type instance struct {
	cfg    Config
	logger *slog.Logger
	tel    *telemetry.Telemetry

	grpcSrv *grpc.Server
	health  *health.Server
	// gatewaySrv serves the gateway's in-process connection: the same
	// service and interceptors, without the per-client limits (that one
	// connection carries every HTTP user).
	gatewaySrv    *grpc.Server
	gatewayHealth *health.Server
	grpcLis       net.Listener
	inProcess     *bufconn.Listener // the gateway's way to the gRPC server
	gatewayConn   *grpc.ClientConn
	httpSrv       *http.Server
	httpLis       net.Listener
	metricsSrv    *http.Server // nil: /metrics is on httpSrv
	metricsLis    net.Listener
	tlsConfig     *tls.Config
	guard         *diskguard.Guard // nil: free disk space is not watched

	closers []func() error // in the order things were opened
}

// onClose registers fn to run at close, before everything opened earlier.
func (h *instance) onClose(fn func() error) { h.closers = append(h.closers, fn) }

// close releases everything in reverse order of opening.
func (h *instance) close() error {
	var errs []error
	for i := len(h.closers) - 1; i >= 0; i-- {
		errs = append(errs, h.closers[i]())
	}
	return errors.Join(errs...)
}

// build opens the store and wires the servers and listeners, releasing
// whatever it opened if a step fails.
func build(ctx context.Context, cfg Config, logger *slog.Logger) (_ *instance, err error) {
	h := &instance{cfg: cfg, logger: logger}
	defer func() {
		if err != nil {
			err = errors.Join(err, h.close())
		}
	}()
	info := readBuildInfo()
	if h.tel, err = telemetry.Setup(ctx, info.Version, os.Getenv); err != nil {
		return nil, err
	}
	h.onClose(func() error {
		fctx, cancel := context.WithTimeout(context.Background(), telemetryFlushTimeout)
		defer cancel()
		if err := h.tel.Shutdown(fctx); err != nil {
			logger.Warn("telemetry shutdown", "error", err)
		}
		return nil
	})
	if err := h.tel.RegisterBuildInfo(info.Version, info.Revision, info.GoVersion); err != nil {
		return nil, err
	}

	opts := []server.Option{
		server.WithMetrics(h.tel.Metrics),
		server.WithStatsHandler(h.tel.GRPCServerHandler()),
		server.WithLimits(server.Limits{
			MaxConcurrentStreams: cfg.Limits.GRPCMaxStreams,
			MaxConnectionAge:     cfg.Limits.GRPCMaxConnAge,
			HandshakeTimeout:     cfg.Limits.GRPCHandshake,
		}),
	}
	gatewayOpts := []gateway.Option{gateway.WithMaxBodyBytes(server.MaxRecvMsgSize + 1<<20), gateway.WithAccessLog(logger),
		gateway.WithMaxBodyMemory(cfg.Limits.HTTPBodyMemory)}
	if cfg.Auth == AuthJWT {
		v, err := auth.NewVerifier(auth.Config{
			JWKSFile: cfg.JWKSFile, Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience, ActorClaim: cfg.JWTActorClaim,
			Logger: logger, Reloads: h.tel.Metrics,
		})
		if err != nil {
			return nil, err
		}
		// Key changes are logged and counted when they happen, not at the
		// next call.
		watchCtx, stopWatch := context.WithCancel(context.Background())
		go v.Watch(watchCtx)
		h.onClose(func() error { stopWatch(); return nil })
		authorizer := auth.NewAuthorizer(v)
		opts = append(opts, server.WithAuthorizer(authorizer))
		gatewayOpts = append(gatewayOpts, gateway.WithAuthentication(auth.LogRefusals(logger, nil, authorizer.Authenticate)))
	}
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("load TLS certificate: %w", err)
		}
		h.tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}

	repo, docs, err := h.openRepository(ctx)
	if err != nil {
		return nil, err
	}
	if docs != nil {
		opts = append(opts, server.WithDocuments(docs, cfg.ContentTimeout))
	}
	h.grpcSrv, h.health = server.NewGRPCServer(repo, logger, opts...)
	h.gatewaySrv, h.gatewayHealth = server.NewGRPCServer(repo, logger, append(opts, server.WithLimits(server.InProcessLimits),
		// Its one connection carries every HTTP user's answers.
		server.WithAnswerBudget(server.AnswerBudget{PerConnection: server.DefaultAnswerBudget.Total}))...)

	if err := h.listen(); err != nil {
		return nil, err
	}
	metrics := h.tel.MetricsHandler()
	if h.metricsLis != nil {
		own := http.NewServeMux()
		own.Handle("GET /metrics", metrics)
		h.metricsSrv = h.newHTTPServer(own)
		metrics = nil // served only on its own listener
	}

	// The gateway reaches the gRPC server over an in-process connection, so
	// that every HTTP call passes the same interceptors (auth, errors,
	// telemetry) as a gRPC call, without a network hop or a TLS handshake.
	h.inProcess = bufconn.Listen(inProcessBufferSize)
	conn, err := grpc.NewClient("passthrough:///messagehub-in-process", append(gateway.InProcessDialOptions(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return h.inProcess.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(h.tel.GRPCClientHandler()),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(server.MaxSendMsgSize),
			grpc.MaxCallSendMsgSize(server.MaxRecvMsgSize),
		),
	)...)
	if err != nil {
		return nil, fmt.Errorf("gateway connection: %w", err)
	}
	h.gatewayConn = conn
	h.onClose(func() error { _ = conn.Close(); return nil })
	handler, err := gateway.New(ctx, conn, metrics, gatewayOpts...)
	if err != nil {
		return nil, err
	}
	h.httpSrv = h.newHTTPServer(h.tel.HTTPHandler(handler))
	return h, nil
}

// openRepository opens the store, the documents next to it and the
// repository over both; the document service is nil without a place for
// documents.
func (h *instance) openRepository(ctx context.Context) (*hub.Hub, *content.Service, error) {
	if h.cfg.Store == StoreEmbedded && h.cfg.MinFreeDisk > 0 {
		h.guard = diskguard.New(h.cfg.DataDir, h.cfg.MinFreeDisk, nil, 0, h.logger)
		h.onClose(func() error { h.guard.Close(); return nil })
	}
	store, err := openStore(ctx, h.cfg, h.logger, h.tel.Metrics, h.guard)
	if err != nil {
		return nil, nil, err
	}
	h.onClose(func() error {
		if err := store.Close(); err != nil {
			return fmt.Errorf("close store: %w", err)
		}
		h.logger.Info("store closed")
		return nil
	})
	repoOpts := hub.Options{MaxBundleWeight: h.cfg.MaxBundleWeight, Retention: h.cfg.Retention}
	// Bundles' documents live next to the embedded store, or in Azure Blob
	// Storage with Cosmos DB, and are served even for a domain whose
	// provider has since been removed.
	documents, err := h.openDocuments(ctx)
	if err != nil {
		return nil, nil, err
	}
	if documents != nil {
		repoOpts.ForgetBundles = content.Forget(documents)
		// Domains with a provider hear of their bundles' dequeues.
		repoOpts.Announce = func(o domain.Origin) bool { _, ok := h.cfg.Content.Providers[o]; return ok }
	}
	// This instance's dequeues wake its notifier; it polls only for other
	// instances' notices, rarely when there are none.
	bell := content.NewBell()
	repoOpts.Announced = bell.Ring
	measured := instrumented.New(store, h.tel.Metrics)
	stopBacklog, err := h.tel.WatchBacklog(measured.Backlog, telemetry.DefaultBacklogInterval, h.logger)
	if err != nil {
		return nil, nil, err
	}
	h.onClose(func() error { stopBacklog(); return nil })
	repo := hub.New(measured, repoOpts, h.logger)
	h.onClose(func() error { repo.Close(); return nil })
	if documents == nil {
		return repo, nil, nil
	}
	stopOutbox, err := h.tel.WatchOutbox(measured.NoticeBacklog, telemetry.DefaultBacklogInterval, h.logger)
	if err != nil {
		return nil, nil, err
	}
	h.onClose(func() error { stopOutbox(); return nil })
	docStore := documents
	if h.guard != nil {
		docStore = diskguard.Documents(documents, h.guard)
	}
	var grace time.Duration
	if h.cfg.Store == StoreCosmos {
		// Instances share the outbox: each tells its own dequeues, and
		// another's only once they are overdue.
		grace = h.cfg.Content.NoticeGrace
	}
	docs, closeDocs, err := contentService(h.cfg.Content, docStore, repo, measured, grace, bell, h.tel.Metrics, h.logger)
	if err != nil {
		return nil, nil, err
	}
	// Closed before the repository: builds ask it whether bundles are pending.
	h.onClose(func() error { closeDocs(); return nil })
	return repo, docs, nil
}

// openDocuments opens where bundles' documents are kept: a folder next to
// the embedded store, or Azure Blob Storage with Cosmos DB; nil with Cosmos
// DB and no blob storage configured.
func (h *instance) openDocuments(ctx context.Context) (content.Store, error) {
	if h.cfg.Store == StoreEmbedded {
		dir, err := content.OpenDirStore(filepath.Join(h.cfg.DataDir, "content"))
		if err != nil {
			return nil, err
		}
		h.onClose(dir.Close)
		return dir, nil
	}
	blob := h.cfg.Content.Blob
	if blob.ConnectionString == "" && blob.URL == "" {
		return nil, nil
	}
	docs, err := blobstore.Open(ctx, blobstore.Config{
		ConnectionString: blob.ConnectionString, ServiceURL: blob.URL, Container: blob.Container,
		Provision: h.cfg.Cosmos.Provision,
	})
	if err != nil {
		return nil, err
	}
	return docs, nil
}

// listen opens the listeners; with --auth none every one must be on loopback.
func (h *instance) listen() error {
	for _, l := range []struct {
		addr string
		into *net.Listener
	}{{h.cfg.GRPCAddr, &h.grpcLis}, {h.cfg.HTTPAddr, &h.httpLis}, {h.cfg.MetricsAddr, &h.metricsLis}} {
		if l.addr == "" {
			continue
		}
		lis, err := net.Listen("tcp", l.addr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", l.addr, err)
		}
		h.onClose(func() error { _ = lis.Close(); return nil })
		if err := checkBound(h.cfg.Auth, lis.Addr()); err != nil {
			return err
		}
		*l.into = lis
	}
	return nil
}

// limited bounds the connections of an HTTP listener: the HTTP server
// terminates TLS itself, so connections are read below TLS, where a
// client's first byte (its hello, or its request) tells it is not silent.
func (h *instance) limited(lis net.Listener) net.Listener {
	return server.LimitListener(lis, h.cfg.Limits.MaxConnections, 1)
}

// checkBound refuses, with --auth none, a listener bound off loopback: the
// configuration is checked before listening, but "localhost" might not
// resolve to loopback, so what was bound is checked too.
func checkBound(auth string, bound net.Addr) error {
	if auth != AuthNone {
		return nil
	}
	if a, ok := bound.(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
		return fmt.Errorf("refusing to start: --auth none is only allowed on loopback, but a listener is bound to %s", bound)
	}
	return nil
}

// httpMaxHeaderBytes bounds an HTTP request's headers (HTTP/2: its header
// list once decoded): a bearer token and the usual headers are a few KiB.
// Go's default, 1 MiB, let each connection hold that much before any check.
const httpMaxHeaderBytes = 64 << 10

func (h *instance) newHTTPServer(handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		TLSConfig:         h.tlsConfig,
		ReadHeaderTimeout: min(10*time.Second, h.cfg.Limits.HTTPReadTimeout),
		ReadTimeout:       h.cfg.Limits.HTTPReadTimeout,
		WriteTimeout:      h.cfg.Limits.HTTPWriteTimeout,
		IdleTimeout:       h.cfg.Limits.HTTPIdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(h.logger.Handler(), slog.LevelWarn),
	}
}

// serve runs the servers until ctx is done, then shuts them down.
func (h *instance) serve(ctx context.Context, stop context.CancelFunc) error {
	server.SetServing(h.health, true)
	server.SetServing(h.gatewayHealth, true)
	attrs := []any{
		"grpc_addr", h.grpcLis.Addr().String(),
		"http_addr", h.httpLis.Addr().String(),
		"auth", h.cfg.Auth,
		"tls", h.tlsConfig != nil,
		"tracing", h.tel.Tracing(),
		"store", h.cfg.Store,
		"data_dir", h.cfg.DataDir,
		"max_bundle_weight", h.cfg.MaxBundleWeight,
		"retention", h.cfg.Retention.String(),
		"version", readBuildInfo().Version,
	}
	if h.metricsLis != nil {
		attrs = append(attrs, "metrics_addr", h.metricsLis.Addr().String())
	}
	h.logger.Info("listening", attrs...)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		// Serve returns nil once GracefulStop or Stop is called.
		// Bounded above TLS: a connection is established once its HTTP/2
		// preface has been read, so a silent one, or one stalled in TLS,
		// gives its place up to a new one.
		lis := server.LimitListener(withTLS(h.grpcLis, h.tlsConfig), h.cfg.Limits.MaxConnections, len(http2.ClientPreface))
		if err := h.grpcSrv.Serve(lis); err != nil {
			return fmt.Errorf("serve gRPC: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := h.gatewaySrv.Serve(h.inProcess); err != nil {
			return fmt.Errorf("serve gRPC in process: %w", err)
		}
		return nil
	})
	g.Go(func() error { return serveHTTP(h.httpSrv, h.limited(h.httpLis), h.tlsConfig) })
	if h.metricsSrv != nil {
		g.Go(func() error { return serveHTTP(h.metricsSrv, h.limited(h.metricsLis), h.tlsConfig) })
	}
	g.Go(func() error {
		<-gctx.Done()
		stop()
		h.shutdown()
		return nil
	})
	return g.Wait()
}

func serveHTTP(srv *http.Server, lis net.Listener, tlsConfig *tls.Config) error {
	var err error
	if tlsConfig != nil {
		err = srv.ServeTLS(lis, "", "") // the certificate is in TLSConfig
	} else {
		err = srv.Serve(lis)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve HTTP on %s: %w", lis.Addr(), err)
	}
	return nil
}

// shutdown turns health to NOT_SERVING and stops the servers, letting
// in-flight calls finish within gracefulTimeout before cutting them off.
func (h *instance) shutdown() {
	h.logger.Info("shutting down")
	for _, hs := range []*health.Server{h.health, h.gatewayHealth} {
		server.SetServing(hs, false)
		hs.Shutdown()
	}
	deadline := time.Now().Add(gracefulTimeout)

	sctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for _, srv := range []*http.Server{h.httpSrv, h.metricsSrv} {
		if srv == nil {
			continue
		}
		if err := srv.Shutdown(sctx); err != nil {
			h.logger.Warn("HTTP graceful shutdown timed out; closing connections", "error", err)
			_ = srv.Close()
		}
	}
	h.logger.Info("HTTP server stopped")
	_ = h.gatewayConn.Close() // its calls have ended with the HTTP server

	done := make(chan struct{})
	go func() {
		h.gatewaySrv.GracefulStop()
		h.grpcSrv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		h.logger.Warn("graceful stop timed out; cancelling in-flight calls", "timeout", gracefulTimeout.String())
		h.gatewaySrv.Stop()
		h.grpcSrv.Stop()
		<-done
	}
	h.logger.Info("gRPC server stopped")
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

// openStore opens the configured store backend; the embedded store's writes
// go through guard (nil: none), which also says whether it is opened
// read-only.
func openStore(ctx context.Context, cfg Config, logger *slog.Logger, recorder telemetry.RequestRecorder, guard *diskguard.Guard) (store.Store, error) {
	if cfg.Store == StoreCosmos {
		store, err := cosmos.Open(ctx, cosmos.Config{
			Endpoint:        cfg.Cosmos.Endpoint,
			Key:             cfg.Cosmos.Key,
			Database:        cfg.Cosmos.Database,
			Provision:       cfg.Cosmos.Provision,
			IDBuckets:       cfg.Cosmos.IDBuckets,
			LegacyIDBuckets: cfg.Cosmos.LegacyIDBuckets,
			Throughput:      cfg.Cosmos.Throughput,
			Retention:       cfg.Retention,
			Logger:          logger,
			OnRequest:       recorder.RecordRequest,
		})
		if err != nil {
			return nil, fmt.Errorf("open cosmos store at %s: %w", cfg.Cosmos.Endpoint, err)
		}
		return store, nil
	}
	if guard == nil {
		store, err := pebble.Open(cfg.DataDir, logger)
		if err != nil {
			return nil, err // it names the directory
		}
		return store, nil
	}
	store, err := pebble.OpenWith(cfg.DataDir, logger, pebble.Options{ReadOnly: guard.ReadOnlyAtStart(), Room: guard.Room})
	if err != nil {
		return nil, err // it names the directory
	}
	return diskguard.Store(store, guard), nil
}
