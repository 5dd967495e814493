package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// buildExample compiles one of examples/ (or cmd/) into dir.
func buildExample(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(name))
	pkg := "github.com/energydatahub/messagehub/examples/" + name
	if strings.HasPrefix(name, "cmd/") {
		pkg = "github.com/energydatahub/messagehub/" + name
	}
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg).CombinedOutput()
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
	docs := t.TempDir()
	out, err = exec.CommandContext(ctx, actor, "--hub", h.base, "--recipient", recipient, "--idle", "500ms", "--out", docs).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "with 2500 notifications") {
		t.Fatalf("market-actor: %v\n%s", err, out)
	}
	// It fetched each bundle's document (here the bundle itself: the domain
	// has no provider) before dequeuing it.
	var bundles int
	if _, err := fmt.Sscanf(string(out), "dequeued %d bundles", &bundles); err != nil {
		t.Fatalf("market-actor output %q: %v", out, err)
	}
	files, err := os.ReadDir(docs)
	if err != nil || len(files) != bundles || bundles == 0 {
		t.Fatalf("%d documents written (%v) for %d bundles", len(files), err, bundles)
	}
	doc, err := os.ReadFile(filepath.Join(docs, files[0].Name()))
	if err != nil || !strings.HasSuffix(files[0].Name(), ".json") || !strings.Contains(string(doc), "notificationIds") {
		t.Fatalf("document %s: %v\n%.300s", files[0].Name(), err, doc)
	}
	// Nothing is left.
	h.do(t, "GET", "/v1/peek?recipient="+recipient, "", nil).want(t, 204)
}

// The one-step recipe of the README: devtoken's key and tokens start a hub
// with --auth jwt, the domain publishes with its token (in plaintext to
// loopback, as asked) and the actor drains as itself, named by its token.
func TestTheExamplesWithDevTokens(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout+2*callTimeout)
	defer cancel()
	devtoken := buildExample(ctx, t, "cmd/devtoken")
	publisher, actor := buildExample(ctx, t, "domain-publisher"), buildExample(ctx, t, "market-actor")
	dir, recipient := t.TempDir(), newID()
	out, err := exec.CommandContext(ctx, devtoken, "--out", dir, "--actor", recipient).CombinedOutput()
	if err != nil {
		t.Fatalf("devtoken: %v\n%s", err, out)
	}
	// The hub is started with the flags devtoken printed.
	m := regexp.MustCompile(`make run ARGS="([^"]+)"`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("devtoken printed no make run line:\n%s", out)
	}
	h := startHTTPHub(t, strings.Fields(string(m[1]))...)

	// Without a token the domain is refused; with it, it publishes.
	out, err = exec.CommandContext(ctx, publisher, "--hub", h.addr, "--recipient", recipient, "--count", "300").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Unauthenticated") {
		t.Fatalf("domain-publisher without a token: %v\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, publisher, "--hub", h.addr, "--recipient", recipient, "--count", "300",
		"--token-file", filepath.Join(dir, "domain.jwt"), "--token-over-loopback").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "published 300 notifications") {
		t.Fatalf("domain-publisher: %v\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, actor, "--hub", h.base, "--token-file", filepath.Join(dir, "actor.jwt"), "--idle", "500ms").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "with 300 notifications") {
		t.Fatalf("market-actor: %v\n%s", err, out)
	}
}
