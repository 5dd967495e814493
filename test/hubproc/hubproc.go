// Package hubproc builds the messagehub binary and runs it as a child
// process for the end-to-end tests, the crash test and the load tool: one
// place that knows how to start it, find the address it listens on from its
// log, and stop it.
package hubproc

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
	"strings"
	"sync"
	"syscall"
	"time"
)

// Build compiles ./cmd/messagehub into dir, with the race detector when race
// is set and with the build tags given, and returns the binary's path.
func Build(ctx context.Context, dir string, race bool, tags ...string) (string, error) {
	bin := filepath.Join(dir, "messagehub")
	// -buildvcs=auto: stamp the commit when built in a checkout, whatever
	// GOFLAGS says (--version names it).
	args := []string{"build", "-buildvcs=auto", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	args = append(args, "github.com/energydatahub/messagehub/cmd/messagehub")
	out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput() //nolint:gosec // go build of our own package into our own dir
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/messagehub: %w\n%s", err, out)
	}
	return bin, nil
}

// Process is a running messagehub.
type Process struct {
	Cmd  *exec.Cmd
	Addr string // the gRPC address it logged

	done chan struct{} // closed once it has exited
	err  error         // Wait's result, set before done is closed

	mu   sync.Mutex
	logs bytes.Buffer
}

// Start runs bin with args and waits, at most timeout, until it logs the
// address it listens on. onLine, when set, sees every log line. If it does
// not get that far the process is killed and the error carries its log.
func Start(ctx context.Context, bin string, args []string, timeout time.Duration, onLine func(string)) (*Process, error) {
	p := &Process{Cmd: exec.Command(bin, args...), done: make(chan struct{})} //nolint:gosec // starting the binary under test is the point
	p.Cmd.Stdout = io.Discard
	stderr, err := p.Cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := p.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	addrCh := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if onLine != nil {
				onLine(string(line))
			}
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
		p.err = p.Cmd.Wait()
		close(p.done)
	}()
	select {
	case p.Addr = <-addrCh:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("messagehub exited before listening: %w\n%s", p.err, p.Log())
	case <-time.After(timeout):
		err = fmt.Errorf("messagehub did not log its address within %s\n%s", timeout, p.Log())
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.Kill()
	return nil, err
}

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Log is everything the process logged so far.
func (p *Process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Kill sends SIGKILL, unless the process is gone already, and waits for it.
func (p *Process) Kill() {
	select {
	case <-p.done:
	default:
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// ErrStillRunning is returned by Terminate when the process outlives its
// timeout; it is then killed.
var ErrStillRunning = errors.New("messagehub still running after SIGTERM")

// Terminate sends SIGTERM and waits at most timeout for the exit. It returns
// how long the exit took and how the process ended (nil: status 0).
func (p *Process) Terminate(timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return 0, fmt.Errorf("SIGTERM: %w", err)
	}
	select {
	case <-p.done:
		return time.Since(start), p.err
	case <-time.After(timeout):
		p.Kill()
		return time.Since(start), fmt.Errorf("%w: waited %s", ErrStillRunning, timeout)
	}
}
