package auth

import "context"

// LocalSubject names the caller of a call made without authentication
// (--auth none, which only loopback listeners allow): there is no token
// to say who it is.
const LocalSubject = "local"

// Subject names the caller of the call ctx belongs to, for the audit log:
// its token's subject (the actor claim), or LocalSubject.
func Subject(ctx context.Context) string {
	if p, ok := PrincipalFromContext(ctx); ok && p.Actor != "" {
		return p.Actor
	}
	return LocalSubject
}
