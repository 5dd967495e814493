// Package e2e drives the real messagehub binary over gRPC: it is built once,
// started on a free loopback port with a temporary data directory, and checked
// against the contract of DESIGN §2.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/energydatahub/messagehub/test/cosmostest"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// binary is the messagehub executable built by TestMain.
var binary string

const (
	startTimeout = 60 * time.Second // the race-enabled binary on a loaded machine starts slowly
	callTimeout  = 60 * time.Second
	exitTimeout  = 15 * time.Second // DESIGN §2: exit within 15 s of SIGTERM
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

	binary = filepath.Join(dir, "messagehub")
	if runtime.GOOS == "windows" {
		binary += ".exe"
	}
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/energydatahub/messagehub/cmd/messagehub")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", args...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: go build:", err)
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

// hub is a running messagehub process.
type hub struct {
	cmd    *exec.Cmd
	addr   string
	client messagehubv1.MessageHubClient
	health healthpb.HealthClient
	done   chan struct{} // closed when the process has exited
	err    error         // Wait's result, set before done is closed

	mu   sync.Mutex
	logs bytes.Buffer
}

// logLine is the part of a JSON log line the tests read.
type logLine struct {
	Msg      string `json:"msg"`
	GRPCAddr string `json:"grpc_addr"`
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
	h := &hub{cmd: exec.Command(binary, args...), done: make(chan struct{})}
	stderr, err := h.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	h.cmd.Stdout = io.Discard
	if err := h.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", binary, err)
	}

	addrCh := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			h.mu.Lock()
			h.logs.Write(line)
			h.logs.WriteByte('\n')
			h.mu.Unlock()
			var l logLine
			if json.Unmarshal(line, &l) == nil && l.Msg == "listening" && l.GRPCAddr != "" {
				select {
				case addrCh <- l.GRPCAddr:
				default:
				}
			}
		}
	}()
	go func() {
		<-scanned // read all output before Wait closes the pipe
		h.err = h.cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		select {
		case <-h.done:
		default:
			_ = h.cmd.Process.Kill()
			<-h.done
		}
		if t.Failed() {
			t.Logf("messagehub log:\n%s", h.log())
		}
	})

	select {
	case h.addr = <-addrCh:
	case <-h.done:
		t.Fatalf("messagehub exited before listening: %v\n%s", h.err, h.log())
	case <-time.After(startTimeout):
		t.Fatalf("messagehub did not log its address within %s\n%s", startTimeout, h.log())
	}

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

func (h *hub) log() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.logs.String()
}

// terminate sends SIGTERM and waits for the exit, at most exitTimeout.
func (h *hub) terminate(t *testing.T) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-h.done:
		return time.Since(start), h.err
	case <-time.After(exitTimeout):
		t.Fatalf("messagehub still running %s after SIGTERM\n%s", exitTimeout, h.log())
		return 0, nil
	}
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

func newID() string { return uuid.NewString() }
