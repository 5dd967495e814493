package main

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/test/hubtest"
)

// loseSaves makes the hub store every Save and lose its answer while set:
// the publisher sees UNAVAILABLE at every attempt although the
// notifications are stored.
type loseSaves struct{ on atomic.Bool }

func (l *loseSaves) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err == nil && l.on.Load() && info.FullMethod == messagehubv1.MessageHub_Save_FullMethodName {
		return nil, status.Error(codes.Unavailable, "the answer is lost (test)")
	}
	return resp, err
}

// A run that fails after the hub stored its notifications (every answer
// lost) says how to run it again, and that run saves the same ids: the
// actor gets each notification once, not once per run.
func TestAFailedRunRunAgainStoresNothingTwice(t *testing.T) {
	lose := &loseSaves{}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lose.interceptor, server.UnaryErrorInterceptor(slog.New(slog.DiscardHandler))))
	messagehubv1.RegisterMessageHubServer(srv, server.NewService(hubtest.Open(t)))
	addr := hubtest.Serve(t, srv)
	recipient := uuid.NewString()
	const count = 3
	args := []string{"--hub", addr, "--recipient", recipient, "--count", strconv.Itoa(count)}

	lose.on.Store(true)
	failed := run(args, io.Discard)
	if failed == nil {
		t.Fatal("a run whose every save answer was lost succeeded")
	}
	lose.on.Store(false)
	// The failed run names itself; run it again as it says.
	if m := regexp.MustCompile(`--run ([0-9a-f-]{36})`).FindStringSubmatch(failed.Error()); m != nil {
		args = append(args, "--run", m[1])
	}
	if err := run(args, io.Discard); err != nil {
		t.Fatalf("the run again: %v", err)
	}

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	resp, err := messagehubv1.NewMessageHubClient(conn).Peek(t.Context(), &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(resp.GetBundle().GetNotificationIds()); got != count {
		t.Fatalf("the actor is delivered %d notifications for the %d published (the failed run said: %v)", got, count, failed)
	}
}
