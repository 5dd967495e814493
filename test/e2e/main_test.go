// Package e2e drives the real messagehub binary over gRPC: it is built once,
// started on a free loopback port with a temporary data directory, and checked
// against the API's contract (proto/messagehub/v1 and the README).
package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/test/cosmostest"
	"github.com/energydatahub/messagehub/test/hubproc"
)

// binary is the messagehub executable built by TestMain.
var binary string

const (
	startTimeout = 60 * time.Second // the race-enabled binary on a loaded machine starts slowly
	callTimeout  = 60 * time.Second
	exitTimeout  = 15 * time.Second // the hub exits within 15 s of SIGTERM (README)
)

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "messagehub-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// messagehub_fakefree: a test can tell a hub how much its volume has
	// free (fakeFreeEnv); without the variable the binary is the release's.
	if binary, err = hubproc.Build(ctx, dir, raceEnabled, "messagehub_fakefree"); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	srv, stop, err := cosmostest.StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer stop()
	cosmosServer = srv
	return m.Run()
}

// cosmosServer is the Cosmos-protocol test server the cosmos backend runs on.
var cosmosServer *cosmostest.Server

// backends are the store backends the end-to-end tests run the binary on,
// with the flags that select each: a fresh database per hub for cosmos.
var backends = []struct {
	name string
	args func() []string
}{
	{"embedded", func() []string { return nil }},
	{"cosmos", func() []string {
		return []string{"--store", "cosmos", "--cosmos-endpoint", cosmosServer.Endpoint,
			"--cosmos-key", cosmosServer.Key, "--cosmos-database", cosmostest.UniqueID("e2e")}
	}},
}

// hub is a running messagehub process with clients on its gRPC address.
type hub struct {
	*hubproc.Process
	addr   string
	client messagehubv1.MessageHubClient
	health healthpb.HealthClient
}

// startHub starts the binary with a fresh data directory on a free port and
// waits until it logs the address it listens on.
func startHub(t *testing.T, extraArgs ...string) *hub {
	t.Helper()
	return startHubIn(t, t.TempDir(), extraArgs...)
}

// startHubIn is startHub on a given data directory.
func startHubIn(t *testing.T, dataDir string, extraArgs ...string) *hub {
	t.Helper()
	args := append([]string{"--grpc-addr", "127.0.0.1:0", "--data-dir", dataDir}, extraArgs...)
	p, err := hubproc.Start(context.Background(), binary, args, startTimeout, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &hub{Process: p, addr: p.Addr}
	t.Cleanup(func() {
		h.Kill()
		if t.Failed() {
			t.Logf("messagehub log:\n%s", h.log())
		}
	})
	conn, err := grpc.NewClient(h.addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(32<<20)),
	)
	if err != nil {
		t.Fatalf("dial %s: %v", h.addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h.client = messagehubv1.NewMessageHubClient(conn)
	h.health = healthpb.NewHealthClient(conn)
	return h
}

func (h *hub) log() string { return h.Log() }

// terminate sends SIGTERM and waits for the exit, at most exitTimeout.
func (h *hub) terminate(t *testing.T) (time.Duration, error) {
	t.Helper()
	took, err := h.Terminate(exitTimeout)
	if errors.Is(err, hubproc.ErrStillRunning) {
		t.Fatalf("%v\n%s", err, h.log())
	}
	return took, err
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

func newID() string { return uuid.NewString() }
