package auth_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/auth"
	"github.com/energydatahub/messagehub/internal/auth/authtest"
	"github.com/energydatahub/messagehub/internal/domain"
)

func TestRefusedHTTPCredentialsAreLoggedAtInfoButNotFlooded(t *testing.T) {
	const save = "/messagehub.v1.MessageHub/Save"
	var logs bytes.Buffer
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	check := auth.LogRefusals(slog.New(slog.NewJSONHandler(&logs, nil)), func() time.Time { return clock },
		func(_ string, v []string) error {
			if len(v) == 0 {
				return errors.New("missing bearer token")
			}
			return nil
		})
	for range 100 { // within one second of the clock
		if check(save, nil, "192.0.2.7:41000") == nil {
			t.Fatal("a missing token passed")
		}
	}
	if err := check(save, []string{"Bearer good"}, "192.0.2.7:41000"); err != nil {
		t.Fatalf("a good token: %v", err)
	}
	if n := strings.Count(logs.String(), "refused for its credentials"); n != auth.RefusalsPerSecond {
		t.Fatalf("%d info lines for 100 refusals within a second, want %d:\n%s", n, auth.RefusalsPerSecond, logs.String())
	}
	clock = clock.Add(time.Second)
	logs.Reset()
	_ = check(save, nil, "192.0.2.7:41000")
	if !strings.Contains(logs.String(), `"suppressed_since_last":90`) || !strings.Contains(logs.String(), `"level":"INFO"`) {
		t.Fatalf("the next second's line does not count the 90 held back at info: %s", logs.String())
	}
	if !strings.Contains(logs.String(), `"client":"192.0.2.7:41000"`) || !strings.Contains(logs.String(), `"method":"`+save+`"`) {
		t.Fatalf("the line does not name the client and the call: %s", logs.String())
	}
}

// An HTTP request is admitted for a call only with a token whose role may
// make it; a token without the role is refused as the gRPC server refuses
// its call (PERMISSION_DENIED), and its line names the token's subject.
func TestAnHTTPRequestIsAdmittedOnlyForACallItsRoleMayMake(t *testing.T) {
	is := authtest.NewIssuer(t, issuer, audience)
	var logs bytes.Buffer
	admit := auth.LogRefusals(slog.New(slog.NewJSONHandler(&logs, nil)), nil, auth.NewAuthorizer(newVerifier(t, is)).Admit)
	bearer := func(role string) []string { return []string{"Bearer " + is.ES256(t, is.Claims(actorA, role))} }
	for _, tc := range []struct {
		name          string
		method        string
		authorization []string
		want          error
	}{
		{"a domain's Save", messagehubv1.MessageHub_Save_FullMethodName, bearer(auth.RoleDomain), nil},
		{"an actor's Peek", messagehubv1.MessageHub_Peek_FullMethodName, bearer(auth.RoleActor), nil},
		{"an actor's Save", messagehubv1.MessageHub_Save_FullMethodName, bearer(auth.RoleActor), domain.ErrPermissionDenied},
		{"a domain's backup", adminv1.Admin_Backup_FullMethodName, bearer(auth.RoleDomain), domain.ErrPermissionDenied},
		{"a Save without a token", messagehubv1.MessageHub_Save_FullMethodName, nil, domain.ErrUnauthenticated},
	} {
		err := admit(tc.method, tc.authorization, "192.0.2.7:41000")
		if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if !strings.Contains(logs.String(), `"subject":"`+actorA+`"`) {
		t.Errorf("the refusal of a verified token does not name its subject: %s", logs.String())
	}
}
