// Package authtest makes what tests of JWT authentication need: an issuer
// with freshly generated RS256 and ES256 keys, its JWKS file, and tokens.
package authtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Key ids of the issuer's keys in its JWKS.
const (
	RSAKeyID = "rsa-1"
	ECKeyID  = "ec-1"
)

// Issuer signs tokens with its own keys.
type Issuer struct {
	Issuer, Audience string
	RSA              *rsa.PrivateKey
	EC               *ecdsa.PrivateKey
}

// NewIssuer generates a 2048-bit RSA key and a P-256 key.
func NewIssuer(t testing.TB, issuer, audience string) *Issuer {
	t.Helper()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &Issuer{Issuer: issuer, Audience: audience, RSA: rk, EC: ek}
}

// JWKS is the issuer's public keys as a JWKS document.
func (is *Issuer) JWKS(t testing.TB) []byte {
	t.Helper()
	b64 := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	ecPoint, err := is.EC.PublicKey.Bytes() // 0x04 || X || Y
	if err != nil {
		t.Fatal(err)
	}
	doc := map[string]any{"keys": []map[string]string{
		{
			"kty": "RSA", "kid": RSAKeyID, "alg": "RS256", "use": "sig",
			"n": b64(is.RSA.N.Bytes()), "e": b64(big.NewInt(int64(is.RSA.E)).Bytes()),
		},
		{
			"kty": "EC", "kid": ECKeyID, "alg": "ES256", "use": "sig", "crv": "P-256",
			"x": b64(ecPoint[1:33]), "y": b64(ecPoint[33:]),
		},
	}}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// WriteJWKS writes the JWKS into a new file under t.TempDir and returns its path.
func (is *Issuer) WriteJWKS(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, is.JWKS(t), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Claims are valid claims for actor with roles, for an hour from now.
func (is *Issuer) Claims(actor string, roles ...string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{
		"iss": is.Issuer, "aud": is.Audience, "sub": actor, "roles": roles,
		"iat": now.Unix(), "nbf": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix(),
	}
}

// RS256 signs claims with the RSA key.
func (is *Issuer) RS256(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	return sign(t, jwt.SigningMethodRS256, RSAKeyID, claims, is.RSA)
}

// ES256 signs claims with the EC key.
func (is *Issuer) ES256(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	return sign(t, jwt.SigningMethodES256, ECKeyID, claims, is.EC)
}

func sign(t testing.TB, m jwt.SigningMethod, kid string, claims jwt.MapClaims, key any) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Sign signs claims with an arbitrary method, key id and key, for tokens
// that must fail (another key, another algorithm).
func Sign(t testing.TB, m jwt.SigningMethod, kid string, claims jwt.MapClaims, key any) string {
	t.Helper()
	return sign(t, m, kid, claims, key)
}
