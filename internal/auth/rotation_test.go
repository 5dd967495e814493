package auth_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/auth"
	"github.com/energydatahub/messagehub/internal/auth/authtest"
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
