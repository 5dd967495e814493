package auth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/auth"
	"github.com/energydatahub/messagehub/internal/auth/authtest"
	"github.com/energydatahub/messagehub/internal/telemetry"
)

// clock is a settable time for a verifier's Now.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Now()} }
func verifierAt(t *testing.T, path string, c *clock) *auth.Verifier {
	t.Helper()
	v, err := auth.NewVerifier(auth.Config{JWKSFile: path, Issuer: issuer, Audience: audience, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// only is the JWKS document doc with only the keys of the given kids.
func only(t *testing.T, doc []byte, kids ...string) []byte {
	t.Helper()
	var d struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	d.Keys = slices.DeleteFunc(d.Keys, func(k map[string]any) bool { return !slices.Contains(kids, k["kid"].(string)) })
	out, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A key taken out of the JWKS file is refused once the verifier has looked
// at the file again, at most CheckInterval later, although its tokens name
// a kid the verifier knows and so never ask for a reload themselves.
func TestARemovedKeyIsRefusedAfterTheNextCheck(t *testing.T) {
	is := authtest.NewIssuer(t, issuer, audience)
	path := is.WriteJWKS(t)
	c := newClock()
	v := verifierAt(t, path, c)
	rsaTok := is.RS256(t, is.Claims(actorA, auth.RoleActor))
	ecTok := is.ES256(t, is.Claims(actorA, auth.RoleActor))
	if _, err := v.Verify(rsaTok); err != nil {
		t.Fatal(err)
	}
	write(t, path, only(t, is.JWKS(t), authtest.ECKeyID))
	c.advance(auth.CheckInterval)
	if _, err := v.Verify(rsaTok); err == nil || !strings.Contains(err.Error(), authtest.RSAKeyID) {
		t.Fatalf("Verify = %v; a token of the removed key %s is still accepted %s after the removal", err, authtest.RSAKeyID, auth.CheckInterval)
	}
	if _, err := v.Verify(ecTok); err != nil {
		t.Fatalf("the key left in the file is refused: %v", err)
	}
}

// A key replaced under the same kid, by a file of the same size and the same
// modification time (coarse file systems, a restored backup), is noticed by
// the file's content.
func TestAKeyReplacedWithTheSameSizeAndModTimeIsNoticed(t *testing.T) {
	is := authtest.NewIssuer(t, issuer, audience)
	path := is.WriteJWKS(t)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	c := newClock()
	v := verifierAt(t, path, c)
	next := authtest.NewIssuer(t, issuer, audience)
	if len(next.JWKS(t)) != int(st.Size()) {
		t.Fatalf("the replacement is %d bytes, not %d: the test needs the same size", len(next.JWKS(t)), st.Size())
	}
	write(t, path, next.JWKS(t))
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	c.advance(auth.CheckInterval)
	if _, err := v.Verify(is.ES256(t, is.Claims(actorA, auth.RoleActor))); err == nil {
		t.Fatal("a token of the replaced key is still accepted")
	}
	if _, err := v.Verify(next.ES256(t, next.Claims(actorA, auth.RoleActor))); err != nil {
		t.Fatalf("a token of the new key is refused: %v", err)
	}
}

// jwks is a JWKS document of keys, each taken from a document by kid and
// given the kid as.
func jwks(t *testing.T, keys ...map[string]any) []byte {
	t.Helper()
	out, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func key(t *testing.T, doc []byte, kid, as string) map[string]any {
	t.Helper()
	var d struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	for _, k := range d.Keys {
		if k["kid"] == kid {
			k["kid"] = as
			return k
		}
	}
	t.Fatalf("no kid %q", kid)
	return nil
}

// outcomes records the reloads a verifier counts.
type outcomes []string

func (o *outcomes) RecordJWKSReload(_ context.Context, outcome string) { *o = append(*o, outcome) }

type logLine struct {
	Level, Msg, Error        string
	Added, Removed, Replaced []string
}

// lines are the JSON log lines in buf, which it empties.
func lines(t *testing.T, buf *bytes.Buffer) []logLine {
	t.Helper()
	var out []logLine
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var ll logLine
		if err := json.Unmarshal([]byte(l), &ll); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, ll)
	}
	buf.Reset()
	return out
}

func loggedVerifier(t *testing.T, path string, logs *bytes.Buffer, rec auth.ReloadRecorder) *auth.Verifier {
	t.Helper()
	v, err := auth.NewVerifier(auth.Config{JWKSFile: path, Issuer: issuer, Audience: audience,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)), Reloads: rec})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A reload says at info which key ids came, went, or got another key, and
// is counted as ok.
func TestAReloadIsLoggedWithTheKeyIDsGainedAndLost(t *testing.T) {
	is := authtest.NewIssuer(t, issuer, audience)
	path := is.WriteJWKS(t)
	var logs bytes.Buffer
	var got outcomes
	v := loggedVerifier(t, path, &logs, &got)
	next := authtest.NewIssuer(t, issuer, audience)
	write(t, path, jwks(t, key(t, next.JWKS(t), authtest.ECKeyID, authtest.ECKeyID), key(t, next.JWKS(t), authtest.RSAKeyID, "rsa-2")))
	v.Check()
	l := lines(t, &logs)
	if len(l) != 1 || l[0].Level != "INFO" || !slices.Equal(l[0].Added, []string{"rsa-2"}) ||
		!slices.Equal(l[0].Removed, []string{authtest.RSAKeyID}) || !slices.Equal(l[0].Replaced, []string{authtest.ECKeyID}) {
		t.Fatalf("log after the reload: %+v", l)
	}
	if !slices.Equal(got, outcomes{"ok"}) {
		t.Fatalf("reloads counted: %v, want [ok]", got)
	}
	v.Check()
	if l := lines(t, &logs); len(l) != 0 || len(got) != 1 {
		t.Fatalf("a look at an unchanged file logged %+v and counted %v", l, got)
	}
}

// A file that cannot be used (it does not parse, has no usable key, is
// gone) is logged at warn and counted as an error, once for as long as it
// stays the same, and the keys of the last good file stay in use.
func TestAnUnusableFileIsLoggedCountedAndKeepsTheLastGoodKeys(t *testing.T) {
	is := authtest.NewIssuer(t, issuer, audience)
	path := is.WriteJWKS(t)
	var logs bytes.Buffer
	var got outcomes
	v := loggedVerifier(t, path, &logs, &got)
	tok := is.ES256(t, is.Claims(actorA, auth.RoleActor))
	for i, bad := range []func(){
		func() { write(t, path, []byte(`{"keys": [`)) }, // half written
		func() { write(t, path, []byte(`{"keys": []}`)) },
		func() {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		},
	} {
		bad()
		v.Check()
		v.Check()
		l := lines(t, &logs)
		if len(l) != 1 || l[0].Level != "WARN" || l[0].Error == "" {
			t.Fatalf("bad file %d: log %+v, want one warning with the error", i, l)
		}
		if want := slices.Repeat(outcomes{"error"}, i+1); !slices.Equal(got, want) {
			t.Fatalf("bad file %d: reloads counted %v, want %v", i, got, want)
		}
		if _, err := v.Verify(tok); err != nil {
			t.Fatalf("bad file %d: the last good key is dropped: %v", i, err)
		}
	}
	// Back to the content of the keys in use: good again, nothing changed.
	write(t, path, is.JWKS(t))
	v.Check()
	if l := lines(t, &logs); len(l) != 1 || l[0].Level != "INFO" || len(l[0].Added)+len(l[0].Removed)+len(l[0].Replaced) != 0 {
		t.Fatalf("log of the restored file: %+v", l)
	}
	if got[len(got)-1] != "ok" {
		t.Fatalf("reloads counted: %v, want ok last", got)
	}
	write(t, path, []byte(`{"keys": [`))
	v.Check()
	if l := lines(t, &logs); len(l) != 1 || l[0].Level != "WARN" {
		t.Fatalf("a bad file seen before the good one is not logged again: %+v", l)
	}
}

// The reloads are exported as messagehub_jwks_reloads_total by outcome.
func TestReloadsAreOnTheMetricsPage(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), "test", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	is := authtest.NewIssuer(t, issuer, audience)
	path := is.WriteJWKS(t)
	v := loggedVerifier(t, path, &bytes.Buffer{}, tel.Metrics)
	write(t, path, []byte("nope"))
	v.Check()
	write(t, path, only(t, is.JWKS(t), authtest.ECKeyID))
	v.Check()
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`messagehub_jwks_reloads_total{outcome="error"} 1`, `messagehub_jwks_reloads_total{outcome="ok"} 1`} {
		if !strings.Contains(rec.Body.String(), want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// A file the hub refuses (here for a key of an algorithm it does not take)
// still revokes: a key the last good file had and this one no longer lists
// is refused from the next look on, while the keys it still lists stay.
// An operator who takes out a compromised key in the same edit that adds
// an unusable one has taken it out.
func TestARefusedFileStillRevokesTheKeysItNoLongerLists(t *testing.T) {
	is := authtest.NewIssuer(t, issuer, audience)
	path := is.WriteJWKS(t)
	var logs bytes.Buffer
	var got outcomes
	v := loggedVerifier(t, path, &logs, &got)
	rsaTok := is.RS256(t, is.Claims(actorA, auth.RoleActor))
	ecTok := is.ES256(t, is.Claims(actorA, auth.RoleActor))
	var doc struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(only(t, is.JWKS(t), authtest.ECKeyID), &doc); err != nil {
		t.Fatal(err)
	}
	doc.Keys = append(doc.Keys, map[string]any{"kty": "RSA", "kid": "pss", "alg": "PS256", "n": "AQAB", "e": "AQAB"})
	refused, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	write(t, path, refused)
	v.Check()
	l := lines(t, &logs)
	if len(l) != 1 || l[0].Level != "WARN" || !slices.Equal(l[0].Removed, []string{authtest.RSAKeyID}) || !slices.Equal(got, outcomes{"error"}) {
		t.Fatalf("log %+v, reloads %v; want one warning naming %s as removed, one error", l, got, authtest.RSAKeyID)
	}
	if _, err := v.Verify(rsaTok); err == nil {
		t.Fatalf("a token of %s, which the refused file no longer lists, is still accepted", authtest.RSAKeyID)
	}
	if _, err := v.Verify(ecTok); err != nil {
		t.Fatalf("the key the refused file still lists is refused: %v", err)
	}
	// The good file back: both keys again.
	write(t, path, is.JWKS(t))
	v.Check()
	if _, err := v.Verify(rsaTok); err != nil {
		t.Fatalf("after the good file is back, %s is refused: %v", authtest.RSAKeyID, err)
	}
	if l := lines(t, &logs); len(l) != 1 || l[0].Level != "INFO" || !slices.Equal(l[0].Added, []string{authtest.RSAKeyID}) {
		t.Fatalf("log of the good file back: %+v", l)
	}
}
