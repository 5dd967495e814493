//go:build unix

package auth_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/auth"
	"github.com/energydatahub/messagehub/internal/auth/authtest"
)

// A read of the JWKS file that does not end (the file on a network file
// system whose server stopped answering) holds no call for long: the calls
// go on with the keys of the last look, as for a file that cannot be read,
// instead of each waiting, past its deadline, for the read.
func TestAReadOfTheFileThatDoesNotEndHoldsNoCall(t *testing.T) {
	is := authtest.NewIssuer(t, issuer, audience)
	path := is.WriteJWKS(t)
	c := newClock()
	counted := make(outcomeQueue, 10) // the read's goroutine counts its outcome when it ends
	v, err := auth.NewVerifier(auth.Config{JWKSFile: path, Issuer: issuer, Audience: audience, Now: c.now, Reloads: counted})
	if err != nil {
		t.Fatal(err)
	}
	tok := is.ES256(t, is.Claims(actorA, auth.RoleActor))

	// A FIFO in the file's place: its read blocks until a writer opens it.
	fifo := filepath.Join(t.TempDir(), "jwks.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fifo, path); err != nil {
		t.Fatal(err)
	}
	// The blocked read ends when the test does.
	t.Cleanup(func() {
		if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_, _ = w.Write(is.JWKS(t))
			_ = w.Close()
		}
	})
	c.advance(auth.CheckInterval)

	for i := range 2 { // the call that finds the look due, then one during it
		done := make(chan error, 1)
		go func() {
			_, err := v.Verify(tok)
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("call %d: %v", i+1, err)
			}
		case <-time.After(time.Minute): // against a hang
			t.Fatalf("call %d waits for the read of the JWKS file, which does not end", i+1)
		}
	}
	// Counted once, as a file that cannot be read is.
	if len(counted) != 1 || <-counted != "error" {
		t.Fatal("the read that does not end is not counted once as an error")
	}
}

// outcomeQueue receives the reloads a verifier counts, from any goroutine.
type outcomeQueue chan string

func (q outcomeQueue) RecordJWKSReload(_ context.Context, outcome string) { q <- outcome }
