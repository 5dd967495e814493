package server

import (
	"context"
	"log/slog"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/stats"

	"github.com/energydatahub/messagehub/codec"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/lograte"
	"github.com/energydatahub/messagehub/internal/telemetry"
)

// Message size limits. A full Save (10,000 notifications with the longest
// allowed types) is about 6 MiB; a bundle of 51,200 notifications, each with
// its own 255-character document type, about 16 MiB. The limits leave room
// above that while still bounding what one call can make the server allocate.
const (
	MaxRecvMsgSize = 32 << 20
	MaxSendMsgSize = 64 << 20
)

// MaxHeaderListSize bounds a call's header list, counted as HPACK counts it
// (each field's name and value plus 32 bytes), once decoded: 8 times what a
// client with a JWT of a few KiB sends. gRPC's default, 16 MiB, let 100
// streams of 7 KiB header blocks each hold 16 MB.
const MaxHeaderListSize = 16 << 10

// ServiceName is the fully qualified name of the MessageHub service, also the
// name its health status is reported under.
const ServiceName = "messagehub.v1.MessageHub"

// Authorizer decides whether a call may proceed. It returns the context the
// handler runs with (e.g. carrying the caller) and may rewrite the request
// (e.g. fill in the caller as recipient); a refusal is a domain error
// (domain.ErrUnauthenticated, domain.ErrPermissionDenied) that ToStatus maps.
// Every call is authorized first with req nil, before its request is read,
// and then with its request and the context the first call returned.
type Authorizer interface {
	Authorize(ctx context.Context, fullMethod string, req any) (context.Context, error)
}

// Option configures NewGRPCServer.
type Option func(*options)

type options struct {
	authorizer     Authorizer
	metrics        *telemetry.Metrics
	stats          []stats.Handler
	documents      Documents
	contentTimeout time.Duration
	limits         Limits
	answers        AnswerBudget
	waitRecheck    time.Duration
	// forwardedClient: the gateway's in-process server (WithForwardedClient).
	forwardedClient bool
	auditor         Auditor                          // nil: no audit log (audit.go)
	subject         func(ctx context.Context) string // the caller, for the audit log
	// draining ends the health watches as the server drains (health.go).
	draining <-chan struct{}
}

// Limits bound what clients can make the server hold. The defaults suit a
// public deployment.
type Limits struct {
	// MaxConcurrentStreams is the most calls one connection may have open.
	MaxConcurrentStreams uint32
	// MaxConnectionAge closes connections after this long (with a grace for
	// calls in flight), so that no client keeps one forever and load spreads
	// over instances.
	MaxConnectionAge      time.Duration
	MaxConnectionAgeGrace time.Duration
	// MaxConnectionIdle closes connections without calls after this long.
	MaxConnectionIdle time.Duration
	// HandshakeTimeout bounds how long a new connection may take to
	// complete its handshake (TLS and HTTP/2's preface and settings).
	HandshakeTimeout time.Duration
	// MaxHeaderListSize bounds a call's headers once decoded: HPACK lets a
	// block of a few KiB refer to one large field thousands of times.
	MaxHeaderListSize uint32
	// MaxSaveMemory bounds the bytes of Save requests the server holds at
	// once, decoded and waiting for or in their group's commit (see
	// saveBudget): the hub's save queue alone takes 1,024 Saves before
	// their callers wait, still holding theirs.
	MaxSaveMemory int64
}

// DefaultLimits are the limits without WithLimits.
var DefaultLimits = Limits{
	MaxConcurrentStreams:  100,
	MaxConnectionAge:      30 * time.Minute,
	MaxConnectionAgeGrace: time.Minute,
	MaxConnectionIdle:     5 * time.Minute,
	HandshakeTimeout:      10 * time.Second,
	MaxHeaderListSize:     MaxHeaderListSize,
	MaxSaveMemory:         DefaultMaxSaveMemory,
}

// InProcessLimits are for the server behind the HTTP gateway's in-process
// connection: that one connection carries every HTTP user's calls, whose
// resources the HTTP server bounds already, so it must not be held to one
// client's stream cap or be closed for its age.
var InProcessLimits = Limits{
	MaxConcurrentStreams:  math.MaxUint32,
	MaxConnectionAge:      infinity,
	MaxConnectionAgeGrace: infinity,
	MaxConnectionIdle:     infinity,
	HandshakeTimeout:      10 * time.Second,
	// The HTTP server bounds the headers it takes (http.Server's
	// MaxHeaderBytes), and the gateway forwards some of them as metadata:
	// this must be above that, or a request the HTTP server took would
	// fail on its way to the gRPC server.
	MaxHeaderListSize: 1 << 20,
	// The HTTP server bounds the bodies of the requests in flight
	// (the gateway's WithMaxBodyMemory) until they are answered, which is
	// after their call here returns: counting them again would refuse
	// HTTP Saves the HTTP server took.
	MaxSaveMemory: math.MaxInt64,
}

// infinity is what gRPC's keepalive takes for "never".
const infinity = time.Duration(math.MaxInt64)

// Keepalive: the server pings idle connections to find dead peers, and
// refuses clients that ping more often than keepaliveMinTime. The Go client
// pings after 20 s without a byte (client.KeepalivePolicy), during calls and
// between them: keepaliveMinTime must stay below that.
const (
	keepaliveTime    = time.Minute
	keepaliveTimeout = 20 * time.Second
	keepaliveMinTime = 10 * time.Second
)

// WithLimits replaces DefaultLimits; zero fields keep their defaults.
func WithLimits(l Limits) Option {
	return func(o *options) {
		setPositive(&o.limits.MaxConcurrentStreams, l.MaxConcurrentStreams)
		setPositive(&o.limits.MaxConnectionAge, l.MaxConnectionAge)
		setPositive(&o.limits.MaxConnectionAgeGrace, l.MaxConnectionAgeGrace)
		setPositive(&o.limits.MaxConnectionIdle, l.MaxConnectionIdle)
		setPositive(&o.limits.HandshakeTimeout, l.HandshakeTimeout)
		setPositive(&o.limits.MaxHeaderListSize, l.MaxHeaderListSize)
		setPositive(&o.limits.MaxSaveMemory, l.MaxSaveMemory)
	}
}

// longestJitteredAge is the longest maximum age gRPC can add its jitter of
// up to a tenth to without overflowing a time.Duration: a longer one would
// give the connection a negative age timer, which closes it at once.
const longestJitteredAge = infinity / 11 * 10

// keepaliveParams are the keepalive parameters of l. A maximum age longer
// than longestJitteredAge (about 266 years) is "never".
func keepaliveParams(l Limits) keepalive.ServerParameters {
	age := l.MaxConnectionAge
	if age > longestJitteredAge {
		age = infinity
	}
	return keepalive.ServerParameters{
		MaxConnectionIdle:     l.MaxConnectionIdle,
		MaxConnectionAge:      age,
		MaxConnectionAgeGrace: l.MaxConnectionAgeGrace,
		Time:                  keepaliveTime,
		Timeout:               keepaliveTimeout,
	}
}

// setPositive sets *into to v unless v is zero (an option's "keep the
// default").
func setPositive[T uint32 | int64 | time.Duration](into *T, v T) {
	if v > 0 {
		*into = v
	}
}

// WithAuthorizer checks every call with a; without it every call is allowed.
func WithAuthorizer(a Authorizer) Option { return func(o *options) { o.authorizer = a } }

// WithMetrics records the domain metrics of Save and Peek in m.
func WithMetrics(m *telemetry.Metrics) Option { return func(o *options) { o.metrics = m } }

// WithStatsHandler adds a gRPC stats handler (e.g. otelgrpc's).
func WithStatsHandler(h stats.Handler) Option {
	return func(o *options) { o.stats = append(o.stats, h) }
}

// NewGRPCServer builds a gRPC server serving MessageHub over hub, gRPC health
// and server reflection. Health starts NOT_SERVING for both the overall status
// ("") and ServiceName; the caller sets SERVING once the store is open (see
// SetServing). Health and reflection need no credentials.
func NewGRPCServer(hub Hub, logger *slog.Logger, opts ...Option) (*grpc.Server, *health.Server) {
	o := options{metrics: telemetry.Discard(), limits: DefaultLimits, answers: DefaultAnswerBudget}
	for _, opt := range opts {
		opt(&o)
	}
	// The access log comes first so that it sees the status the client gets.
	access := &accessLog{logger: logger, limit: lograte.Limiter{Max: authFailuresPerSecond}, now: time.Now, forwarded: o.forwardedClient}
	// MessageHub's requests are read and decoded at decodeUnary and
	// decodeStream (decode.go), after the access log and the error
	// mapping. The caller's token and role are checked before (a refused
	// call's request is never read, whatever it would cost to decode), and
	// the decoded request after (the authorizer may rewrite it).
	unary := []grpc.UnaryServerInterceptor{access.unary(), UnaryErrorInterceptor(logger)}
	stream := []grpc.StreamServerInterceptor{access.stream(), StreamErrorInterceptor(logger), decodeStream()}
	if o.authorizer != nil {
		unary = append(unary, unaryAuthInterceptor(o.authorizer, false))
	}
	unary = append(unary, decodeUnary(newSaveBudget(o.limits.MaxSaveMemory, logger)))
	if o.authorizer != nil {
		unary = append(unary, unaryAuthInterceptor(o.authorizer, true))
		// A stream's caller is checked when it opens, before the handler
		// reads its request.
		stream = append(stream, streamAuthInterceptor(o.authorizer))
	}
	if o.auditor != nil {
		// Last: after the authorizer, whose context names the caller.
		unary = append(unary, unaryAuditInterceptor(&o))
		stream = append(stream, streamAuditInterceptor(&o))
	}
	serverOpts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxRecvMsgSize),
		grpc.MaxSendMsgSize(MaxSendMsgSize),
		grpc.MaxConcurrentStreams(o.limits.MaxConcurrentStreams),
		grpc.MaxHeaderListSize(o.limits.MaxHeaderListSize),
		// gRPC's default is 2 minutes, for which a connection that never
		// sends a byte holds a place of the listener.
		grpc.ConnectionTimeout(o.limits.HandshakeTimeout),
		grpc.KeepaliveParams(keepaliveParams(o.limits)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
		// The error interceptor comes first so that it also maps the
		// authorizer's refusals.
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		grpc.ForceServerCodecV2(serverCodec{codec.New()}),
		grpc.NumStreamWorkers(streamWorkers),
	}
	serverOpts = append(serverOpts, grpc.StatsHandler(newAnswerBudgets(o.answers)))
	for _, h := range o.stats {
		serverOpts = append(serverOpts, grpc.StatsHandler(h))
	}
	srv := grpc.NewServer(serverOpts...)
	svc := NewService(hub)
	svc.metrics = o.metrics
	svc.documents, svc.contentTimeout = o.documents, o.contentTimeout
	svc.waitRecheck = o.waitRecheck
	RegisterService(srv, &messagehubv1.MessageHub_ServiceDesc, svc)

	hs := health.NewServer()
	SetServing(hs, false)
	if o.draining != nil {
		healthpb.RegisterHealthServer(srv, drainingHealth{Server: hs, draining: o.draining})
	} else {
		healthpb.RegisterHealthServer(srv, hs)
	}
	reflection.Register(srv)
	return srv, hs
}

// unaryAuthInterceptor authorizes a unary call. Before its request is read
// (decoded false: the authorizer gets nil) it checks who calls and whether
// it may call the method; after decoding, the request, with the context the
// first check returned.
func unaryAuthInterceptor(a Authorizer, decoded bool) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		checked := req
		if !decoded {
			checked = nil
		}
		ctx, err := a.Authorize(ctx, info.FullMethod, checked)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

func streamAuthInterceptor(a Authorizer) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := a.Authorize(ss.Context(), info.FullMethod, nil)
		if err != nil {
			return err
		}
		return handler(srv, &authorizedStream{ServerStream: ss, ctx: ctx, authorizer: a, method: info.FullMethod})
	}
}

// authorizedStream is a ServerStream with the context the authorizer
// returned, whose every request the authorizer checks (and may rewrite, e.g.
// PeekContent's recipient) before the handler sees it.
type authorizedStream struct {
	grpc.ServerStream
	ctx        context.Context
	authorizer Authorizer
	method     string
}

func (s *authorizedStream) Context() context.Context { return s.ctx }

func (s *authorizedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	_, err := s.authorizer.Authorize(s.ctx, s.method, m)
	return err
}

// SetServing sets the overall and the MessageHub health status.
func SetServing(hs *health.Server, serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	hs.SetServingStatus("", st)
	hs.SetServingStatus(ServiceName, st)
}

// streamWorkers is how many goroutines serve calls and are kept between
// calls. On a fresh goroutine each call grows its stack by copying it (seen
// in the hub's CPU profile of the load tool's save-single scenario); a kept
// worker has grown its stack already. gRPC renews a worker after 65,536
// calls, and calls beyond this many at once get a goroutine of their own.
const streamWorkers = 256
