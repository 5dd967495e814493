package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	buildTimeout = 10 * time.Minute
	startTimeout = 60 * time.Second
	stopTimeout  = 15 * time.Second // DESIGN §2: the hub exits within 15 s of SIGTERM
	keepLogLines = 50
)

// serverBuilder builds ./cmd/messagehub once per run of the tool.
type serverBuilder struct {
	dir, bin string
}

func (b *serverBuilder) binary(ctx context.Context, prebuilt string, log logFunc) (string, error) {
	if prebuilt != "" {
		return prebuilt, nil
	}
	if b.bin != "" {
		return b.bin, nil
	}
	dir, err := os.MkdirTemp("", "messagehub-load-bin-")
	if err != nil {
		return "", err
	}
	b.dir = dir
	bin := filepath.Join(dir, "messagehub")
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	log("building messagehub into %s", bin)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/energydatahub/messagehub/cmd/messagehub") //nolint:gosec // bin is a path in our own temp dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/messagehub: %w\n%s", err, out)
	}
	b.bin = bin
	return bin, nil
}

func (b *serverBuilder) cleanup() {
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// server is a messagehub process started by the tool.
type server struct {
	cmd     *exec.Cmd
	addr    string
	dataDir string
	done    chan struct{}
	err     error

	mu   sync.Mutex
	tail []string // last log lines, shown when it fails
}

// spawnServer starts bin on 127.0.0.1:0 with a fresh data dir and waits for
// it to log the address it listens on.
func spawnServer(ctx context.Context, bin string, maxBundleWeight int64, log logFunc) (*server, error) {
	dataDir, err := os.MkdirTemp("", "messagehub-load-data-")
	if err != nil {
		return nil, err
	}
	// Its HTTP gateway must not take a fixed port either.
	args := []string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--data-dir", dataDir}
	if maxBundleWeight > 0 {
		args = append(args, "--max-bundle-weight", strconv.FormatInt(maxBundleWeight, 10))
	}
	s := &server{cmd: exec.Command(bin, args...), dataDir: dataDir, done: make(chan struct{})} //nolint:gosec // starting the binary under test is the point
	s.cmd.Stdout = io.Discard
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		_ = os.RemoveAll(dataDir)
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dataDir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	log("spawned %s %s (pid %d)", bin, strings.Join(args, " "), s.cmd.Process.Pid)
	addrCh := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			log("hub: %s", line)
			s.mu.Lock()
			s.tail = append(s.tail, line)
			if len(s.tail) > keepLogLines {
				s.tail = s.tail[1:]
			}
			s.mu.Unlock()
			var l struct {
				Msg      string `json:"msg"`
				GRPCAddr string `json:"grpc_addr"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "listening" && l.GRPCAddr != "" {
				select {
				case addrCh <- l.GRPCAddr:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		<-scanned
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	select {
	case s.addr = <-addrCh:
		return s, nil
	case <-s.done:
		_ = os.RemoveAll(dataDir)
		return nil, fmt.Errorf("messagehub exited before listening: %w\n%s", s.err, s.logTail())
	case <-time.After(startTimeout):
	case <-ctx.Done():
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	_ = os.RemoveAll(dataDir)
	return nil, fmt.Errorf("messagehub did not log its address within %s\n%s", startTimeout, s.logTail())
}

func (s *server) logTail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.tail, "\n")
}

// stop sends SIGTERM, waits for a clean exit (killing it after stopTimeout)
// and removes the data dir.
func (s *server) stop() error {
	defer func() { _ = os.RemoveAll(s.dataDir) }()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(stopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("messagehub still running %s after SIGTERM; killed", stopTimeout)
	}
	if s.err != nil {
		var exit *exec.ExitError
		if errors.As(s.err, &exit) {
			return fmt.Errorf("messagehub exited with %w after SIGTERM\n%s", s.err, s.logTail())
		}
		return s.err
	}
	return nil
}
