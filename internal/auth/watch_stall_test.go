//go:build unix

package auth

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/auth/authtest"
)

// A read of the JWKS file that does not end (a network file system whose
// server stopped answering) does not keep Watch from stopping when its
// context ends.
func TestWatchStopsDuringAReadThatDoesNotEnd(t *testing.T) {
	is := authtest.NewIssuer(t, "iss", "aud")
	path := is.WriteJWKS(t)
	start := time.Now()
	var clock atomic.Int64 // read by the watching goroutine
	clock.Store(start.UnixNano())
	v, err := NewVerifier(Config{JWKSFile: path, Issuer: "iss", Audience: "aud",
		Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	// A FIFO in the file's place: its read blocks until a writer opens it.
	fifo := filepath.Join(t.TempDir(), "jwks.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fifo, path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // the blocked read ends when the test does
		if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_, _ = w.Write(is.JWKS(t))
			_ = w.Close()
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	tick := make(chan time.Time)
	done := make(chan struct{})
	go func() { v.watch(ctx, tick); close(done) }()
	clock.Store(start.Add(CheckInterval).UnixNano())
	tick <- start // the look that does not end
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute): // against a hang
		t.Fatal("Watch waits for the read of the JWKS file after its context ended")
	}
}

// A first read of the JWKS file that does not end fails the start within
// firstReadWait, naming the file, instead of holding it (and the signal
// that would stop it) for good.
func TestAFirstReadThatDoesNotEndFailsTheStart(t *testing.T) {
	defer func(d time.Duration) { firstReadWait = d }(firstReadWait)
	firstReadWait = 100 * time.Millisecond
	is := authtest.NewIssuer(t, "iss", "aud")
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // the blocked read ends when the test does
		if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_, _ = w.Write(is.JWKS(t))
			_ = w.Close()
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := NewVerifier(Config{JWKSFile: path, Issuer: "iss", Audience: "aud"})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "not read within") {
			t.Fatalf("NewVerifier: %v; want a failure naming the file not read in time", err)
		}
	case <-time.After(time.Minute): // against a hang
		t.Fatal("NewVerifier waits for a read of the JWKS file that does not end")
	}
}
