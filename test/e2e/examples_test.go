package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildExample compiles one of examples/ into dir.
func buildExample(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/energydatahub/messagehub/examples/"+name).CombinedOutput()
	if err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	return bin
}

// The examples keep working: a domain publishes over gRPC with the Go
// client, an actor drains over plain HTTP.
func TestTheExamplesPublishAndDrain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout+2*callTimeout)
	defer cancel()
	publisher, actor := buildExample(ctx, t, "domain-publisher"), buildExample(ctx, t, "market-actor")
	h := startHTTPHub(t)
	recipient := newID()

	out, err := exec.CommandContext(ctx, publisher, "--hub", h.addr, "--recipient", recipient, "--count", "2500", "--batch", "1000").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "published 2500 notifications") {
		t.Fatalf("domain-publisher: %v\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, actor, "--hub", h.base, "--recipient", recipient, "--idle", "500ms").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "with 2500 notifications") {
		t.Fatalf("market-actor: %v\n%s", err, out)
	}
	// Nothing is left.
	h.do(t, "GET", "/v1/peek?recipient="+recipient, "", nil).want(t, 204)
}
