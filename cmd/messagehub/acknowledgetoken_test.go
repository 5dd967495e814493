package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	adminv1 "github.com/energydatahub/messagehub/gen/messagehub/admin/v1"
	"github.com/energydatahub/messagehub/internal/admin"
	"github.com/energydatahub/messagehub/internal/auth"
	"github.com/energydatahub/messagehub/internal/auth/authtest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/test/hubtest"
)

// renewedAfterFirstCall is the Admin service whose first
// AcknowledgeOnBehalf, once done, calls renew before it answers: the
// operator's token is renewed in its file, and the first one expires,
// while the command goes on calling.
type renewedAfterFirstCall struct {
	*admin.Service
	first sync.Once
	renew func()
}

func (s *renewedAfterFirstCall) AcknowledgeOnBehalf(ctx context.Context, req *adminv1.AcknowledgeOnBehalfRequest) (*adminv1.AcknowledgeOnBehalfResponse, error) {
	defer s.first.Do(s.renew)
	return s.Service.AcknowledgeOnBehalf(ctx, req)
}

// "messagehub admin acknowledge" makes as many calls as the backlog needs,
// for as long as that takes: each sends the token --token-file holds when
// it is made, so a token renewed in place is used once the first has
// expired, as the Go client's TokenFile does.
func TestTheAdminAcknowledgeCommandSendsTheTokenRenewedInItsFile(t *testing.T) {
	issuer := authtest.NewIssuer(t, "https://issuer.test", "messagehub")
	start := time.Now()
	authorizer, setClock := hubtest.Authorizer(t, issuer, start)
	// A call dequeues at most 100 bundles: 101 notifications that do not
	// support bundling (a bundle each) take two calls.
	h := hubtest.Open(t)
	recipient := uuid.NewString()
	notes := make([]domain.Notification, 101)
	for i := range notes {
		notes[i] = domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: domain.OriginCharges,
			ContentType: "Charges", DocumentType: "ChargesDoc", Weight: 1}
	}
	if _, err := h.Save(t.Context(), notes); err != nil {
		t.Fatal(err)
	}

	// The operator's first token ends in an hour; the renewed one in three.
	tokenFile := filepath.Join(t.TempDir(), "admin.jwt")
	if err := os.WriteFile(tokenFile, []byte(issuer.RS256(t, issuer.Claims(uuid.NewString(), auth.RoleAdmin))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	renewed := issuer.Claims(uuid.NewString(), auth.RoleAdmin)
	renewed["exp"] = start.Add(3 * time.Hour).Unix()
	renewing := &renewedAfterFirstCall{Service: admin.NewService(h), renew: func() {
		if err := os.WriteFile(tokenFile, []byte(issuer.RS256(t, renewed)), 0o600); err != nil {
			t.Error(err)
		}
		setClock(start.Add(2 * time.Hour)) // the first token has expired
	}}
	srv, _ := server.NewGRPCServer(h, slog.New(slog.DiscardHandler), server.WithAuthorizer(authorizer))
	server.RegisterService(srv, &adminv1.Admin_ServiceDesc, renewing)
	addr := hubtest.Serve(t, srv)

	var out bytes.Buffer
	err := runAdmin(t.Context(), []string{"acknowledge", "--addr", addr, "--token-file", tokenFile, "--recipient", recipient,
		"--domain", "charges", "--content-type", "Charges", "--up-to", notes[len(notes)-1].ID, "--reason", "ticket 4802"}, &out, &out)
	if err != nil {
		t.Fatalf("acknowledge across the token's renewal: %v\n%s", err, out.String())
	}
	if !bytes.Contains(out.Bytes(), []byte("call 2: dequeued 1 notifications")) || !bytes.Contains(out.Bytes(), []byte("dequeued 101 notifications of recipient")) {
		t.Fatalf("acknowledge said\n%s\nwant two calls", out.String())
	}
}

// A token file that holds no token (a secret not populated yet) is said as
// such, before any call, as the Go client's TokenFile says it: not sent as
// "Bearer " for the hub to answer UNAUTHENTICATED about a malformed header.
func TestTheAdminCommandSaysAnEmptyTokenFile(t *testing.T) {
	issuer := authtest.NewIssuer(t, "https://issuer.test", "messagehub")
	authorizer, _ := hubtest.Authorizer(t, issuer, time.Now())
	h := hubtest.Open(t)
	srv, _ := server.NewGRPCServer(h, slog.New(slog.DiscardHandler), server.WithAuthorizer(authorizer))
	server.RegisterService(srv, &adminv1.Admin_ServiceDesc, admin.NewService(h))
	addr := hubtest.Serve(t, srv)

	tokenFile := filepath.Join(t.TempDir(), "admin.jwt")
	if err := os.WriteFile(tokenFile, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := runAdmin(t.Context(), []string{"backlog", "--addr", addr, "--token-file", tokenFile, "--recipient", uuid.NewString()}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), tokenFile+" is empty") {
		t.Fatalf("an empty token file: %v; want it said to be empty", err)
	}
}
