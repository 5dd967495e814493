// Package auth authenticates MessageHub callers by JWT and authorizes their
// calls: domains (role "domain") may Save, market actors (role "actor") may
// Peek and Dequeue, and only as themselves.
//
// Tokens are signed with RS256 or ES256 by a key of a JWKS file and carry
// exp, iss and aud (and optionally nbf); the actor id is a UUID claim (sub by
// default) and the roles a "roles" claim. Errors wrap domain.ErrUnauthenticated
// or domain.ErrPermissionDenied; the transport maps them to status codes.
package auth

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/energydatahub/messagehub/internal/domain"
)

// Roles a token can carry in its "roles" claim.
const (
	RoleActor  = "actor"  // may Peek and Dequeue its own bundles
	RoleDomain = "domain" // may Save notifications
)

// RolesClaim is the claim that lists the caller's roles: an array of strings
// (a single space-separated string is accepted too).
const RolesClaim = "roles"

// DefaultActorClaim is the claim that holds the actor id unless configured.
const DefaultActorClaim = "sub"

// leeway absorbs clock skew between the token issuer and the hub.
const leeway = 30 * time.Second

// reloadInterval bounds how often a token with an unknown kid makes the
// verifier re-read the JWKS file, so that rotated keys are picked up without
// a restart and garbage kids cannot make it read the file on every call.
const reloadInterval = 10 * time.Second

// Principal is an authenticated caller.
type Principal struct {
	Actor string   // lower-case UUID from the actor claim
	Roles []string // from the roles claim
}

// HasRole reports whether the principal holds role.
func (p Principal) HasRole(role string) bool { return slices.Contains(p.Roles, role) }

// Config configures a Verifier.
type Config struct {
	JWKSFile   string // required
	Issuer     string // required: tokens' iss must equal it
	Audience   string // required: tokens' aud must contain it
	ActorClaim string // empty means DefaultActorClaim
	Now        func() time.Time
}

// Verifier checks bearer tokens against the keys of a JWKS file.
type Verifier struct {
	cfg    Config
	parser *jwt.Parser

	mu        sync.Mutex
	keys      *KeySet
	modTime   time.Time
	lastCheck time.Time
}

// NewVerifier loads the JWKS file and returns a verifier for cfg.
func NewVerifier(cfg Config) (*Verifier, error) {
	if cfg.JWKSFile == "" || cfg.Issuer == "" || cfg.Audience == "" {
		return nil, errors.New("auth: a JWKS file, an issuer and an audience are required")
	}
	if cfg.ActorClaim == "" {
		cfg.ActorClaim = DefaultActorClaim
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	v := &Verifier{
		cfg: cfg,
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg()}),
			jwt.WithIssuer(cfg.Issuer),
			jwt.WithAudience(cfg.Audience),
			jwt.WithExpirationRequired(),
			jwt.WithLeeway(leeway),
			jwt.WithTimeFunc(cfg.Now),
		),
	}
	st, err := os.Stat(cfg.JWKSFile)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	keys, err := LoadJWKS(cfg.JWKSFile)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	v.keys, v.modTime, v.lastCheck = keys, st.ModTime(), cfg.Now()
	return v, nil
}

// Verify checks a compact JWT and returns its principal. Errors wrap
// domain.ErrUnauthenticated and say what is wrong with the token.
func (v *Verifier) Verify(token string) (Principal, error) {
	claims := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(token, claims, v.keyFor); err != nil {
		return Principal{}, fmt.Errorf("%w: %w", domain.ErrUnauthenticated, err)
	}
	raw, _ := claims[v.cfg.ActorClaim].(string)
	actor, err := domain.ParseUUID("claim "+v.cfg.ActorClaim, raw)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: the %q claim must be the actor's UUID", domain.ErrUnauthenticated, v.cfg.ActorClaim)
	}
	roles, err := rolesOf(claims[RolesClaim])
	if err != nil {
		return Principal{}, fmt.Errorf("%w: %w", domain.ErrUnauthenticated, err)
	}
	return Principal{Actor: actor, Roles: roles}, nil
}

func rolesOf(v any) ([]string, error) {
	switch r := v.(type) {
	case nil:
		return nil, nil
	case string:
		return strings.Fields(r), nil
	case []any:
		roles := make([]string, 0, len(r))
		for _, x := range r {
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("the %q claim must hold strings", RolesClaim)
			}
			roles = append(roles, s)
		}
		return roles, nil
	default:
		return nil, fmt.Errorf("the %q claim must be an array of strings", RolesClaim)
	}
}

// keyFor is the jwt.Keyfunc: the key of the token's kid and algorithm.
func (v *Verifier) keyFor(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	alg := t.Method.Alg()
	v.mu.Lock()
	defer v.mu.Unlock()
	key, err := v.keys.lookup(alg, kid)
	if err == nil || !v.reloadLocked() {
		return key, err
	}
	return v.keys.lookup(alg, kid)
}

// reloadLocked re-reads the JWKS file if it changed, at most once per
// reloadInterval, and reports whether the keys changed. A file that no longer
// parses keeps the old keys.
func (v *Verifier) reloadLocked() bool {
	now := v.cfg.Now()
	if now.Sub(v.lastCheck) < reloadInterval {
		return false
	}
	v.lastCheck = now
	st, err := os.Stat(v.cfg.JWKSFile)
	if err != nil || st.ModTime().Equal(v.modTime) {
		return false
	}
	keys, err := LoadJWKS(v.cfg.JWKSFile)
	if err != nil {
		return false
	}
	v.keys, v.modTime = keys, st.ModTime()
	return true
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFromContext returns the caller authenticated for this call, if any.
func PrincipalFromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
