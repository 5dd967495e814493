package crash

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// binary is the messagehub executable built once by TestMain.
var binary string

const (
	startTimeout = 60 * time.Second // a race-enabled binary on a busy 2-core machine starts slowly
	exitTimeout  = 15 * time.Second // DESIGN §2: exit within 15 s of SIGTERM
)

func TestMain(m *testing.M) { os.Exit(buildAndRun(m)) }

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "messagehub-crash-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	binary = filepath.Join(dir, "messagehub")
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
		fmt.Fprintln(os.Stderr, "crash: go build:", err)
		return 1
	}
	return m.Run()
}

// baseArgs are passed to every process started. The HTTP gateway must not
// take a fixed port either: tests of several packages run at once.
var baseArgs = []string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}

// proc is one running messagehub process.
type proc struct {
	cmd    *exec.Cmd
	addr   string
	conn   *grpc.ClientConn
	client messagehubv1.MessageHubClient
	done   chan struct{} // closed once the process has exited
	err    error         // Wait's result, set before done is closed

	mu   sync.Mutex
	logs bytes.Buffer
}

// start runs the binary on dataDir on a free loopback port and waits until it
// logs the address it listens on.
func start(t *testing.T, dataDir string, extraArgs ...string) *proc {
	t.Helper()
	args := append(append(slices.Clone(baseArgs), "--data-dir", dataDir), extraArgs...)
	p := &proc{cmd: exec.Command(binary, args...), done: make(chan struct{})}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = io.Discard
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", binary, err)
	}
	addrCh := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Bytes()
			p.mu.Lock()
			p.logs.Write(line)
			p.logs.WriteByte('\n')
			p.mu.Unlock()
			var l struct {
				Msg      string `json:"msg"`
				GRPCAddr string `json:"grpc_addr"`
			}
			if json.Unmarshal(line, &l) == nil && l.Msg == "listening" && l.GRPCAddr != "" {
				select {
				case addrCh <- l.GRPCAddr:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		<-scanned // read all output before Wait closes the pipe
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if p.conn != nil {
			_ = p.conn.Close()
		}
		if t.Failed() {
			t.Logf("messagehub (pid %d) log, last 8 KiB:\n%s", p.cmd.Process.Pid, tail(p.log(), 8<<10))
		}
	})
	select {
	case p.addr = <-addrCh:
	case <-p.done:
		t.Fatalf("messagehub exited before listening: %v\n%s", p.err, p.log())
	case <-time.After(startTimeout):
		t.Fatalf("messagehub did not log its address within %s\n%s", startTimeout, p.log())
	}
	p.conn, err = grpc.NewClient(p.addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(32<<20)),
	)
	if err != nil {
		t.Fatalf("dial %s: %v", p.addr, err)
	}
	p.client = messagehubv1.NewMessageHubClient(p.conn)
	return p
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// kill sends SIGKILL (unless the process is gone already) and waits for it
// to be gone.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(exitTimeout):
		t.Fatalf("messagehub still running %s after SIGKILL", exitTimeout)
	}
	p.checkLog(t)
}

// terminate sends SIGTERM and expects a clean exit within exitTimeout.
func (p *proc) terminate(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			t.Errorf("exit after SIGTERM: %v (want status 0)", p.err)
		}
	case <-time.After(exitTimeout):
		t.Fatalf("messagehub still running %s after SIGTERM", exitTimeout)
	}
	p.checkLog(t)
}

// checkLog fails the test on a data race report or an error-level log line.
func (p *proc) checkLog(t *testing.T) {
	t.Helper()
	logs := p.log()
	if strings.Contains(logs, "WARNING: DATA RACE") {
		t.Errorf("the race detector reported a data race in messagehub (pid %d)", p.cmd.Process.Pid)
	}
	for line := range strings.Lines(logs) {
		if strings.Contains(line, `"level":"ERROR"`) {
			t.Errorf("messagehub (pid %d) logged an error: %s", p.cmd.Process.Pid, strings.TrimSpace(line))
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
