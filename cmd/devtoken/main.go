// Command devtoken makes what `--auth jwt` needs to be tried locally in one
// step: a fresh ES256 signing key, its JWKS file, and tokens for a domain
// (may Save) and a market actor (may Peek and Dequeue as itself). It is for
// development only: the private key is thrown away and the tokens are
// bearer secrets with a long life.
//
//	go run ./cmd/devtoken --out dev-auth
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

const keyID = "messagehub-dev"

// config is what the command is asked for.
type config struct {
	out, issuer, audience, actor, domain string
	valid                                time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.out, "out", "dev-auth", "folder to write jwks.json, domain.jwt, actor.jwt, domain.id and actor.id into")
	flag.StringVar(&c.issuer, "issuer", "https://dev.messagehub.local/", "iss of the tokens (--jwt-issuer)")
	flag.StringVar(&c.audience, "audience", "messagehub", "aud of the tokens (--jwt-audience)")
	flag.StringVar(&c.actor, "actor", "", "the market actor's id (a UUID); empty: a new one")
	flag.StringVar(&c.domain, "domain", "", "the domain service's id (a UUID); empty: a new one")
	flag.DurationVar(&c.valid, "valid", 24*time.Hour, "how long the tokens are valid")
	flag.Parse()
	if err := run(c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "devtoken:", err)
		os.Exit(1)
	}
}

func run(c config, stdout io.Writer) error {
	for _, id := range []*string{&c.actor, &c.domain} {
		if *id == "" {
			*id = uuid.NewString()
		} else if _, err := uuid.Parse(*id); err != nil {
			return fmt.Errorf("%q is not a UUID", *id)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	jwks, err := jwksOf(&key.PublicKey)
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
	if err := os.MkdirAll(c.out, 0o750); err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"jwks.json": jwks, "domain.jwt": []byte(domainToken + "\n"), "actor.jwt": []byte(actorToken + "\n"),
		// The ids too, for scripts: a domain saves for the actor's id.
		"domain.id": []byte(c.domain + "\n"), "actor.id": []byte(c.actor + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(c.out, name), data, 0o600); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(stdout, `Wrote %[1]s/jwks.json, %[1]s/domain.jwt (domain %[2]s) and %[1]s/actor.jwt (actor %[3]s), valid for %[4]s.
Start the hub with them:
  make run ARGS="--auth jwt --jwks-file %[1]s/jwks.json --jwt-issuer %[5]s --jwt-audience %[6]s"
Then, for example:
  go run ./examples/domain-publisher --recipient %[3]s --token-file %[1]s/domain.jwt --token-over-loopback
  curl -i -H "Authorization: Bearer $(cat %[1]s/actor.jwt)" http://127.0.0.1:8080/v1/peek
  go run ./examples/market-actor --token-file %[1]s/actor.jwt
`, c.out, c.domain, c.actor, c.valid, c.issuer, c.audience)
	return err
}

// jwksOf is the JWKS document of one P-256 public key.
func jwksOf(pub *ecdsa.PublicKey) ([]byte, error) {
	point, err := pub.Bytes() // 0x04 || X || Y
	if err != nil {
		return nil, err
	}
	b64 := base64.RawURLEncoding.EncodeToString
	return json.MarshalIndent(map[string]any{"keys": []map[string]string{{
		"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": keyID,
		"x": b64(point[1:33]), "y": b64(point[33:]),
	}}}, "", "  ")
}
