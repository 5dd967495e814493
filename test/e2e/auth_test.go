package e2e

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/auth/authtest"
)

const (
	testIssuer   = "https://login.e2e.example/"
	testAudience = "messagehub-e2e"
)

// startJWTHub starts a hub with --auth jwt trusting a fresh issuer's keys.
func startJWTHub(t *testing.T) (*httpHub, *authtest.Issuer) {
	t.Helper()
	is := authtest.NewIssuer(t, testIssuer, testAudience)
	h := startHTTPHub(t, "--auth", "jwt", "--jwks-file", is.WriteJWKS(t),
		"--jwt-issuer", testIssuer, "--jwt-audience", testAudience)
	return h, is
}

// as returns a call context carrying token.
func as(t *testing.T, token string) context.Context {
	t.Helper()
	return metadata.AppendToOutgoingContext(ctxT(t), "authorization", "Bearer "+token)
}

func TestJWTActorsPeekAndDequeueOnlyAsThemselves(t *testing.T) {
	h, is := startJWTHub(t)
	a, b := newID(), newID()
	tokA := is.RS256(t, is.Claims(a, "actor"))
	tokB := is.ES256(t, is.Claims(b, "actor"))
	domainTok := is.RS256(t, is.Claims(newID(), "domain"))

	na := notification(a, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries")
	nb := notification(b, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries")
	if _, err := h.client.Save(as(t, domainTok), saveRequest(na, nb)); err != nil {
		t.Fatalf("Save with the domain role: %v", err)
	}

	// B's bundle becomes pending, peeked by B over HTTP without naming itself.
	bundleB := h.do(t, http.MethodGet, "/v1/peek/timeseries", tokB, nil).bundle(t)
	if bundleB.GetRecipient() != b {
		t.Fatalf("B's peek returned %v", bundleB)
	}

	t.Run("A cannot peek as B", func(t *testing.T) {
		h.do(t, http.MethodGet, "/v1/peek?recipient="+b, tokA, nil).errorBody(t, http.StatusForbidden)
		_, err := h.client.Peek(as(t, tokA), &messagehubv1.PeekRequest{Recipient: b})
		wantCode(t, err, codes.PermissionDenied)
	})
	t.Run("A cannot dequeue as B", func(t *testing.T) {
		h.do(t, http.MethodDelete, "/v1/dequeue/"+bundleB.GetId()+"?recipient="+b, tokA, nil).errorBody(t, http.StatusForbidden)
		_, err := h.client.Dequeue(as(t, tokA), &messagehubv1.DequeueRequest{Recipient: b, BundleId: bundleB.GetId()})
		wantCode(t, err, codes.PermissionDenied)
		// Naming nobody, A dequeues as A: B's bundle is not A's.
		h.do(t, http.MethodDelete, "/v1/dequeue/"+bundleB.GetId(), tokA, nil).errorBody(t, http.StatusNotFound)
	})
	t.Run("B's bundle is untouched", func(t *testing.T) {
		again := h.do(t, http.MethodGet, "/v1/peek", tokB, nil).bundle(t)
		if again.GetId() != bundleB.GetId() {
			t.Fatalf("B's pending bundle changed: %v, was %v", again, bundleB)
		}
	})
	t.Run("A peeks and dequeues its own, named or not", func(t *testing.T) {
		resp, err := h.client.Peek(as(t, tokA), &messagehubv1.PeekRequest{})
		if err != nil || resp.GetBundle().GetRecipient() != a {
			t.Fatalf("A's gRPC peek = %v, %v", resp, err)
		}
		got := h.do(t, http.MethodGet, "/v1/peek?recipient="+strings.ToUpper(a), tokA, nil).bundle(t)
		if got.GetId() != resp.GetBundle().GetId() {
			t.Fatalf("A's HTTP peek %v, gRPC peek %v", got, resp.GetBundle())
		}
		h.do(t, http.MethodDelete, "/v1/dequeue/"+got.GetId(), tokA, nil).want(t, http.StatusOK)
		h.do(t, http.MethodGet, "/v1/peek", tokA, nil).want(t, http.StatusNoContent)
	})
	t.Run("B dequeues its own", func(t *testing.T) {
		if _, err := h.client.Dequeue(as(t, tokB), &messagehubv1.DequeueRequest{BundleId: bundleB.GetId()}); err != nil {
			t.Fatalf("B's dequeue: %v", err)
		}
	})
}

func TestJWTRejectsBadTokensAndMissingRoles(t *testing.T) {
	h, is := startJWTHub(t)
	actor := newID()
	claims := func(f func(jwt.MapClaims)) jwt.MapClaims {
		c := is.Claims(actor, "actor")
		f(c)
		return c
	}
	other := authtest.NewIssuer(t, testIssuer, testAudience)
	tests := []struct {
		name   string
		token  string
		status int
		code   codes.Code
	}{
		{"a missing token is 401", "", http.StatusUnauthorized, codes.Unauthenticated},
		{"an expired token is 401", is.RS256(t, claims(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() })), http.StatusUnauthorized, codes.Unauthenticated},
		{"a wrong audience is 401", is.ES256(t, claims(func(c jwt.MapClaims) { c["aud"] = "another-service" })), http.StatusUnauthorized, codes.Unauthenticated},
		{"a wrong issuer is 401", is.RS256(t, claims(func(c jwt.MapClaims) { c["iss"] = "https://elsewhere.example/" })), http.StatusUnauthorized, codes.Unauthenticated},
		{"a token of an unknown key is 401", other.RS256(t, claims(func(jwt.MapClaims) {})), http.StatusUnauthorized, codes.Unauthenticated},
		{"a domain token cannot peek: 403", is.RS256(t, is.Claims(actor, "domain")), http.StatusForbidden, codes.PermissionDenied},
		{"a token without roles cannot peek: 403", is.ES256(t, is.Claims(actor)), http.StatusForbidden, codes.PermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do(t, http.MethodGet, "/v1/peek", tt.token, nil)
			r.errorBody(t, tt.status)
			if tt.status == http.StatusUnauthorized && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("401 without a bearer challenge: %q", r.header.Get("WWW-Authenticate"))
			}
			ctx := ctxT(t)
			if tt.token != "" {
				ctx = as(t, tt.token)
			}
			_, err := h.client.Peek(ctx, &messagehubv1.PeekRequest{})
			wantCode(t, err, tt.code)
		})
	}

	t.Run("Save needs the domain role", func(t *testing.T) {
		n := notification(actor, messagehubv1.Domain_DOMAIN_CHARGES, "Charges")
		actorTok := is.RS256(t, is.Claims(actor, "actor"))
		h.do(t, http.MethodPost, "/v1/notifications", actorTok, saveRequest(n)).errorBody(t, http.StatusForbidden)
		_, err := h.client.Save(as(t, actorTok), saveRequest(n))
		wantCode(t, err, codes.PermissionDenied)
		h.do(t, http.MethodPost, "/v1/notifications", "", saveRequest(n)).errorBody(t, http.StatusUnauthorized)
		// Nothing was stored by the refused saves.
		h.do(t, http.MethodGet, "/v1/peek", actorTok, nil).want(t, http.StatusNoContent)

		domainTok := is.ES256(t, is.Claims(newID(), "domain"))
		h.do(t, http.MethodPost, "/v1/notifications", domainTok, saveRequest(n)).want(t, http.StatusOK)
		h.do(t, http.MethodGet, "/v1/peek/masterdata", actorTok, nil).bundle(t)
	})

	t.Run("health needs no token", func(t *testing.T) {
		h.do(t, http.MethodGet, "/healthz", "", nil).want(t, http.StatusOK)
		if _, err := h.health.Check(ctxT(t), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("gRPC health without a token: %v", err)
		}
	})
}

// The refusal comes from the configuration, before anything listens: these
// hubs bind nothing off loopback. That --auth jwt lets the same addresses
// through, and the check of what was bound, are unit tests in
// cmd/messagehub, so no test binds every interface.
func TestAuthNoneRefusesToStartOffLoopback(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"gRPC on every interface", []string{"--grpc-addr", "0.0.0.0:0", "--http-addr", "127.0.0.1:0"}, `--grpc-addr is "0.0.0.0:0"`},
		{"HTTP on every interface", []string{"--grpc-addr", "127.0.0.1:0", "--http-addr", ":0"}, `--http-addr is ":0"`},
		{"HTTP on every interface, auth none said explicitly", []string{"--auth", "none", "--grpc-addr", "127.0.0.1:0", "--http-addr", "0.0.0.0:0"}, "refusing to start"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, append(tt.args, "--data-dir", t.TempDir())...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("exit: %v (want status 2)\n%s", err, out)
			}
			if !strings.Contains(string(out), tt.want) || !strings.Contains(string(out), "--auth jwt") {
				t.Errorf("message does not say what is wrong and what to do:\n%s", out)
			}
		})
	}
}
