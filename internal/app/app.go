// Package app is the MessageHub service as one value: New opens the store
// and the listeners and wires the gRPC servers, the HTTP gateway, the
// documents of bundles and telemetry; Run serves until its context ends;
// Close shuts everything down, within Config.ShutdownTimeout.
//
// cmd/messagehub parses the configuration and runs an App; tests run one in
// process.
//
// The files cut along the seams: config.go the settings, listen.go the
// listeners and TLS, store.go the store and the hub over it,
// content.go the documents of bundles, shutdown.go the order and the bounds
// of shutdown.
package app

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/test/bufconn"

	"github.com/energydatahub/messagehub/internal/admin"
	"github.com/energydatahub/messagehub/internal/auth"
	"github.com/energydatahub/messagehub/internal/diskguard"
	"github.com/energydatahub/messagehub/internal/gateway"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/internal/telemetry"
)

// inProcessBufferSize is the buffer of each direction of the gateway's
// in-process connection to the gRPC server.
const inProcessBufferSize = 1 << 20

// App is the running service: its parts, its listeners and what closes them.
type App struct {
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
	providerCreds []grpc.DialOption // how content providers are dialed
	guard         *diskguard.Guard  // nil: free disk space is not watched
	backup        backup            // the Admin service's Backup (backup.go)

	closers []closer // in the order things were opened

	mu      sync.Mutex
	running bool // Run has been called

	stopOnce    sync.Once
	stopWaits   func()        // wakes the Peeks that wait, so that they answer now
	waiting     func() int    // how many Peeks wait
	stopStarted time.Time     // when shutdown started; set by stopOnce
	stopping    chan struct{} // closed when shutdown starts
	released    chan struct{} // closed once every closer has run
	// closeOnce runs Close's work once; later calls return closeErr.
	closeOnce sync.Once
	closeErr  error
}

// closer releases one thing New opened; name says what, in logs and errors.
type closer struct {
	name string
	fn   func() error
}

// onClose registers fn to run at close, before everything opened earlier.
func (a *App) onClose(name string, fn func() error) {
	a.closers = append(a.closers, closer{name, fn})
}

// New opens the listeners and the store and wires the servers, releasing
// whatever it opened if a step fails. ctx bounds the opening (a remote
// store, the gateway's set-up); the App serves once Run is called.
func New(ctx context.Context, cfg Config) (_ *App, err error) {
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &App{cfg: cfg, logger: cfg.Logger, stopping: make(chan struct{}), released: make(chan struct{})}
	defer func() {
		if err != nil {
			err = errors.Join(err, a.runClosers(time.Now().Add(a.shutdownTimeout())))
		}
	}()
	build := cfg.Build.orDefaults()
	if a.tel, err = telemetry.Setup(ctx, build.Version, os.Getenv); err != nil {
		return nil, err
	}
	a.onClose("telemetry", a.flushTelemetry)
	if err := a.tel.RegisterBuildInfo(build.Version, build.Revision, build.GoVersion); err != nil {
		return nil, err
	}

	opts := []server.Option{
		server.WithMetrics(a.tel.Metrics),
		server.WithStatsHandler(a.tel.GRPCServerHandler()),
		server.WithLimits(server.Limits{
			MaxConcurrentStreams: cfg.Limits.GRPCMaxStreams,
			MaxConnectionAge:     cfg.Limits.GRPCMaxConnAge,
			HandshakeTimeout:     cfg.Limits.GRPCHandshake,
			MaxSaveMemory:        cfg.Limits.GRPCSaveMemory,
		}),
		// Health watches end as the drain begins, once told NOT_SERVING:
		// the drain waits for every call.
		server.WithDraining(a.stopping),
	}
	gatewayOpts := []gateway.Option{gateway.WithMaxBodyBytes(server.MaxRecvMsgSize + 1<<20), gateway.WithAccessLog(a.logger),
		gateway.WithMaxBodyMemory(cfg.Limits.HTTPBodyMemory)}
	if cfg.Auth == AuthJWT {
		v, err := auth.NewVerifier(auth.Config{
			JWKSFile: cfg.JWKSFile, Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience, ActorClaim: cfg.JWTActorClaim,
			Logger: a.logger, Reloads: a.tel.Metrics,
		})
		if err != nil {
			return nil, err
		}
		// Key changes are logged and counted when they happen, not at the
		// next call.
		watchCtx, stopWatch := context.WithCancel(context.Background())
		go v.Watch(watchCtx)
		a.onClose("JWKS watch", func() error { stopWatch(); return nil })
		authorizer := auth.NewAuthorizer(v)
		opts = append(opts, server.WithAuthorizer(authorizer))
		gatewayOpts = append(gatewayOpts, gateway.WithAuthentication(auth.LogRefusals(a.logger, nil, authorizer.Admit)))
	}
	if a.tlsConfig, err = loadTLS(cfg); err != nil {
		return nil, err
	}
	if a.providerCreds, err = cfg.Content.dialOptions(); err != nil {
		return nil, err
	}
	// The files above and the listeners before the store: a file that
	// cannot be read or an address in use (a second instance, a typo)
	// fails the start before a store is created, provisioned or opened.
	// Connections made meanwhile wait in the listeners' backlogs until Run
	// serves them.
	if err := a.listen(); err != nil {
		return nil, err
	}

	core, docs, err := a.openHub(ctx)
	if err != nil {
		return nil, err
	}
	if docs != nil {
		opts = append(opts, server.WithDocuments(docs, cfg.ContentTimeout))
	}
	auditLog, err := a.openAudit(core)
	if err != nil {
		return nil, err
	}
	opts = append(opts, server.WithAudit(auditLog, auth.Subject))
	if cfg.Store == StoreEmbedded {
		// Every Save of an embedded store goes through this instance and
		// wakes the Peeks waiting for it: no re-check is needed, but by
		// those beyond the waiters' bounds (every DefaultWaitRecheck).
		opts = append(opts, server.WithWaitRecheck(time.Hour))
	} else if cfg.waitRecheck > 0 {
		opts = append(opts, server.WithWaitRecheck(cfg.waitRecheck))
	}
	a.grpcSrv, a.health = server.NewGRPCServer(core, a.logger, opts...)
	a.gatewaySrv, a.gatewayHealth = server.NewGRPCServer(core, a.logger, append(opts, server.WithLimits(server.InProcessLimits),
		// Only the gateway reaches it: the HTTP client it names is believed.
		server.WithForwardedClient(),
		// Its one connection carries every HTTP user's answers.
		server.WithAnswerBudget(server.AnswerBudget{PerConnection: server.DefaultAnswerBudget.Total}))...)
	// The Admin service, on both servers (gRPC and the gateway's): the
	// authorizer lets only the admin role call it.
	admin.Register(a.grpcSrv, core, admin.WithBackup(a.backup))
	admin.Register(a.gatewaySrv, core, admin.WithBackup(a.backup))

	metrics := a.tel.MetricsHandler()
	if a.metricsLis != nil {
		own := http.NewServeMux()
		own.Handle("GET /metrics", metrics)
		var handler http.Handler = own
		if cfg.Auth == AuthNone { // loopback only, as the gateway's listener
			handler = loopbackHost(handler)
		}
		a.metricsSrv = a.newHTTPServer(handler)
		metrics = nil // served only on its own listener
	}

	// The gateway reaches the gRPC server over an in-process connection, so
	// that every HTTP call passes the same interceptors (auth, errors,
	// telemetry) as a gRPC call, without a network hop or a TLS handshake.
	a.inProcess = bufconn.Listen(inProcessBufferSize)
	conn, err := grpc.NewClient("passthrough:///messagehub-in-process", append(gateway.InProcessDialOptions(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return a.inProcess.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(a.tel.GRPCClientHandler()),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(server.MaxSendMsgSize),
			grpc.MaxCallSendMsgSize(server.MaxRecvMsgSize),
		),
	)...)
	if err != nil {
		return nil, fmt.Errorf("gateway connection: %w", err)
	}
	a.gatewayConn = conn
	a.onClose("gateway connection", func() error { _ = conn.Close(); return nil })
	handler, err := gateway.New(ctx, conn, metrics, gatewayOpts...)
	if err != nil {
		return nil, err
	}
	// A page of another site in a browser (the operator's, on the hub's
	// host with --auth none) may send requests that need no CORS preflight
	// (a POST of a text/plain body, which the gateway decodes as JSON):
	// cross-origin requests that are not reads are refused (403).
	// Non-browser clients send no Origin nor Sec-Fetch-Site and pass.
	handler = http.NewCrossOriginProtection().Handler(handler)
	if cfg.Auth == AuthNone {
		handler = loopbackHost(sameOriginOnly(handler))
	}
	a.httpSrv = a.newHTTPServer(a.tel.HTTPHandler(handler, a.HTTPAddr()))
	return a, nil
}

// GRPCAddr is the address the gRPC server is bound to (with port 0 in the
// configuration, the port picked).
func (a *App) GRPCAddr() string { return a.grpcLis.Addr().String() }

// HTTPAddr is the address the HTTP gateway is bound to.
func (a *App) HTTPAddr() string { return a.httpLis.Addr().String() }

// MetricsAddr is the address of the listener of its own for /metrics; empty
// when /metrics is on the HTTP gateway.
func (a *App) MetricsAddr() string {
	if a.metricsLis == nil {
		return ""
	}
	return a.metricsLis.Addr().String()
}

// Run serves until ctx ends, Close is called or a server fails, then stops
// the servers (shutdown.go) and returns; Close releases the rest. It
// returns nil unless a server failed.
func (a *App) Run(ctx context.Context) error {
	a.mu.Lock()
	if a.running {
		a.mu.Unlock()
		return errors.New("app: Run called more than once")
	}
	a.running = true
	a.mu.Unlock()

	server.SetServing(a.health, true)
	server.SetServing(a.gatewayHealth, true)
	a.logger.Info("listening", a.describe()...)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		// Bounded above TLS: a connection is established once its HTTP/2
		// preface has been read, so a silent one, or one stalled in TLS,
		// gives its place up to a new one.
		lis := server.LimitListener(withTLS(a.grpcLis, a.tlsConfig), a.cfg.Limits.MaxConnections, len(http2.ClientPreface))
		return serveGRPC(a.grpcSrv, lis, "gRPC")
	})
	g.Go(func() error { return serveGRPC(a.gatewaySrv, a.inProcess, "gRPC in process") })
	g.Go(func() error { return serveHTTP(a.httpSrv, a.limited(a.httpLis), a.tlsConfig) })
	if a.metricsSrv != nil {
		g.Go(func() error { return serveHTTP(a.metricsSrv, a.limited(a.metricsLis), a.tlsConfig) })
	}
	g.Go(func() error {
		select {
		case <-gctx.Done():
		case <-a.stopping: // Close was called
		}
		a.stopServing()
		return nil
	})
	return g.Wait()
}

// serveGRPC serves srv on lis until it is stopped; a server stopped before
// it started serving (Close racing Run) is no failure either.
func serveGRPC(srv *grpc.Server, lis net.Listener, what string) error {
	if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve %s: %w", what, err)
	}
	return nil
}

// describe is what the "listening" line says.
func (a *App) describe() []any {
	attrs := []any{
		"grpc_addr", a.GRPCAddr(),
		"http_addr", a.HTTPAddr(),
		"auth", a.cfg.Auth,
		"tls", a.tlsConfig != nil,
		"tracing", a.tel.Tracing(),
		"store", a.cfg.Store,
		"data_dir", a.cfg.DataDir,
		"max_bundle_weight", a.cfg.MaxBundleWeight,
		"retention", a.cfg.Retention.String(),
		"version", a.cfg.Build.orDefaults().Version,
	}
	if a.metricsLis != nil {
		attrs = append(attrs, "metrics_addr", a.MetricsAddr())
	}
	return attrs
}

// orDefaults fills what the build did not say.
func (b Build) orDefaults() Build {
	b.Version, b.Revision = cmp.Or(b.Version, "(devel)"), cmp.Or(b.Revision, "unknown")
	return b
}
