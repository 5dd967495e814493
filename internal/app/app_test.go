package app_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/app"
)

const (
	// shutdownTimeout is the tests' Config.ShutdownTimeout: short, so that a
	// forced shutdown ends soon.
	shutdownTimeout = 2 * time.Second
	// closeMargin is what Close may take beyond its timeout on a loaded
	// machine: scheduling, logging, closing an embedded store.
	closeMargin = 10 * time.Second
	// callTimeout bounds a test's gRPC calls.
	callTimeout = 30 * time.Second
)

// testConfig is the configuration of a hub on loopback ports the system
// picks, over an embedded store in its own folder, as the binary reads it
// (the environment left out), with flags added.
func testConfig(t *testing.T, flags ...string) app.Config {
	t.Helper()
	cfg, err := app.ParseConfig(append([]string{
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--min-free-disk", "0",
	}, flags...), nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ShutdownTimeout = shutdownTimeout
	return cfg
}

// running is an App serving in process, with a client on its gRPC address.
type running struct {
	app    *app.App
	client messagehubv1.MessageHubClient
	stop   context.CancelFunc // ends Run
	ran    chan error         // Run's answer
}

// start opens an App with cfg, runs it and dials it. The test closes it;
// a test that fails first leaves it to the cleanup.
func start(t *testing.T, cfg app.Config) *running {
	t.Helper()
	a, err := app.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &running{app: a, stop: stop, ran: make(chan error, 1)}
	go func() { r.ran <- a.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		_ = a.Close()
	})
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	r.client = messagehubv1.NewMessageHubClient(conn)
	return r
}

// closeWithin ends Run, closes the App and fails the test unless Close
// returns within the configured timeout and the margin; it returns Close's
// answer.
func (r *running) closeWithin(t *testing.T) error {
	t.Helper()
	began := time.Now()
	r.stop()
	closed := make(chan error, 1)
	go func() { closed <- r.app.Close() }()
	bound := time.NewTimer(shutdownTimeout + closeMargin)
	defer bound.Stop()
	var err error
	select {
	case err = <-closed:
	case <-bound.C:
		t.Fatalf("Close has not returned %s after shutdown began (timeout %s)", time.Since(began).Round(time.Millisecond), shutdownTimeout)
	}
	t.Logf("closed in %s", time.Since(began).Round(time.Millisecond))
	if err := <-r.ran; err != nil {
		t.Errorf("Run: %v", err)
	}
	return err
}

func notification(recipient string) *messagehubv1.DataAvailable {
	return &messagehubv1.DataAvailable{
		Id: uuid.NewString(), Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_TIME_SERIES,
		ContentType: "TimeSeries", DocumentType: "TimeSeriesDoc", SupportsBundling: true, Weight: 1,
	}
}

func callContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

// The hub runs in process: a save is peeked and dequeued through a real gRPC
// client, the gateway answers on its own address, and Close is prompt.
func TestSavePeekDequeueInProcess(t *testing.T) {
	r := start(t, testConfig(t))
	recipient := uuid.NewString()
	n := notification(recipient)

	saved, err := r.client.Save(callContext(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{n}})
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	if saved.GetSaved() != 1 {
		t.Fatalf("Save: saved %d, want 1", saved.GetSaved())
	}
	peeked, err := r.client.Peek(callContext(t), &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	b := peeked.GetBundle()
	if ids := b.GetNotificationIds(); len(ids) != 1 || ids[0] != n.GetId() {
		t.Fatalf("Peek: bundle %v, want the saved notification %s", b, n.GetId())
	}
	if _, err := r.client.Dequeue(callContext(t), &messagehubv1.DequeueRequest{Recipient: recipient, BundleId: b.GetId()}); err != nil {
		t.Fatalf("Dequeue: %v", err)
	}
	after, err := r.client.Peek(callContext(t), &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil || after.GetBundle() != nil {
		t.Fatalf("Peek after Dequeue: %v, %v; want no bundle", after.GetBundle(), err)
	}

	req, err := http.NewRequestWithContext(callContext(t), http.MethodGet, "http://"+r.app.HTTPAddr()+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz: %d, want 200", resp.StatusCode)
	}

	if err := r.closeWithin(t); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := r.client.Peek(callContext(t), &messagehubv1.PeekRequest{Recipient: recipient}); err == nil {
		t.Error("a Peek after Close succeeded")
	}
}

// An App closed without having run releases what it opened: another opens
// the same data directory.
func TestCloseWithoutRunReleasesTheStore(t *testing.T) {
	cfg := testConfig(t)
	first, err := app.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	second, err := app.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("a second App on the data directory of a closed one: %v", err)
	}
	if err := second.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// A hub whose address is taken by another process fails to start with the
// address in its error, having written nothing: no store is created in a
// data directory that did not exist.
func TestAnAddressInUseCreatesNoStore(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, flag := range []string{"--grpc-addr", "--http-addr", "--metrics-addr"} {
		t.Run(flag, func(t *testing.T) {
			failsCreatingNoStore(t, taken.Addr().String(), flag, taken.Addr().String())
		})
	}
}

// A file named by a flag that cannot be read fails the start, naming the
// flag, before a store is created.
func TestAFileThatCannotBeReadCreatesNoStore(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for name, flags := range map[string][]string{
		"--tls-cert": {"--tls-cert", missing, "--tls-key", missing},
		"--jwks-file": {"--auth", "jwt", "--jwks-file", missing, "--jwt-issuer", "https://issuer.example/",
			"--jwt-audience", "messagehub"},
		"--content-provider-ca":   {"--content-provider-tls", "--content-provider-ca", missing},
		"--content-provider-cert": {"--content-provider-tls", "--content-provider-cert", missing, "--content-provider-key", missing},
		"--content-provider-token-file": {"--content-provider-tls", "--content-provider-token-file", missing,
			"--content-provider", "DOMAIN_TIME_SERIES=127.0.0.1:1"},
	} {
		t.Run(name, func(t *testing.T) {
			failsCreatingNoStore(t, missing, flags...)
		})
	}
}

// failsCreatingNoStore checks that New with flags fails with an error that
// says want and leaves its data directory, which did not exist, unmade.
func failsCreatingNoStore(t *testing.T, want string, flags ...string) {
	t.Helper()
	dataDir := filepath.Join(t.TempDir(), "data")
	a, err := app.New(t.Context(), testConfig(t, append([]string{"--data-dir", dataDir}, flags...)...))
	if err == nil {
		_ = a.Close()
		t.Fatalf("New with %v succeeded", flags)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("New = %v, want an error naming %s", err, want)
	}
	if _, statErr := os.Stat(dataDir); !errors.Is(statErr, fs.ErrNotExist) {
		t.Errorf("after New failed with %v, the data directory %s exists (stat: %v)", err, dataDir, statErr)
	}
}
