package server

import (
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// Message size limits. A full Save (10,000 notifications with the longest
// allowed types) is about 6 MiB; a bundle of 51,200 notifications, each with
// its own 255-character document type, about 16 MiB. The limits leave room
// above that while still bounding what one call can make the server allocate.
const (
	MaxRecvMsgSize = 32 << 20
	MaxSendMsgSize = 64 << 20
)

// ServiceName is the fully qualified name of the MessageHub service, also the
// name its health status is reported under.
const ServiceName = "messagehub.v1.MessageHub"

// NewGRPCServer builds a gRPC server serving MessageHub over hub, gRPC health
// and server reflection. Health starts NOT_SERVING for both the overall status
// ("") and ServiceName; the caller sets SERVING once the store is open (see
// SetServing).
func NewGRPCServer(hub Hub, logger *slog.Logger) (*grpc.Server, *health.Server) {
	srv := grpc.NewServer(
		grpc.MaxRecvMsgSize(MaxRecvMsgSize),
		grpc.MaxSendMsgSize(MaxSendMsgSize),
		grpc.ChainUnaryInterceptor(UnaryErrorInterceptor(logger)),
	)
	messagehubv1.RegisterMessageHubServer(srv, NewService(hub))

	hs := health.NewServer()
	SetServing(hs, false)
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	return srv, hs
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
