package app_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/app"
	"github.com/energydatahub/messagehub/internal/auth/authtest"
)

// jwtConfig is testConfig with --auth jwt, trusting a new issuer's keys.
func jwtConfig(t *testing.T) (app.Config, *authtest.Issuer) {
	t.Helper()
	const issuer, audience = "https://issuer.test/", "messagehub"
	is := authtest.NewIssuer(t, issuer, audience)
	cfg, err := app.ParseConfig([]string{
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--min-free-disk", "0",
		"--auth", "jwt", "--jwks-file", is.WriteJWKS(t), "--jwt-issuer", issuer, "--jwt-audience", audience,
	}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ShutdownTimeout = shutdownTimeout
	return cfg, is
}

// A token's kid is the caller's to choose, as long as the headers allow (16
// KiB on gRPC, 64 KiB over HTTP), and a refusal names the kid no key has:
// the refusal's answer and its log line hold a bounded piece of it, so that
// a client sending bad tokens in a loop makes short lines, whatever the
// limit on how many it makes.
func TestARefusedTokensKeyIDIsAnsweredAndLoggedInABoundedPiece(t *testing.T) {
	const bound = 300 // bytes of an answer's or a line's error: the message and a piece of the kid
	cfg, is := jwtConfig(t)
	var logs logLines
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r := start(t, cfg)
	// Signed by the issuer's key, under a kid the JWKS does not have.
	withKid := func(n int) string {
		return authtest.Sign(t, jwt.SigningMethodRS256, "kid-"+strings.Repeat("K", n), is.Claims(uuid.NewString(), "actor"), is.RSA)
	}

	// gRPC: a kid of 10 KiB, within the header list's 16 KiB.
	ctx := metadata.AppendToOutgoingContext(callContext(t), "authorization", "Bearer "+withKid(10<<10))
	_, err := r.client.Peek(ctx, &messagehubv1.PeekRequest{})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a peek with an unknown kid: %v", err)
	}
	if msg := status.Convert(err).Message(); len(msg) > bound || !strings.Contains(msg, "kid-KKK") {
		t.Errorf("gRPC answer of %d bytes, want at most %d naming the kid's start: %.200s", len(msg), bound, msg)
	}

	// HTTP: a kid of 40 KiB, within the HTTP server's 64 KiB of headers.
	req, err := http.NewRequestWithContext(callContext(t), http.MethodGet, "http://"+r.app.HTTPAddr()+"/v1/peek", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+withKid(40<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /v1/peek with an unknown kid: %d %v", resp.StatusCode, err)
	}
	var answer struct{ Message string }
	if err := json.Unmarshal(body, &answer); err != nil {
		t.Fatalf("the 401's body: %v: %.200s", err, body)
	}
	if len(answer.Message) > bound || !strings.Contains(answer.Message, "kid-KKK") {
		t.Errorf("HTTP answer of %d bytes, want at most %d naming the kid's start: %.200s", len(answer.Message), bound, answer.Message)
	}

	if err := r.closeWithin(t); err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"call refused for its credentials", "HTTP request refused for its credentials"} {
		lines := logs.lines(t, func(m map[string]any) bool { return m["msg"] == msg })
		if len(lines) != 1 {
			t.Fatalf("%d lines %q; want 1", len(lines), msg)
		}
		if e, _ := lines[0]["error"].(string); len(e) > bound || !strings.Contains(e, "kid-KKK") {
			t.Errorf("%q logged with an error of %d bytes, want at most %d naming the kid's start: %.200s", msg, len(e), bound, e)
		}
	}
}
