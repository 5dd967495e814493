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
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	RoleAdmin  = "admin"  // may call the Admin service (inspection and remedies), for any recipient
)

// RolesClaim is the claim that lists the caller's roles: an array of strings
// (a single space-separated string is accepted too).
const RolesClaim = "roles"

// DefaultActorClaim is the claim that holds the actor id unless configured.
const DefaultActorClaim = "sub"

// leeway absorbs clock skew between the token issuer and the hub.
const leeway = 30 * time.Second

// CheckInterval is how often the verifier looks at the JWKS file for
// changes: a call that finds the last look at least this old looks again
// before it checks its token. A key added to or removed from the file is
// therefore trusted or refused by every call made CheckInterval after the
// file was written. A look reads and hashes the file (a few kilobytes) and
// parses it only when it changed, so it is cheap at this rate.
const CheckInterval = 5 * time.Second

// LookWait is the longest calls wait for a look at the JWKS file: a read
// that takes longer (the file on a network file system whose server stopped
// answering) is taken, until it ends, for a file that cannot be read, and
// the calls go on with the keys of the last look rather than each wait for
// it, past its deadline. The read's outcome is taken when it ends.
const LookWait = time.Second

// firstReadWait bounds the first read of the JWKS file, at start: a file on
// a network file system whose server stopped answering fails the start,
// naming it, rather than holding it (and the signal that would stop it).
var firstReadWait = 30 * time.Second

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
	Logger     *slog.Logger   // reloads of the JWKS file; nil means slog.Default()
	Reloads    ReloadRecorder // counts reloads of the JWKS file; nil counts nothing
}

// ReloadRecorder counts the verifier's reloads of a changed JWKS file by
// outcome: "ok" (the file's keys are in use) or "error" (the file cannot be
// read or parsed, and the keys of the last good one stay in use).
// *telemetry.Metrics implements it.
type ReloadRecorder interface {
	RecordJWKSReload(ctx context.Context, outcome string)
}

// Verifier checks bearer tokens against the keys of a JWKS file, which it
// re-reads when the file changes (see CheckInterval).
type Verifier struct {
	cfg    Config
	parser *jwt.Parser

	mu   sync.Mutex
	file jwksFile
	// looking is closed when the look at the file under way ends, nil
	// when none is; lookDeadline is when calls stop waiting for it.
	looking      chan struct{}
	lookDeadline time.Time
}

// NewVerifier loads the JWKS file and returns a verifier for cfg.
func NewVerifier(cfg Config) (*Verifier, error) {
	if cfg.JWKSFile == "" || cfg.Issuer == "" || cfg.Audience == "" {
		return nil, errors.New("auth: a JWKS file, an issuer and an audience are required")
	}
	cfg.ActorClaim = cmp.Or(cfg.ActorClaim, DefaultActorClaim)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
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
	// The first read: any content differs from none.
	data, err := readWithin(cfg.JWKSFile, firstReadWait)
	if _, _, err := v.file.reload(cfg.JWKSFile, data, err, cfg.Now()); err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return v, nil
}

// readWithin reads the file at path, or fails once wait has passed; a read
// that does not end is left to end (or not) on its own goroutine.
func readWithin(path string, wait time.Duration) ([]byte, error) {
	type read struct {
		data []byte
		err  error
	}
	done := make(chan read, 1)
	go func() {
		data, err := os.ReadFile(path) //nolint:gosec // the operator names the file
		done <- read{data, err}
	}()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.data, r.err
	case <-timer.C:
		return nil, fmt.Errorf("%s not read within %v (a network file system that does not answer?)", path, wait)
	}
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

// keyFor is the jwt.Keyfunc: the key of the token's kid and algorithm, from
// the file as it is now if the last look at it is CheckInterval old (see
// currentKeys). A token whose header names critical extensions ("crit") is
// refused: the hub understands none, and RFC 7515 (4.1.11) says such a
// token must then be refused; golang-jwt leaves that to the caller.
func (v *Verifier) keyFor(t *jwt.Token) (any, error) {
	if _, ok := t.Header["crit"]; ok {
		return nil, errors.New(`the token's header names critical extensions ("crit"), which this hub does not understand`)
	}
	kid, _ := t.Header["kid"].(string)
	return v.currentKeys().lookup(t.Method.Alg(), kid)
}

type principalKey struct{}

// PrincipalFromContext returns the caller authenticated for this call, if any.
func PrincipalFromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
