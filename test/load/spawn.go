package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/energydatahub/messagehub/test/hubproc"
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
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	log("building messagehub into %s", dir)
	bin, err := hubproc.Build(ctx, dir, false)
	if err != nil {
		return "", err
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
	*hubproc.Process
	dataDir string
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
	log("spawning %s %s", bin, strings.Join(args, " "))
	p, err := hubproc.Start(ctx, bin, args, startTimeout, func(line string) { log("hub: %s", line) })
	if err != nil {
		_ = os.RemoveAll(dataDir)
		return nil, err
	}
	return &server{Process: p, dataDir: dataDir}, nil
}

// logTail is the end of the hub's log, shown when it fails.
func (s *server) logTail() string {
	lines := strings.Split(strings.TrimRight(s.Log(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-keepLogLines):], "\n")
}

// stop sends SIGTERM, waits for a clean exit (killing it after stopTimeout)
// and removes the data dir.
func (s *server) stop() error {
	defer func() { _ = os.RemoveAll(s.dataDir) }()
	_, err := s.Terminate(stopTimeout)
	switch {
	case errors.Is(err, hubproc.ErrStillRunning):
		return fmt.Errorf("%w; killed", err)
	case err != nil:
		return fmt.Errorf("messagehub exited with %w after SIGTERM\n%s", err, s.logTail())
	}
	return nil
}
