package auth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/metadata"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/auth"
	"github.com/energydatahub/messagehub/internal/auth/authtest"
	"github.com/energydatahub/messagehub/internal/domain"
)

const (
	issuer   = "https://issuer.example/"
	audience = "messagehub"
	actorA   = "aaaaaaaa-0000-4000-8000-000000000001"
	actorB   = "bbbbbbbb-0000-4000-8000-000000000002"
)

func newVerifier(t *testing.T, is *authtest.Issuer) *auth.Verifier {
	t.Helper()
	v, err := auth.NewVerifier(auth.Config{JWKSFile: is.WriteJWKS(t), Issuer: issuer, Audience: audience})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVerify(t *testing.T) {
	is := authtest.NewIssuer(t, issuer, audience)
	v := newVerifier(t, is)
	other := authtest.NewIssuer(t, issuer, audience)
	claims := func(f func(jwt.MapClaims)) jwt.MapClaims {
		c := is.Claims(actorA, auth.RoleActor)
		f(c)
		return c
	}
	valid := is.Claims(actorA, auth.RoleActor)
	tests := []struct {
		name    string
		token   string
		wantErr string // empty: valid
	}{
		{"an RS256 token is valid", is.RS256(t, valid), ""},
		{"an ES256 token is valid", is.ES256(t, valid), ""},
		{"a token without kid is valid when one key fits its algorithm", authtest.Sign(t, jwt.SigningMethodES256, "", valid, is.EC), ""},
		{"an upper-case actor id is accepted", is.RS256(t, claims(func(c jwt.MapClaims) { c["sub"] = strings.ToUpper(actorA) })), ""},
		{"an expired token is refused", is.RS256(t, claims(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() })), "expired"},
		{"a token without exp is refused", is.RS256(t, claims(func(c jwt.MapClaims) { delete(c, "exp") })), "exp"},
		{"a token not valid yet is refused", is.RS256(t, claims(func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(time.Hour).Unix() })), "not valid yet"},
		{"a wrong audience is refused", is.RS256(t, claims(func(c jwt.MapClaims) { c["aud"] = "someone-else" })), "audience"},
		{"a wrong issuer is refused", is.RS256(t, claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.example/" })), "issuer"},
		{"a token signed by another key is refused", other.RS256(t, valid), "verification"},
		{"an unknown kid is refused", authtest.Sign(t, jwt.SigningMethodRS256, "nope", valid, is.RSA), "kid"},
		{"HS256 keyed with public material is refused", authtest.Sign(t, jwt.SigningMethodHS256, authtest.RSAKeyID, valid, []byte("secret")), "signing method"},
		{"alg none is refused", authtest.Sign(t, jwt.SigningMethodNone, "", valid, jwt.UnsafeAllowNoneSignatureType), "signing method"},
		{"an RS256 kid used with ES256 is refused", authtest.Sign(t, jwt.SigningMethodES256, authtest.RSAKeyID, valid, is.EC), "kid"},
		{"an actor that is not a UUID is refused", is.RS256(t, claims(func(c jwt.MapClaims) { c["sub"] = "alice" })), "UUID"},
		{"a missing actor is refused", is.RS256(t, claims(func(c jwt.MapClaims) { delete(c, "sub") })), "UUID"},
		{"roles that are not strings are refused", is.RS256(t, claims(func(c jwt.MapClaims) { c["roles"] = []int{1} })), "roles"},
		{"garbage is refused", "not.a.jwt", "malformed"},
		{"a critical header extension is refused", signWithHeader(t, is, "crit", []string{"exp"}), "crit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := v.Verify(tt.token)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if p.Actor != actorA || !p.HasRole(auth.RoleActor) || p.HasRole(auth.RoleDomain) {
					t.Errorf("principal = %+v", p)
				}
				return
			}
			if !errors.Is(err, domain.ErrUnauthenticated) {
				t.Fatalf("Verify = %+v, %v; want ErrUnauthenticated", p, err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not mention %q", err, tt.wantErr)
			}
		})
	}
}

// signWithHeader signs is's valid claims with its RSA key, the header
// carrying name as well.
func signWithHeader(t *testing.T, is *authtest.Issuer, name string, value any) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, is.Claims(actorA, auth.RoleActor))
	tok.Header["kid"] = authtest.RSAKeyID
	tok.Header[name] = value
	s, err := tok.SignedString(is.RSA)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRolesMayBeASpaceSeparatedString(t *testing.T) {
	is := authtest.NewIssuer(t, issuer, audience)
	c := is.Claims(actorA)
	c["roles"] = "actor domain"
	p, err := newVerifier(t, is).Verify(is.ES256(t, c))
	if err != nil || !p.HasRole(auth.RoleActor) || !p.HasRole(auth.RoleDomain) {
		t.Fatalf("Verify = %+v, %v", p, err)
	}
}

func TestTheActorClaimIsConfigurable(t *testing.T) {
	is := authtest.NewIssuer(t, issuer, audience)
	v, err := auth.NewVerifier(auth.Config{JWKSFile: is.WriteJWKS(t), Issuer: issuer, Audience: audience, ActorClaim: "actor_id"})
	if err != nil {
		t.Fatal(err)
	}
	c := is.Claims("not-a-uuid", auth.RoleActor)
	c["actor_id"] = actorB
	p, err := v.Verify(is.RS256(t, c))
	if err != nil || p.Actor != actorB {
		t.Fatalf("Verify = %+v, %v; want actor %s", p, err, actorB)
	}
}

func TestRotatedKeysArePickedUpFromTheFile(t *testing.T) {
	is := authtest.NewIssuer(t, issuer, audience)
	path := is.WriteJWKS(t)
	now := time.Now()
	clock := func() time.Time { return now }
	v, err := auth.NewVerifier(auth.Config{JWKSFile: path, Issuer: issuer, Audience: audience, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	next := authtest.NewIssuer(t, issuer, audience)
	if err := os.WriteFile(path, next.JWKS(t), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, now.Add(time.Minute), now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// The same kid as before with the new key: the old key fails it until
	// the verifier looks at the file again, CheckInterval after the last look.
	tok := next.RS256(t, next.Claims(actorA, auth.RoleActor))
	if _, err := v.Verify(tok); err == nil {
		t.Fatal("the file was re-read before the check interval passed")
	}
	now = now.Add(auth.CheckInterval)
	if _, err := v.Verify(tok); err != nil {
		t.Fatalf("after the reload a token of the new key fails: %v", err)
	}
}

func TestParseJWKSRejectsUnusableKeys(t *testing.T) {
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, doc, wantErr string
	}{
		{"not JSON", `nope`, "not a JWKS"},
		{"no keys", `{"keys":[]}`, "no RS256 or ES256"},
		{"only an encryption key", `{"keys":[{"kty":"RSA","use":"enc","n":"AQAB","e":"AQAB"}]}`, "no RS256 or ES256"},
		{"a symmetric key", `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`, "only RSA and EC"},
		{"an EC key on P-384", `{"keys":[{"kty":"EC","crv":"P-384","x":"AA","y":"AA"}]}`, "only P-256"},
		{"an EC point off the curve", `{"keys":[{"kty":"EC","crv":"P-256","x":"` + strings.Repeat("A", 43) + `","y":"` + strings.Repeat("A", 43) + `"}]}`, "EC point"},
		{"a weak RSA key", `{"keys":[{"kty":"RSA","n":"` + b64(weak.N.Bytes()) + `","e":"AQAB"}]}`, "at least 2048"},
		{"an RSA key for PS256", `{"keys":[{"kty":"RSA","alg":"PS256","n":"AQAB","e":"AQAB"}]}`, "only RS256"},
		{"a kid used twice", `{"keys":[{"kty":"RSA","kid":"a","n":"` + b64(bigN(t)) + `","e":"AQAB"},{"kty":"RSA","kid":"a","n":"` + b64(bigN(t)) + `","e":"AQAB"}]}`, "used twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := auth.ParseJWKS([]byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseJWKS = %v, want an error mentioning %q", err, tt.wantErr)
			}
		})
	}
}

// A JWKS file the hub cannot use at start (a JSON document of no usable key:
// an empty set, only a symmetric key) is an error that names the file, as a
// file that is no JSON is: there are no keys in use yet to keep.
func TestNewVerifierRefusesAnUnusableJWKSFile(t *testing.T) {
	for name, doc := range map[string]string{
		"no keys":         `{"keys":[]}`,
		"an empty object": `{}`,
		"a symmetric key": `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := t.TempDir() + "/jwks.json"
			if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			v, err := auth.NewVerifier(auth.Config{JWKSFile: path, Issuer: issuer, Audience: audience})
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("NewVerifier = %v, %v; want an error naming %s", v, err, path)
			}
		})
	}
}

func TestAuthorize(t *testing.T) {
	is := authtest.NewIssuer(t, issuer, audience)
	a := auth.NewAuthorizer(newVerifier(t, is))
	actorTok := is.RS256(t, is.Claims(actorA, auth.RoleActor))
	domainTok := is.ES256(t, is.Claims(actorB, auth.RoleDomain))
	withToken := func(value string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", value))
	}
	tests := []struct {
		name      string
		ctx       context.Context
		method    string
		req       any
		wantErr   error
		wantRecip string // for Peek/Dequeue: the recipient after Authorize
	}{
		{"health needs no token", context.Background(), "/grpc.health.v1.Health/Check", nil, nil, ""},
		{"reflection needs no token", context.Background(), "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", nil, nil, ""},
		{"a missing token is unauthenticated", context.Background(), messagehubv1.MessageHub_Peek_FullMethodName, &messagehubv1.PeekRequest{}, domain.ErrUnauthenticated, ""},
		{"a non-bearer scheme is unauthenticated", withToken("Basic " + actorTok), messagehubv1.MessageHub_Peek_FullMethodName, &messagehubv1.PeekRequest{}, domain.ErrUnauthenticated, ""},
		{"an empty bearer is unauthenticated", withToken("Bearer "), messagehubv1.MessageHub_Peek_FullMethodName, &messagehubv1.PeekRequest{}, domain.ErrUnauthenticated, ""},
		// Go's TrimSpace drops U+00A0, but grpc-gateway drops a header with
		// it, and then takes a Grpc-Metadata-Authorization token instead:
		// the token checked must be the one the call carries.
		{"a bearer ending in a no-break space is unauthenticated", withToken("Bearer " + actorTok + "\u00a0"), messagehubv1.MessageHub_Peek_FullMethodName, &messagehubv1.PeekRequest{}, domain.ErrUnauthenticated, ""},
		{"a bearer with a control character is unauthenticated", withToken("Bearer " + actorTok[:10] + "\x7f" + actorTok[10:]), messagehubv1.MessageHub_Peek_FullMethodName, &messagehubv1.PeekRequest{}, domain.ErrUnauthenticated, ""},
		{"spaces and tabs around the token are allowed", withToken("Bearer \t" + actorTok + " "), messagehubv1.MessageHub_Peek_FullMethodName, &messagehubv1.PeekRequest{}, nil, actorA},
		{"an actor peeks as itself when it names nobody", withToken("Bearer " + actorTok), messagehubv1.MessageHub_Peek_FullMethodName, &messagehubv1.PeekRequest{}, nil, actorA},
		{"an actor may name itself in any case", withToken("bearer " + actorTok), messagehubv1.MessageHub_Peek_FullMethodName, &messagehubv1.PeekRequest{Recipient: strings.ToUpper(actorA)}, nil, actorA},
		{"an actor may not peek as another", withToken("Bearer " + actorTok), messagehubv1.MessageHub_Peek_FullMethodName, &messagehubv1.PeekRequest{Recipient: actorB}, domain.ErrPermissionDenied, actorB},
		{"an actor dequeues as itself", withToken("Bearer " + actorTok), messagehubv1.MessageHub_Dequeue_FullMethodName, &messagehubv1.DequeueRequest{BundleId: actorB}, nil, actorA},
		{"an actor may not dequeue as another", withToken("Bearer " + actorTok), messagehubv1.MessageHub_Dequeue_FullMethodName, &messagehubv1.DequeueRequest{Recipient: actorB}, domain.ErrPermissionDenied, actorB},
		{"an actor may not save", withToken("Bearer " + actorTok), messagehubv1.MessageHub_Save_FullMethodName, &messagehubv1.SaveRequest{}, domain.ErrPermissionDenied, ""},
		{"a domain may save", withToken("Bearer " + domainTok), messagehubv1.MessageHub_Save_FullMethodName, &messagehubv1.SaveRequest{}, nil, ""},
		{"a domain may not peek", withToken("Bearer " + domainTok), messagehubv1.MessageHub_Peek_FullMethodName, &messagehubv1.PeekRequest{Recipient: actorB}, domain.ErrPermissionDenied, actorB},
		{"an unknown MessageHub method is refused", withToken("Bearer " + domainTok), "/messagehub.v1.MessageHub/Purge", nil, domain.ErrPermissionDenied, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, err := a.Authorize(tt.ctx, tt.method, tt.req)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Authorize = %v, want %v", err, tt.wantErr)
			}
			var got string
			switch r := tt.req.(type) {
			case *messagehubv1.PeekRequest:
				got = r.GetRecipient()
			case *messagehubv1.DequeueRequest:
				got = r.GetRecipient()
			}
			if got != tt.wantRecip {
				t.Errorf("recipient = %q, want %q", got, tt.wantRecip)
			}
			if _, ok := auth.PrincipalFromContext(ctx); ok != (err == nil && strings.HasPrefix(tt.method, "/messagehub.v1.")) {
				t.Errorf("principal in context = %v", ok)
			}
		})
	}
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func bigN(t *testing.T) []byte {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k.N.Bytes()
}
