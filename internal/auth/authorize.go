package auth

import (
	"context"
	"fmt"
	"slices"
	"strings"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/domain"
)

// openServices are the services whose calls need no token: health and
// reflection (both versions, which clients such as grpcurl use). Every other
// service's calls need a token and a rule in requiredRole, so that a
// service registered on the hub's server later is refused, not open,
// until it is given rules.
var openServices = []string{
	healthpb.Health_ServiceDesc.ServiceName,
	reflectionpb.ServerReflection_ServiceDesc.ServiceName,
	"grpc.reflection.v1alpha.ServerReflection",
}

// open reports whether method (/service/method) belongs to an open service.
func open(method string) bool {
	service, _, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	return ok && slices.Contains(openServices, service)
}

// requiredRole is the role each MessageHub and Admin method needs. A method
// missing here (of any service but the open ones) is refused, so a new RPC
// or service cannot be exposed without a decision.
var requiredRole = map[string]string{
	messagehubv1.MessageHub_Save_FullMethodName:        RoleDomain,
	messagehubv1.MessageHub_Peek_FullMethodName:        RoleActor,
	messagehubv1.MessageHub_Dequeue_FullMethodName:     RoleActor,
	messagehubv1.MessageHub_PeekContent_FullMethodName: RoleActor,
	// Read-only inspection of any recipient.
	adminv1.Admin_GetBacklog_FullMethodName:        RoleAdmin,
	adminv1.Admin_PreviewNextBundle_FullMethodName: RoleAdmin,
	adminv1.Admin_TraceNotification_FullMethodName: RoleAdmin,
	// The backlog over every recipient, from the backlog figures.
	adminv1.Admin_ListRecipients_FullMethodName:    RoleAdmin,
	adminv1.Admin_GetBacklogHistory_FullMethodName: RoleAdmin,
	// The remedies, which change any recipient's queue.
	adminv1.Admin_ReleaseBundle_FullMethodName:       RoleAdmin,
	adminv1.Admin_AcknowledgeOnBehalf_FullMethodName: RoleAdmin,
	// A copy of the hub's data, written on its host.
	adminv1.Admin_Backup_FullMethodName: RoleAdmin,
	// The audit log of any recipient.
	adminv1.Admin_ListAuditEvents_FullMethodName: RoleAdmin,
}

// Authorizer checks the bearer token of every MessageHub call.
type Authorizer struct {
	verifier *Verifier
}

// NewAuthorizer returns an Authorizer that verifies tokens with v.
func NewAuthorizer(v *Verifier) *Authorizer { return &Authorizer{verifier: v} }

// Authorize authenticates the call from its "authorization" metadata and
// checks that the caller may make it. For Peek and Dequeue it makes the
// request act for the caller: an empty recipient becomes the caller's id, and
// naming another recipient is refused before anything is read or changed. It
// returns ctx carrying the Principal. A streaming call is authorized twice:
// when it opens (req is nil), then for its request, with the context the
// first call returned, whose Principal is not verified again.
func (a *Authorizer) Authorize(ctx context.Context, method string, req any) (context.Context, error) {
	if open(method) {
		return ctx, nil
	}
	p, verified := PrincipalFromContext(ctx)
	if !verified {
		token, err := parseBearer(metadata.ValueFromIncomingContext(ctx, "authorization"))
		if err != nil {
			return ctx, err
		}
		if p, err = a.verifier.Verify(token); err != nil {
			return ctx, err
		}
	}
	role, ok := requiredRole[method]
	if !ok {
		return ctx, refused(p, fmt.Errorf("%w: %s is not open to callers", domain.ErrPermissionDenied, method))
	}
	if !p.HasRole(role) {
		return ctx, refused(p, fmt.Errorf("%w: %s needs the %q role", domain.ErrPermissionDenied, method, role))
	}
	var err error
	switch r := req.(type) {
	case *messagehubv1.PeekRequest:
		err = actAs(p, &r.Recipient)
	case *messagehubv1.DequeueRequest:
		err = actAs(p, &r.Recipient)
	}
	if err != nil {
		return ctx, refused(p, err)
	}
	return context.WithValue(ctx, principalKey{}, p), nil
}

// Refusal is the refusal of a verified caller: it names the token's
// subject, for the log line of the refusal (Subject), not the client.
type Refusal struct {
	error
	subject string
}

// Subject is the refused token's subject (its actor claim).
func (r *Refusal) Subject() string { return r.subject }

func (r *Refusal) Unwrap() error { return r.error }

func refused(p Principal, err error) error { return &Refusal{error: err, subject: p.Actor} }

// actAs makes a request of p act for p: an empty recipient becomes p's id,
// and p's id named in any letter case is accepted; another recipient is
// refused and left as it was.
func actAs(p Principal, recipient *string) error {
	if *recipient != "" && !strings.EqualFold(*recipient, p.Actor) {
		return fmt.Errorf("%w: an actor may only peek and dequeue its own bundles", domain.ErrPermissionDenied)
	}
	*recipient = p.Actor
	return nil
}

// Admit checks the Authorization header of an HTTP request for a call of
// method as Authorize checks a call's metadata before its request is read:
// who the caller is and whether its role may call method, not what its
// request names. The gateway asks it before reading a request's body, so
// that only a caller that may make the call has its body read (an actor's
// token, say, never has a Save's); the gRPC server checks the call again.
func (a *Authorizer) Admit(method string, authorization []string) error {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{"authorization": authorization})
	_, err := a.Authorize(ctx, method, nil)
	return err
}

// parseBearer returns the token of one "Bearer <token>" value.
func parseBearer(values []string) (string, error) {
	if len(values) == 0 {
		return "", fmt.Errorf("%w: missing bearer token (authorization metadata)", domain.ErrUnauthenticated)
	}
	if len(values) > 1 {
		return "", fmt.Errorf("%w: more than one authorization value", domain.ErrUnauthenticated)
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	// Only HTTP's own spaces and tabs are trimmed: strings.TrimSpace would
	// also drop Unicode spaces such as U+00A0, which make grpc-gateway drop
	// the whole header, so the token checked here would not be the call's.
	token = strings.Trim(token, " \t")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || !visibleASCII(token) {
		return "", fmt.Errorf("%w: authorization must be \"Bearer <token>\"", domain.ErrUnauthenticated)
	}
	return token, nil
}

// visibleASCII reports whether s is printable ASCII without spaces, as
// every token a JWKS-signed JWT can be (base64url parts and dots).
func visibleASCII(s string) bool {
	for i := range len(s) {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
