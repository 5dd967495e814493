// Package hubtest serves the real hub in process for the tests of what runs
// against it (the Go client, the examples): the repository over the
// embedded store, a gRPC server of it on loopback, and the HTTP gateway in
// front of that server.
package hubtest

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/energydatahub/messagehub/internal/auth"
	"github.com/energydatahub/messagehub/internal/auth/authtest"
	"github.com/energydatahub/messagehub/internal/gateway"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// Open opens the repository over a new embedded store in a folder of t's;
// both are closed when t ends.
func Open(t testing.TB) *hub.Hub {
	t.Helper()
	store, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	repo := hub.New(store, hub.Options{}, nil)
	t.Cleanup(func() { repo.Close(); _ = store.Close() })
	return repo
}

// Serve serves srv on a loopback port until t ends and returns its address.
func Serve(t testing.TB, srv *grpc.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// Gateway serves the HTTP gateway, dialing the gRPC server at addr as the
// hub dials its own, on loopback until t ends. It returns the gateway's
// URL and the connection to the gRPC server.
func Gateway(t testing.TB, addr string, opts ...gateway.Option) (string, *grpc.ClientConn) {
	t.Helper()
	conn, err := grpc.NewClient(addr, append(gateway.InProcessDialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		// The largest bundle is over gRPC's default of 4 MiB.
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(server.MaxRecvMsgSize), grpc.MaxCallRecvMsgSize(server.MaxSendMsgSize)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return Front(t, conn, nil, opts...), conn
}

// Front serves the HTTP gateway in front of conn on loopback until t ends
// and returns its URL; configure, when not nil, sets up the HTTP server
// before it starts.
func Front(t testing.TB, conn grpc.ClientConnInterface, configure func(*httptest.Server), opts ...gateway.Option) string {
	t.Helper()
	handler, err := gateway.New(context.Background(), conn, http.NotFoundHandler(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewUnstartedServer(handler)
	if configure != nil {
		configure(web)
	}
	web.Start()
	t.Cleanup(web.Close)
	return web.URL
}

// Authorizer checks the tokens of issuer on a clock that starts at start,
// and returns it and what sets the clock (to make a token expire).
func Authorizer(t testing.TB, issuer *authtest.Issuer, start time.Time) (*auth.Authorizer, func(time.Time)) {
	t.Helper()
	var now atomic.Pointer[time.Time]
	now.Store(&start)
	verifier, err := auth.NewVerifier(auth.Config{
		JWKSFile: issuer.WriteJWKS(t), Issuer: issuer.Issuer, Audience: issuer.Audience,
		Now: func() time.Time { return *now.Load() }, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return auth.NewAuthorizer(verifier), func(at time.Time) { now.Store(&at) }
}
