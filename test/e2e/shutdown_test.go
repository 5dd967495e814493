package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/diskguard"
)

func TestSIGTERMTurnsHealthNotServingAndExitsCleanly(t *testing.T) {
	dataDir := t.TempDir()
	h := startHubIn(t, dataDir)
	recipient := newID()
	n := notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries")
	save(t, h, n)

	// Watch both health names; the first message is the current status.
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	names := []string{"", "messagehub.v1.MessageHub"}
	streams := make([]healthpb.Health_WatchClient, len(names))
	for i, name := range names {
		stream, err := h.health.Watch(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil {
			t.Fatalf("Watch(%q): %v", name, err)
		}
		if resp, err := stream.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Watch(%q) first status = %v, %v; want SERVING", name, resp.GetStatus(), err)
		}
		streams[i] = stream
	}

	notServing := make(chan error, 1)
	go func() {
		for i, stream := range streams {
			resp, err := stream.Recv()
			if err != nil {
				notServing <- err
				return
			}
			if resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
				t.Errorf("Watch(%q) after SIGTERM = %s, want NOT_SERVING", names[i], resp.GetStatus())
			}
		}
		// Like a real client that saw NOT_SERVING, stop watching so the
		// graceful stop need not wait for the streams.
		cancel()
		notServing <- nil
	}()

	took, err := h.terminate(t)
	if err != nil {
		t.Fatalf("exit after SIGTERM: %v (want status 0)\n%s", err, h.log())
	}
	if err := <-notServing; err != nil {
		t.Errorf("health watch ended without NOT_SERVING: %v", err)
	}
	t.Logf("exited %s after SIGTERM", took)
	for _, want := range []string{`"msg":"shutting down"`, `"msg":"store closed"`} {
		if !strings.Contains(h.log(), want) {
			t.Errorf("log lacks %s:\n%s", want, h.log())
		}
	}

	// The store was closed cleanly: a restart on the same data finds the save.
	h2 := startHubIn(t, dataDir)
	b := peek(t, h2, recipient, messagehubv1.PeekGroup_PEEK_GROUP_ALL, "")
	if !slices.Equal(b.GetNotificationIds(), []string{n.GetId()}) {
		t.Errorf("after restart peek = %v, want the saved notification %s", b, n.GetId())
	}
	if _, err := h2.terminate(t); err != nil {
		t.Errorf("second exit: %v", err)
	}
}

func TestASecondHubOnTheSameDataDirSaysItIsInUse(t *testing.T) {
	dir := t.TempDir()
	first := startHubIn(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "--grpc-addr", "127.0.0.1:0", "--data-dir", dir).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("the second hub did not fail: %v\n%s", err, out)
	}
	for _, want := range []string{"in use by another process", dir, fmt.Sprintf("(pid %d)", first.Cmd.Process.Pid)} {
		if !strings.Contains(string(out), want) {
			t.Errorf("its message does not say %q:\n%s", want, out)
		}
	}
	if n := strings.Count(string(out), "open embedded store"); n != 1 {
		t.Errorf("its message repeats its prefix:\n%s", out)
	}
}

// fakeFreeEnv tells a hub of the test binary how much its data volume has
// free (internal/diskguard/fakefree.go): a nearly full volume without
// filling a real one, read by the hub's own disk guard, whose counting and
// refusals are the real ones.
const fakeFreeEnv = "MESSAGEHUB_FAKE_DISK_FREE"

// A volume below --min-free-disk: the hub starts, says once why saves are
// refused, refuses them with RESOURCE_EXHAUSTED, and still serves peeks and
// dequeues of what was saved before. Below half of it, where pebble could
// meet a full disk, it opens its store read-only: it serves the pending
// bundle and refuses every write, without a panic.
func TestANearlyFullVolumeRefusesSavesAndServesTheRest(t *testing.T) {
	dir := t.TempDir()
	recipients := []string{newID(), newID()}
	h := startHubIn(t, dir)
	for _, r := range recipients {
		n := notification(r, messagehubv1.Domain_DOMAIN_CHARGES, "Charge")
		if _, err := h.client.Save(ctxT(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{n}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.terminate(t); err != nil {
		t.Fatal(err)
	}

	// 24 MiB free, below the 32 MiB reserve but above half of it: saves
	// are refused, peeks and dequeues go on.
	const reserve = "32MiB"
	t.Setenv(fakeFreeEnv, "24MiB")
	h = startHubIn(t, dir, "--min-free-disk", reserve)
	refused := func(what string, err error, want string) {
		t.Helper()
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v; want RESOURCE_EXHAUSTED saying %q", what, err, want)
		}
	}
	_, err := h.client.Save(ctxT(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{
		notification(recipients[0], messagehubv1.Domain_DOMAIN_CHARGES, "Charge"),
	}})
	refused("a save on a nearly full volume", err, "--min-free-disk")
	peeked, err := h.client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipients[0]})
	if err != nil || len(peeked.GetBundle().GetNotificationIds()) != 1 {
		t.Fatalf("peek on a nearly full volume: %v, %v", peeked, err)
	}
	if _, err := h.client.Dequeue(ctxT(t), &messagehubv1.DequeueRequest{Recipient: recipients[0], BundleId: peeked.GetBundle().GetId()}); err != nil {
		t.Fatalf("dequeue on a nearly full volume: %v", err)
	}
	if n := strings.Count(h.log(), "saves are refused"); n != 1 {
		t.Fatalf("%d log lines say saves are refused, want 1:\n%s", n, h.log())
	}
	pending, err := h.client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipients[1]})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.terminate(t); err != nil {
		t.Fatal(err)
	}

	// 8 MiB free, below half the reserve.
	t.Setenv(fakeFreeEnv, "8MiB")
	h = startHubIn(t, dir, "--min-free-disk", reserve)
	again, err := h.client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipients[1]})
	if err != nil || again.GetBundle().GetId() != pending.GetBundle().GetId() {
		t.Fatalf("peek of the pending bundle on an almost full volume: %v, %v", again, err)
	}
	_, err = h.client.Dequeue(ctxT(t), &messagehubv1.DequeueRequest{Recipient: recipients[1], BundleId: pending.GetBundle().GetId()})
	refused("a dequeue on an almost full volume", err, "every write is refused")
	for _, want := range []string{"every write is refused", "opened read-only"} {
		if n := strings.Count(h.log(), want); n != 1 {
			t.Fatalf("%d log lines say %q, want 1:\n%s", n, want, h.log())
		}
	}
}

// A --min-free-disk the data volume can never have free, its whole size,
// would refuse every save for as long as the hub runs: the hub refuses to
// start instead, naming the flag, the value and the volume's size, and
// leaves the data directory unmade.
func TestAReserveAsLargeAsTheVolumeIsRefusedAtStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	size, err := diskguard.Size(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "--grpc-addr", "127.0.0.1:0", "--data-dir", dir,
		"--min-free-disk", strconv.FormatUint(size, 10)).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("the hub did not refuse to start: %v\n%s", err, out)
	}
	for _, want := range []string{"--min-free-disk", fmt.Sprintf("%d bytes", size), diskguard.FormatSize(size), dir} {
		if !strings.Contains(string(out), want) {
			t.Errorf("its message does not say %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the data directory after the refusal: %v; want it not made", err)
	}
}
