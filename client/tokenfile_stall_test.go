//go:build unix

package client_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/energydatahub/messagehub/client"
)

// A TokenFile whose read does not end (the file on a network file system
// whose server stopped answering) holds no call past its context: the call
// ends with the context's error, as the package says every call does.
func TestATokenFileReadThatDoesNotEndHoldsNoCallPastItsContext(t *testing.T) {
	addr := startHub(t, (&fault{methods: "none"}).requireToken("token"))
	// A FIFO as the token file: its read blocks until a writer writes.
	file := filepath.Join(t.TempDir(), "token")
	if err := syscall.Mkfifo(file, 0o600); err != nil {
		t.Fatal(err)
	}
	c := newClientWith(t, addr, client.Options{Plaintext: true, Tokens: client.TokenFile(file), TokensOverLoopback: true,
		Retry: client.RetryPolicy{MaxAttempts: 1}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := peeking(ctx, c)
	// Once the call has opened the file (a writer can then open it too),
	// its read waits for data that never comes: the call is cancelled then.
	var w *os.File
	for w == nil {
		select {
		case err := <-errs:
			t.Fatalf("the call ended before it read its token: %v", err)
		case <-time.After(time.Millisecond):
		}
		w, _ = os.OpenFile(file, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	}
	defer func() { _ = w.Close() }() // the blocked read ends with the test
	cancel()
	select {
	case err := <-errs:
		if status.Code(err) != codes.Canceled {
			t.Fatalf("got %v, want CANCELED", err)
		}
	case <-time.After(time.Minute): // against a hang
		t.Fatal("the call waits for the read of its token file past its context")
	}
}
