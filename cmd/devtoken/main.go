// Command devtoken makes what `--auth jwt` needs to be tried locally in one
// step: an ES256 signing key, its JWKS file, and tokens for a domain (may
// Save), a market actor (may Peek and Dequeue as itself) and an operator
// (the admin role: the Admin service, `messagehub admin`). It is for
// development only: the private key is kept unencrypted in the output folder
// and the tokens are bearer secrets with a long life.
//
// Run again into the same folder, it signs with the key it made before, so
// the tokens of earlier runs stay valid in a running hub. Without that key
// (it was deleted, or an older devtoken made the folder) it makes a new one
// under a new kid and keeps the keys already in jwks.json.
//
//	go run ./cmd/devtoken --out dev-auth
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/auth"
)

// keyFile is the private key in the output folder.
const keyFile = "signing-key.pem"

// jwksFile is the JWKS document in the output folder.
const jwksFile = "jwks.json"

// config is what the command is asked for.
type config struct {
	out, issuer, audience, actor, domain, admin string
	valid                                       time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.out, "out", "dev-auth", "folder to write signing-key.pem, jwks.json, domain.jwt, actor.jwt, admin.jwt and their .id files into (a key already there is reused)")
	flag.StringVar(&c.issuer, "issuer", "https://dev.messagehub.local/", "iss of the tokens (--jwt-issuer)")
	flag.StringVar(&c.audience, "audience", "messagehub", "aud of the tokens (--jwt-audience)")
	flag.StringVar(&c.actor, "actor", "", "the market actor's id (a UUID); empty: a new one")
	flag.StringVar(&c.domain, "domain", "", "the domain service's id (a UUID); empty: a new one")
	flag.StringVar(&c.admin, "admin", "", "the operator's id (a UUID, the admin token's subject); empty: a new one")
	flag.DurationVar(&c.valid, "valid", 24*time.Hour, "how long the tokens are valid")
	flag.Parse()
	if err := run(c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "devtoken:", err)
		os.Exit(1)
	}
}

func run(c config, stdout io.Writer) error {
	if c.valid <= 0 {
		return fmt.Errorf("--valid %s: tokens must be valid for some time (e.g. 24h)", c.valid)
	}
	for _, id := range []*string{&c.actor, &c.domain, &c.admin} {
		if *id == "" {
			*id = uuid.NewString()
		} else if _, err := uuid.Parse(*id); err != nil {
			return fmt.Errorf("%q is not a UUID", *id)
		}
	}
	if err := os.MkdirAll(c.out, 0o750); err != nil {
		return err
	}
	key, made, err := signingKey(filepath.Join(c.out, keyFile))
	if err != nil {
		return err
	}
	keyID, err := keyIDOf(&key.PublicKey)
	if err != nil {
		return err
	}
	jwks, err := withKey(filepath.Join(c.out, jwksFile), keyID, &key.PublicKey)
	if err != nil {
		return err
	}
	now := time.Now()
	token := func(subject, role string) (string, error) {
		t := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
			"iss": c.issuer, "aud": c.audience, "sub": subject, "roles": []string{role},
			"iat": now.Unix(), "exp": now.Add(c.valid).Unix(),
		})
		t.Header["kid"] = keyID
		return t.SignedString(key)
	}
	domainToken, err := token(c.domain, "domain")
	if err != nil {
		return err
	}
	actorToken, err := token(c.actor, "actor")
	if err != nil {
		return err
	}
	adminToken, err := token(c.admin, "admin")
	if err != nil {
		return err
	}
	// jwks.json first: a token is never there before the key that checks it.
	if err := replaceFile(c.out, jwksFile, jwks); err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"domain.jwt": []byte(domainToken + "\n"), "actor.jwt": []byte(actorToken + "\n"), "admin.jwt": []byte(adminToken + "\n"),
		// The ids too, for scripts: a domain saves for the actor's id.
		"domain.id": []byte(c.domain + "\n"), "actor.id": []byte(c.actor + "\n"), "admin.id": []byte(c.admin + "\n"),
	} {
		if err := replaceFile(c.out, name, data); err != nil {
			return err
		}
	}
	how := "Signed with the key of %[1]s/%[2]s (kid %[3]s), so earlier tokens stay valid.\n"
	if made {
		how = "Made a new signing key, %[1]s/%[2]s (kid %[3]s), added to %[1]s/%[4]s.\n"
	}
	if _, err := fmt.Fprintf(stdout, how, c.out, keyFile, keyID, jwksFile); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, `Wrote %[1]s/jwks.json, %[1]s/domain.jwt (domain %[2]s), %[1]s/actor.jwt (actor %[3]s) and %[1]s/admin.jwt (the admin role), valid for %[4]s.
Start the hub with them:
  make run ARGS="--auth jwt --jwks-file %[1]s/jwks.json --jwt-issuer %[5]s --jwt-audience %[6]s"
Then, for example:
  go run ./examples/domain-publisher --recipient %[3]s --token-file %[1]s/domain.jwt --token-over-loopback
  curl -i -H "Authorization: Bearer $(cat %[1]s/actor.jwt)" http://127.0.0.1:8080/v1/peek
  go run ./examples/market-actor --token-file %[1]s/actor.jwt
  go run ./cmd/messagehub admin backlog --recipient %[3]s --token-file %[1]s/admin.jwt
`, c.out, c.domain, c.actor, c.valid, c.issuer, c.audience)
	return err
}

// replaceFile writes data to the file name in dir by a rename of a file
// written beside it: a hub reading jwks.json, or a client its --token-file,
// meanwhile gets the old file or the new one whole, never an empty or half
// one.
func replaceFile(dir, name string, data []byte) error {
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// signingKey reads the P-256 key of path, or makes one and writes it there
// if there is none (made is true then).
func signingKey(path string) (key *ecdsa.PrivateKey, made bool, err error) {
	data, err := os.ReadFile(path) //nolint:gosec // the developer names the folder
	if errors.Is(err, fs.ErrNotExist) {
		if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			return nil, false, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, false, err
		}
		return key, true, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	}
	if err != nil {
		return nil, false, err
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, false, fmt.Errorf("%s: not a PEM private key; remove it to make a new one", path)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	if k, ok := parsed.(*ecdsa.PrivateKey); ok && k.Curve == elliptic.P256() {
		return k, false, nil
	}
	return nil, false, fmt.Errorf("%s: not a P-256 key; remove it to make a new one", path)
}

// jwkOf is the JWK of a P-256 public key: its members, without kid, in the
// order of RFC 7638.
func jwkOf(pub *ecdsa.PublicKey) (map[string]string, error) {
	point, err := pub.Bytes() // 0x04 || X || Y
	if err != nil {
		return nil, err
	}
	b64 := base64.RawURLEncoding.EncodeToString
	return map[string]string{"crv": "P-256", "kty": "EC", "x": b64(point[1:33]), "y": b64(point[33:])}, nil
}

// keyIDOf names a key by its RFC 7638 thumbprint, so that a new key never
// takes the kid of an old one, whose tokens a hub would then check against
// the wrong key, and the same key always gets the same kid.
func keyIDOf(pub *ecdsa.PublicKey) (string, error) {
	jwk, err := jwkOf(pub)
	if err != nil {
		return "", err
	}
	// encoding/json writes map members sorted, as the thumbprint wants.
	canonical, err := json.Marshal(jwk)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canonical)
	return "messagehub-dev-" + base64.RawURLEncoding.EncodeToString(sum[:])[:16], nil
}

// withKey is the JWKS document of the file at path (none if it does not
// exist) with the public key pub under kid, so that the keys of earlier runs
// stay trusted.
func withKey(path, kid string, pub *ecdsa.PublicKey) ([]byte, error) {
	var doc struct {
		Keys []map[string]any `json:"keys"`
	}
	data, err := os.ReadFile(path) //nolint:gosec // the developer names the folder
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("%s is not a JWKS document (%w); remove it to start afresh", path, err)
		}
	}
	jwk, err := jwkOf(pub)
	if err != nil {
		return nil, err
	}
	mine := map[string]any{"alg": "ES256", "use": "sig", "kid": kid}
	for k, v := range jwk {
		mine[k] = v
	}
	doc.Keys = slices.DeleteFunc(doc.Keys, func(k map[string]any) bool { return k["kid"] == kid })
	doc.Keys = append(doc.Keys, mine)
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	// What is written is what the hub accepts.
	if _, err := auth.ParseJWKS(out); err != nil {
		return nil, fmt.Errorf("%s with the new key: %w; remove it to start afresh", path, err)
	}
	return out, nil
}
