//go:build unix

package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A read of the token file that does not end (the file on a network file
// system whose server stopped answering) holds the run no longer than its
// context (--timeout): the run ends with the context's error.
func TestATokenFileReadThatDoesNotEndHoldsTheRunNoLongerThanItsContext(t *testing.T) {
	url, _ := realHub(t)
	tokenFile := filepath.Join(t.TempDir(), "actor.jwt")
	if err := os.WriteFile(tokenFile, []byte("token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := newActor(url, "", tokenFile, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	// A FIFO in the file's place: its read blocks until a writer writes.
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fifo, tokenFile); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errs := make(chan error, 1)
	go func() {
		_, _, err := a.run(ctx, 1, time.Minute)
		errs <- err
	}()
	// Once the actor has opened the file (a writer can then open it too),
	// its read waits for data that never comes: the run is cancelled then.
	var w *os.File
	for w == nil {
		select {
		case err := <-errs:
			t.Fatalf("the run ended before it read its token: %v", err)
		case <-time.After(time.Millisecond):
		}
		w, _ = os.OpenFile(tokenFile, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	}
	defer func() { _ = w.Close() }() // the blocked read ends with the test
	cancel()
	select {
	case err := <-errs:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want the context's error", err)
		}
	case <-time.After(time.Minute): // against a hang
		t.Fatal("the run waits for the read of its token file past its context")
	}
}
