package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
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

// A volume below --min-free-disk: the hub starts, says once why saves are
// refused, refuses them with RESOURCE_EXHAUSTED, and still serves peeks and
// dequeues of what was saved before.
func TestANearlyFullVolumeRefusesSavesAndServesTheRest(t *testing.T) {
	dir := t.TempDir()
	recipient := newID()
	h := startHubIn(t, dir)
	n := notification(recipient, messagehubv1.Domain_DOMAIN_CHARGES, "Charge")
	if _, err := h.client.Save(ctxT(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{n}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.terminate(t); err != nil {
		t.Fatal(err)
	}

	h = startHubIn(t, dir, "--min-free-disk", "1000000TiB") // more than any volume has
	_, err := h.client.Save(ctxT(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{
		notification(recipient, messagehubv1.Domain_DOMAIN_CHARGES, "Charge"),
	}})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--min-free-disk") {
		t.Fatalf("a save on a nearly full volume: %v; want RESOURCE_EXHAUSTED naming --min-free-disk", err)
	}
	peeked, err := h.client.Peek(ctxT(t), &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil || len(peeked.GetBundle().GetNotificationIds()) != 1 {
		t.Fatalf("peek on a nearly full volume: %v, %v", peeked, err)
	}
	if _, err := h.client.Dequeue(ctxT(t), &messagehubv1.DequeueRequest{Recipient: recipient, BundleId: peeked.GetBundle().GetId()}); err != nil {
		t.Fatalf("dequeue on a nearly full volume: %v", err)
	}
	if n := strings.Count(h.log(), "saves are refused"); n != 1 {
		t.Fatalf("%d log lines say saves are refused, want 1:\n%s", n, h.log())
	}
}
