package crash

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/test/hubproc"
)

// binary is the messagehub executable built once by TestMain.
var binary string

const (
	startTimeout = 60 * time.Second // a race-enabled binary on a busy 2-core machine starts slowly
	exitTimeout  = 15 * time.Second // the hub exits within 15 s of SIGTERM (README)
)

func TestMain(m *testing.M) { os.Exit(buildAndRun(m)) }

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "messagehub-crash-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if binary, err = hubproc.Build(ctx, dir, raceEnabled); err != nil {
		fmt.Fprintln(os.Stderr, "crash:", err)
		return 1
	}
	return m.Run()
}

// baseArgs are passed to every process started. The HTTP gateway must not
// take a fixed port either: tests of several packages run at once.
var baseArgs = []string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}

// proc is one running messagehub process with a client on its gRPC address.
type proc struct {
	*hubproc.Process
	conn   *grpc.ClientConn
	client messagehubv1.MessageHubClient
}

// start runs the binary on dataDir on a free loopback port and waits until it
// logs the address it listens on.
func start(t *testing.T, dataDir string, extraArgs ...string) *proc {
	t.Helper()
	args := append(append(slices.Clone(baseArgs), "--data-dir", dataDir), extraArgs...)
	hp, err := hubproc.Start(context.Background(), binary, args, startTimeout, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{Process: hp}
	t.Cleanup(func() {
		p.Kill()
		if p.conn != nil {
			_ = p.conn.Close()
		}
		if t.Failed() {
			t.Logf("messagehub (pid %d) log, last 8 KiB:\n%s", p.Cmd.Process.Pid, tail(p.log(), 8<<10))
		}
	})
	p.conn, err = grpc.NewClient(p.Addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(32<<20)),
	)
	if err != nil {
		t.Fatalf("dial %s: %v", p.Addr, err)
	}
	p.client = messagehubv1.NewMessageHubClient(p.conn)
	return p
}

func (p *proc) log() string { return p.Log() }

// kill sends SIGKILL (unless the process is gone already) and waits for it
// to be gone.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-p.Done():
	case <-time.After(exitTimeout):
		t.Fatalf("messagehub still running %s after SIGKILL", exitTimeout)
	}
	p.checkLog(t)
}

// terminate sends SIGTERM and expects a clean exit within exitTimeout.
func (p *proc) terminate(t *testing.T) {
	t.Helper()
	if _, err := p.Terminate(exitTimeout); errors.Is(err, hubproc.ErrStillRunning) {
		t.Fatal(err)
	} else if err != nil {
		t.Errorf("exit after SIGTERM: %v (want status 0)", err)
	}
	p.checkLog(t)
}

// checkLog fails the test on a data race report or an error-level log line.
func (p *proc) checkLog(t *testing.T) {
	t.Helper()
	logs := p.log()
	if strings.Contains(logs, "WARNING: DATA RACE") {
		t.Errorf("the race detector reported a data race in messagehub (pid %d)", p.Cmd.Process.Pid)
	}
	for line := range strings.Lines(logs) {
		if strings.Contains(line, `"level":"ERROR"`) {
			t.Errorf("messagehub (pid %d) logged an error: %s", p.Cmd.Process.Pid, strings.TrimSpace(line))
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
