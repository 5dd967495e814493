package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"unicode/utf8"
)

// KeySet is the public keys of a JWKS document that can verify RS256 or
// ES256 signatures.
type KeySet struct {
	keys []jwk
}

// jwk is one usable key: RSA keys verify RS256, P-256 keys ES256.
type jwk struct {
	kid string
	alg string // "RS256" or "ES256"
	key crypto.PublicKey
}

// rawJWK holds the members of a JSON Web Key (RFC 7517, 7518) that matter here.
type rawJWK struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// ParseJWKS parses a JWKS document. Keys for encryption ("use": "enc") are
// skipped; any other key that is not RSA or EC P-256 is an error, so that a
// typo does not silently leave the hub without the key it was meant to trust.
func ParseJWKS(data []byte) (*KeySet, error) {
	var doc struct {
		Keys []rawJWK `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not a JWKS document: %w", err)
	}
	ks := &KeySet{}
	seen := map[string]bool{}
	for i, raw := range doc.Keys {
		if raw.Use == "enc" {
			continue
		}
		k, err := parseJWK(raw)
		if err != nil {
			return nil, fmt.Errorf("key %d (kid %q): %w", i, raw.Kid, err)
		}
		if k.kid != "" {
			if seen[k.kid] {
				return nil, fmt.Errorf("key %d: kid %q is used twice", i, k.kid)
			}
			seen[k.kid] = true
		}
		ks.keys = append(ks.keys, k)
	}
	if len(ks.keys) == 0 {
		return nil, errors.New("no RS256 or ES256 signing key")
	}
	return ks, nil
}

func parseJWK(raw rawJWK) (jwk, error) {
	switch raw.Kty {
	case "RSA":
		if raw.Alg != "" && raw.Alg != "RS256" {
			return jwk{}, fmt.Errorf("RSA key for %q: only RS256 is accepted", raw.Alg)
		}
		n, err := decodeBigInt("n", raw.N)
		if err != nil {
			return jwk{}, err
		}
		e, err := decodeBigInt("e", raw.E)
		if err != nil {
			return jwk{}, err
		}
		if !e.IsInt64() || e.Int64() < 3 || e.Int64() > 1<<31-1 {
			return jwk{}, errors.New("RSA exponent out of range")
		}
		if n.BitLen() < 2048 {
			return jwk{}, fmt.Errorf("RSA key of %d bits: at least 2048 are needed", n.BitLen())
		}
		return jwk{kid: raw.Kid, alg: "RS256", key: &rsa.PublicKey{N: n, E: int(e.Int64())}}, nil
	case "EC":
		if raw.Crv != "P-256" {
			return jwk{}, fmt.Errorf("EC curve %q: only P-256 (ES256) is accepted", raw.Crv)
		}
		if raw.Alg != "" && raw.Alg != "ES256" {
			return jwk{}, fmt.Errorf("EC key for %q: only ES256 is accepted", raw.Alg)
		}
		x, err := decodeFixed("x", raw.X, 32)
		if err != nil {
			return jwk{}, err
		}
		y, err := decodeFixed("y", raw.Y, 32)
		if err != nil {
			return jwk{}, err
		}
		// Parse through the uncompressed point form, which checks that the
		// point is on the curve.
		point := append(append([]byte{4}, x...), y...)
		key, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
		if err != nil {
			return jwk{}, fmt.Errorf("EC point: %w", err)
		}
		return jwk{kid: raw.Kid, alg: "ES256", key: key}, nil
	default:
		return jwk{}, fmt.Errorf("key type %q: only RSA and EC keys are accepted", raw.Kty)
	}
}

func decodeBigInt(name, s string) (*big.Int, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("member %q is not base64url", name)
	}
	return new(big.Int).SetBytes(b), nil
}

func decodeFixed(name, s string, size int) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != size {
		return nil, fmt.Errorf("member %q is not %d bytes of base64url", name, size)
	}
	return b, nil
}

// lookup finds the key for a token signed with alg, named kid. A token
// without a kid is accepted only when exactly one key fits its algorithm.
func (ks *KeySet) lookup(alg, kid string) (crypto.PublicKey, error) {
	var found []jwk
	for _, k := range ks.keys {
		if k.alg == alg && (kid == "" || k.kid == kid) {
			found = append(found, k)
		}
	}
	switch {
	case len(found) == 1:
		return found[0].key, nil
	case len(found) == 0 && kid != "":
		return nil, fmt.Errorf("no %s key with kid %s", alg, shownKeyID(kid))
	case len(found) == 0:
		return nil, fmt.Errorf("no %s key", alg)
	default:
		return nil, fmt.Errorf("several %s keys and the token names none (kid)", alg)
	}
}

// maxShownKeyID bounds the piece of a token's kid a refusal names: the kid
// is the caller's to choose, up to the header limits (tens of KiB), and the
// refusal goes into its answer and a log line.
const maxShownKeyID = 64

// shownKeyID is kid quoted, cut to maxShownKeyID bytes (at a character's
// start) with its length when it is longer.
func shownKeyID(kid string) string {
	if len(kid) <= maxShownKeyID {
		return strconv.Quote(kid)
	}
	n := maxShownKeyID
	for n > 0 && !utf8.RuneStart(kid[n]) {
		n--
	}
	return fmt.Sprintf("%q... (%d bytes)", kid[:n], len(kid))
}
