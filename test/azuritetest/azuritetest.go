// Package azuritetest gives tests a real Azure Blob Storage endpoint on
// 127.0.0.1 without a cloud account or Docker: Azurite, Microsoft's storage
// emulator, from npm at the exact version pinned in server/package-lock.json.
//
// The first use installs it with `npm ci` into test/azuritetest/server/
// node_modules (under a file lock, so concurrent `go test` processes do not
// race); every Start then runs its own in-memory Azurite on a port the OS
// picks, stopped at cleanup, and killed with the test binary (its stdin is a
// pipe from us). Node.js (>= 20) and npm must be on PATH: without them Start
// fails the test, it never skips.
package azuritetest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/test/npmpin"
)

// Version is the exact azurite package the lock file pins.
const Version = "3.35.0"

// Azurite's well-known development account (public, documented by Microsoft).
const (
	AccountName = "devstoreaccount1"
	AccountKey  = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

const (
	startTimeout = 30 * time.Second
)

// Server is one running Azurite blob service.
type Server struct {
	// BlobEndpoint is the account's blob service URL, e.g.
	// http://127.0.0.1:41234/devstoreaccount1.
	BlobEndpoint string
	Port         int

	cmd      *exec.Cmd
	stdin    io.WriteCloser
	out      *tail
	exited   chan struct{}
	stopOnce sync.Once
}

// ConnectionString is the account's connection string, for
// azblob.NewClientFromConnectionString and --content-blob-connection-string.
func (s *Server) ConnectionString() string {
	return fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=%s;", AccountName, AccountKey, s.BlobEndpoint)
}

// Start installs Azurite if needed, starts it and stops it at t.Cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	srv, err := start()
	if err != nil {
		t.Fatalf("azuritetest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("azuritetest: output (tail):\n%s", srv.out.String())
		}
		srv.Stop()
	})
	return srv
}

// StartMain is Start for TestMain: call the returned stop after m.Run.
func StartMain() (*Server, func(), error) {
	srv, err := start()
	if err != nil {
		return nil, func() {}, fmt.Errorf("azuritetest: %w", err)
	}
	return srv, srv.Stop, nil
}

// Stop kills Azurite and waits for it; safe to call more than once.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		select {
		case <-s.exited:
		default:
			_ = s.cmd.Process.Kill()
		}
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
		}
		_ = s.stdin.Close()
	})
}

var seq atomic.Uint64

// UniqueContainer returns a container name (3-63 lower-case letters, digits
// and dashes) no other test of this process uses.
func UniqueContainer(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), seq.Add(1))
}

// Dir returns the folder holding package.json and package-lock.json.
func Dir() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok {
		dir := filepath.Join(filepath.Dir(file), "server")
		if exists(filepath.Join(dir, "package-lock.json")) {
			return dir, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; filepath.Dir(dir) != dir; dir = filepath.Dir(dir) {
		d := filepath.Join(dir, "test", "azuritetest", "server")
		if exists(filepath.Join(dir, "go.mod")) && exists(filepath.Join(d, "package-lock.json")) {
			return d, nil
		}
	}
	return "", errors.New("cannot find test/azuritetest/server (run the tests from inside the repository)")
}

func start() (*Server, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, errors.New("node (Node.js >= 20) is not on PATH; it runs Azurite for the blob tests")
	}
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	release, err := npmpin.Package{Dir: dir, Name: "azurite", Version: Version, For: "the blob tests"}.Ensure()
	if err != nil {
		return nil, err
	}
	// Held until node has loaded its modules, so no npm ci replaces them.
	defer release()
	return launch(node, dir)
}

var listening = regexp.MustCompile(`Blob service successfully listens on http://127\.0\.0\.1:(\d+)`)

func launch(node, dir string) (*Server, error) {
	// Port 0: the OS picks a free port and Azurite prints it, so no other
	// process can take it between our choice and Azurite's bind.
	cmd := exec.Command(node, "--require", "./exit-with-parent.js", //nolint:gosec // node on PATH, our own arguments
		filepath.Join("node_modules", "azurite", "dist", "src", "blob", "main.js"),
		"--blobHost", "127.0.0.1", "--blobPort", "0", "--inMemoryPersistence",
		"--skipApiVersionCheck", "--disableTelemetry", "--loose", "--silent")
	cmd.Dir = dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	out := &tail{}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start azurite: %w", err)
	}
	srv := &Server{cmd: cmd, stdin: stdin, out: out, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = pw.Close()
		close(srv.exited)
	}()
	port := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			out.add(sc.Text())
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				var p int
				_, _ = fmt.Sscan(m[1], &p)
				select {
				case port <- p:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case p := <-port:
		srv.Port = p
		srv.BlobEndpoint = fmt.Sprintf("http://127.0.0.1:%d/%s", p, AccountName)
		return srv, nil
	case <-srv.exited:
		return nil, fmt.Errorf("azurite exited before listening:\n%s", out.String())
	case <-time.After(startTimeout):
		srv.Stop()
		return nil, fmt.Errorf("azurite did not listen within %v:\n%s", startTimeout, out.String())
	}
}

// tail keeps the last lines of Azurite's output for failure messages.
type tail struct {
	mu    sync.Mutex
	lines []string
}

func (t *tail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > 50 {
		t.lines = t.lines[1:]
	}
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
