package auth

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/auth/authtest"
)

// Watch reloads a changed file on its ticks without any call, and stops
// when its context ends.
func TestWatchReloadsOnItsTicksUntilCanceled(t *testing.T) {
	is := authtest.NewIssuer(t, "iss", "aud")
	path := is.WriteJWKS(t)
	// The watching goroutine reads the clock while the test moves it.
	var clock atomic.Int64
	start := time.Now()
	clock.Store(start.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	var logs bytes.Buffer
	v, err := NewVerifier(Config{JWKSFile: path, Issuer: "iss", Audience: "aud", Now: now,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tick := make(chan time.Time)
	done := make(chan struct{})
	go func() { v.watch(ctx, tick); close(done) }()
	// A tick is taken only once the look of the one before is over.
	tick <- start
	clock.Store(start.Add(CheckInterval - 1).UnixNano())
	tick <- start
	tick <- start
	if logs.Len() != 0 {
		t.Fatalf("the file was looked at before CheckInterval: %s", logs.String())
	}
	clock.Store(start.Add(CheckInterval).UnixNano())
	tick <- start
	tick <- start // taken once the look of the tick before has ended
	cancel()
	<-done
	if !strings.Contains(logs.String(), "not reloaded") || strings.Count(logs.String(), "\n") != 1 {
		t.Fatalf("log: %s", logs.String())
	}
}
