package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
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
	recipient := uuid.NewString()
	runTwice(t, recipient, recipient)
}

// The hub takes a recipient's UUID in any case and stores it in lower
// case: a run again naming the same recipient in another case (its id
// copied from elsewhere) is the same recipient, and saves the same ids.
func TestARunAgainNamingTheRecipientInAnotherCaseStoresNothingTwice(t *testing.T) {
	recipient := uuid.NewString()
	runTwice(t, strings.ToUpper(recipient), recipient)
}

// runTwice runs the publisher for first with every save answer lost, then
// again as the failure says, for again, and checks that the actor is
// delivered each notification once.
func runTwice(t *testing.T, first, again string) {
	t.Helper()
	lose := &loseSaves{}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lose.interceptor, server.UnaryErrorInterceptor(slog.New(slog.DiscardHandler))))
	messagehubv1.RegisterMessageHubServer(srv, server.NewService(hubtest.Open(t)))
	addr := hubtest.Serve(t, srv)
	recipient := strings.ToLower(again)
	const count = 3
	args := []string{"--hub", addr, "--recipient", first, "--count", strconv.Itoa(count)}

	lose.on.Store(true)
	failed := run(args, io.Discard)
	if failed == nil {
		t.Fatal("a run whose every save answer was lost succeeded")
	}
	lose.on.Store(false)
	args[3] = again
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

// holdSaves holds every Save until release is closed, telling arrived
// when one reaches the hub.
type holdSaves struct{ arrived, release chan struct{} }

func (h *holdSaves) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if info.FullMethod == messagehubv1.MessageHub_Save_FullMethodName {
		h.arrived <- struct{}{}
		<-h.release
	}
	return handler(ctx, req)
}

// printed is the run's stdout as the lines it wrote, each in the channel
// before the run goes on: what is in it was printed before whatever the
// run did next.
type printed chan string

func (p printed) Write(b []byte) (int, error) { p <- string(b); return len(b), nil }

// A run killed while its first Save is in flight (a deploy, the OOM
// killer) says nothing at its end: the run id that saves the same ids
// again is out before anything is saved.
func TestARunNamesItselfBeforeItSaves(t *testing.T) {
	hold := &holdSaves{arrived: make(chan struct{}, 1), release: make(chan struct{})}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(hold.interceptor, server.UnaryErrorInterceptor(slog.New(slog.DiscardHandler))))
	messagehubv1.RegisterMessageHubServer(srv, server.NewService(hubtest.Open(t)))
	addr := hubtest.Serve(t, srv)
	recipient := uuid.NewString()
	args := []string{"--hub", addr, "--recipient", recipient, "--count", "2"}

	out := make(printed, 10)
	done := make(chan error, 1)
	go func() { done <- run(args, out) }()
	<-hold.arrived // the first Save is in flight: a crash now leaves only what was printed
	var first string
	select {
	case first = <-out:
	default:
	}
	m := regexp.MustCompile(`--run ([0-9a-f-]{36})`).FindStringSubmatch(first)
	close(hold.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if m == nil {
		t.Fatalf("while its first Save was in flight the run had printed %q, naming no --run to run it again with", first)
	}
	var again strings.Builder
	if err := run(append(args, "--run", m[1]), &again); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(again.String(), "(0 stored, 2 already there)") {
		t.Fatalf("the run again with the id printed: %q; want both notifications already there", again.String())
	}
}

// A count or batch the hub cannot take is a usage error, said before
// anything is sent.
func TestACountOrBatchOutOfRangeIsAUsageError(t *testing.T) {
	recipient := uuid.NewString()
	for _, bad := range [][]string{{"--batch", "-1"}, {"--batch", "0"}, {"--batch", "10001"}, {"--count", "-3"}, {"--count", "0"}} {
		args := append([]string{"--hub", "127.0.0.1:1", "--recipient", recipient}, bad...)
		var out strings.Builder
		err := run(args, &out)
		if !errors.As(err, new(usageError)) || out.Len() != 0 {
			t.Errorf("%v: %v, printed %q; want a usage error before anything is done", bad, err, out.String())
		}
	}
}
