package server

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/auth"
	"github.com/energydatahub/messagehub/internal/auth/authtest"
)

// withTestTokens returns an issuer of test tokens and the option that
// makes a server check every call's token against its keys.
func withTestTokens(t *testing.T) (*authtest.Issuer, Option) {
	t.Helper()
	is := authtest.NewIssuer(t, "https://issuer.test/", "messagehub")
	verifier, err := auth.NewVerifier(auth.Config{JWKSFile: is.WriteJWKS(t), Issuer: is.Issuer, Audience: is.Audience})
	if err != nil {
		t.Fatal(err)
	}
	return is, WithAuthorizer(auth.NewAuthorizer(verifier))
}

// countingProvider is a service the hub does not serve itself, registered
// on its server beside MessageHub: it counts the calls that reach it.
type countingProvider struct {
	messagehubv1.UnimplementedBundleContentProviderServer
	calls atomic.Int32
}

func (p *countingProvider) BundleDequeued(context.Context, *messagehubv1.BundleDequeuedRequest) (*messagehubv1.BundleDequeuedResponse, error) {
	p.calls.Add(1)
	return &messagehubv1.BundleDequeuedResponse{}, nil
}

// A service registered on the hub's server that the authorizer has no rule
// for is refused to every caller, as a MessageHub method without a rule is:
// only health and reflection are open without a token.
func TestAServiceWithoutARuleIsRefused(t *testing.T) {
	is, checkTokens := withTestTokens(t)
	srv, hs := NewGRPCServer(&recordingHub{}, slog.New(slog.DiscardHandler), checkTokens)
	SetServing(hs, true)
	provider := &countingProvider{}
	messagehubv1.RegisterBundleContentProviderServer(srv, provider)
	conn := serveConn(t, srv)

	as := func(roles ...string) context.Context {
		return metadata.AppendToOutgoingContext(ctxT(t), "authorization", "Bearer "+is.RS256(t, is.Claims(recipient, roles...)))
	}
	client := messagehubv1.NewBundleContentProviderClient(conn)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want codes.Code
	}{
		{"without a token", ctxT(t), codes.Unauthenticated},
		{"with an actor's token", as(auth.RoleActor), codes.PermissionDenied},
		{"with a domain's token", as(auth.RoleDomain), codes.PermissionDenied},
		{"with an operator's token", as(auth.RoleAdmin), codes.PermissionDenied},
	} {
		_, err := client.BundleDequeued(tc.ctx, &messagehubv1.BundleDequeuedRequest{})
		if status.Code(err) != tc.want {
			t.Errorf("%s: %v; want %v", tc.name, err, tc.want)
		}
	}
	if n := provider.calls.Load(); n != 0 {
		t.Errorf("the service without a rule was served %d times", n)
	}

	// Health and reflection (both versions grpcurl may use) need no token.
	if _, err := healthpb.NewHealthClient(conn).Check(ctxT(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health without a token: %v", err)
	}
	for _, method := range []string{
		reflectionpb.ServerReflection_ServerReflectionInfo_FullMethodName,
		"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", // the same messages on the wire
	} {
		stream, err := conn.NewStream(ctxT(t), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.SendMsg(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		if err := stream.RecvMsg(&reflectionpb.ServerReflectionResponse{}); err != nil {
			t.Errorf("%s without a token: %v", method, err)
		}
	}
}
