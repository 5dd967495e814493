package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/auth"
)

// What devtoken writes is what the hub accepts: the domain may save, the
// actor may peek as itself and not as another.
func TestTheTokensAreAcceptedByTheHub(t *testing.T) {
	dir := t.TempDir()
	const actor = "aaaaaaaa-0000-4000-8000-000000000001"
	var out strings.Builder
	c := config{out: dir, issuer: "https://dev.test/", audience: "hub", actor: actor, valid: time.Hour}
	if err := run(c, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "--jwks-file "+dir+"/jwks.json --jwt-issuer https://dev.test/ --jwt-audience hub") {
		t.Errorf("the printed command does not match what was written:\n%s", out.String())
	}
	if id, err := os.ReadFile(filepath.Join(dir, "actor.id")); err != nil || strings.TrimSpace(string(id)) != actor {
		t.Errorf("actor.id: %q, %v; want %s", id, err, actor)
	}
	v, err := auth.NewVerifier(auth.Config{JWKSFile: filepath.Join(dir, "jwks.json"), Issuer: "https://dev.test/", Audience: "hub"})
	if err != nil {
		t.Fatal(err)
	}
	a := auth.NewAuthorizer(v)
	with := func(file string) context.Context {
		token, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+strings.TrimSpace(string(token))))
	}
	if _, err := a.Authorize(with("domain.jwt"), messagehubv1.MessageHub_Save_FullMethodName, &messagehubv1.SaveRequest{}); err != nil {
		t.Errorf("the domain token cannot save: %v", err)
	}
	peek := &messagehubv1.PeekRequest{}
	if _, err := a.Authorize(with("actor.jwt"), messagehubv1.MessageHub_Peek_FullMethodName, peek); err != nil || peek.GetRecipient() != actor {
		t.Errorf("the actor token cannot peek as %s: %v (recipient %q)", actor, err, peek.GetRecipient())
	}
	if _, err := a.Authorize(with("actor.jwt"), messagehubv1.MessageHub_Save_FullMethodName, &messagehubv1.SaveRequest{}); err == nil {
		t.Error("the actor token may save")
	}
	if _, err := a.Authorize(with("admin.jwt"), adminv1.Admin_GetBacklog_FullMethodName, &adminv1.GetBacklogRequest{}); err != nil {
		t.Errorf("the admin token cannot call the Admin service: %v", err)
	}
	if _, err := a.Authorize(with("actor.jwt"), adminv1.Admin_GetBacklog_FullMethodName, &adminv1.GetBacklogRequest{}); err == nil {
		t.Error("the actor token may call the Admin service")
	}
}

func TestABadActorIDIsRefused(t *testing.T) {
	if err := run(config{out: t.TempDir(), actor: "me", valid: time.Hour}, &strings.Builder{}); err == nil {
		t.Fatal("a non-UUID actor was accepted")
	}
}

// Running devtoken again into the same folder does not invalidate the tokens
// it made before, which running clients hold: the JWKS after the second run
// verifies the tokens of both. The same holds when the private key of the
// first run is gone (a folder of an older devtoken, which did not keep it):
// the second run's new key gets a new kid and the old key stays in the JWKS.
func TestARunAgainKeepsTheTokensOfTheRunBefore(t *testing.T) {
	for _, keyLost := range []bool{false, true} {
		t.Run(map[bool]string{false: "key kept", true: "key lost"}[keyLost], func(t *testing.T) {
			dir := t.TempDir()
			c := config{out: dir, issuer: "https://dev.test/", audience: "hub", valid: time.Hour}
			if err := run(c, &strings.Builder{}); err != nil {
				t.Fatal(err)
			}
			first := readTokens(t, dir)
			if keyLost {
				if err := os.Remove(filepath.Join(dir, keyFile)); err != nil {
					t.Fatal(err)
				}
			}
			if err := run(c, &strings.Builder{}); err != nil {
				t.Fatal(err)
			}
			second := readTokens(t, dir)
			v, err := auth.NewVerifier(auth.Config{JWKSFile: filepath.Join(dir, "jwks.json"), Issuer: "https://dev.test/", Audience: "hub"})
			if err != nil {
				t.Fatal(err)
			}
			for i, tok := range append(first, second...) {
				if _, err := v.Verify(tok); err != nil {
					t.Errorf("token %d of %s: %v", i%len(first), map[bool]string{true: "the first run", false: "the second run"}[i < len(first)], err)
				}
			}
		})
	}
}

func readTokens(t *testing.T, dir string) []string {
	t.Helper()
	var toks []string
	for _, name := range []string{"domain.jwt", "actor.jwt", "admin.jwt"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, strings.TrimSpace(string(b)))
	}
	return toks
}

// Tokens that are expired when made are refused before anything is
// written: the hub would refuse every one of them.
func TestAValidityThatIsNotPositiveIsRefused(t *testing.T) {
	for _, valid := range []time.Duration{0, -time.Hour} {
		dir := filepath.Join(t.TempDir(), "dev-auth")
		var out strings.Builder
		err := run(config{out: dir, issuer: "https://dev.test/", audience: "hub", valid: valid}, &out)
		if err == nil || !strings.Contains(err.Error(), "--valid") {
			t.Errorf("--valid %s: %v; want a refusal naming --valid", valid, err)
		}
		if _, statErr := os.Stat(dir); !os.IsNotExist(statErr) || out.Len() != 0 {
			t.Errorf("--valid %s wrote %s (%v) and said %.80q; want nothing", valid, dir, statErr, out.String())
		}
	}
}

// A run again replaces each token file by a rename, never rewrites it in
// place: a client reading its --token-file meanwhile reads the whole old
// token or the whole new one, never an empty or half-written file. A
// reader holding the old file open still reads the whole old token.
func TestARunAgainReplacesTheTokenFilesWhole(t *testing.T) {
	dir := t.TempDir()
	c := config{out: dir, issuer: "https://dev.test/", audience: "hub", valid: time.Hour}
	if err := run(c, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	names := []string{"domain.jwt", "actor.jwt", "admin.jwt"}
	old := readTokens(t, dir)
	held := make([]*os.File, len(names))
	for i, name := range names {
		f, err := os.Open(filepath.Join(dir, name)) //nolint:gosec // the test's folder
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		held[i] = f
	}
	if err := run(c, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	for i, name := range names {
		b, err := io.ReadAll(held[i])
		if err != nil || strings.TrimSpace(string(b)) != old[i] {
			t.Errorf("%s held open across a run reads %q, %v; want the whole old token", name, b, err)
		}
		was, err := held[i].Stat()
		if err != nil {
			t.Fatal(err)
		}
		now, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if os.SameFile(was, now) {
			t.Errorf("%s was rewritten in place, not replaced", name)
		}
	}
}
