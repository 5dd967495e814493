package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/energydatahub/messagehub/internal/admin"
	"github.com/energydatahub/messagehub/internal/auth"
	"github.com/energydatahub/messagehub/internal/auth/authtest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/internal/store/pebble"
	"github.com/energydatahub/messagehub/test/hubtest"
)

// renewAfterFirstCall is the real hub whose first AcknowledgeOnBehalf,
// once answered, has renew called: the operator's token is renewed in its
// file, and the first one expires, while the command goes on calling.
type renewAfterFirstCall struct {
	*hub.Hub
	once  atomic.Bool
	renew func()
}

func (r *renewAfterFirstCall) AcknowledgeOnBehalf(ctx context.Context, recipient string, origin domain.Origin, contentType, upTo string) (hub.Acknowledged, error) {
	done, err := r.Hub.AcknowledgeOnBehalf(ctx, recipient, origin, contentType, upTo)
	if r.once.CompareAndSwap(false, true) {
		r.renew()
	}
	return done, err
}

// "messagehub admin acknowledge" makes as many calls as the backlog needs,
// for as long as that takes: each sends the token --token-file holds when
// it is made, so a token renewed in place is used once the first has
// expired, as the Go client's TokenFile does.
func TestTheAdminAcknowledgeCommandSendsTheTokenRenewedInItsFile(t *testing.T) {
	issuer := authtest.NewIssuer(t, "https://issuer.test", "messagehub")
	start := time.Now()
	var now atomic.Pointer[time.Time]
	now.Store(&start)
	verifier, err := auth.NewVerifier(auth.Config{
		JWKSFile: issuer.WriteJWKS(t), Issuer: issuer.Issuer, Audience: issuer.Audience,
		Now: func() time.Time { return *now.Load() }, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	store, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// One bundle a call: three notifications that do not support bundling
	// take three calls.
	h := hub.New(store, hub.Options{MaxAcknowledgeBundles: 1}, nil)
	t.Cleanup(func() { h.Close(); _ = store.Close() })
	recipient := uuid.NewString()
	notes := make([]domain.Notification, 3)
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
	renewing := &renewAfterFirstCall{Hub: h, renew: func() {
		if err := os.WriteFile(tokenFile, []byte(issuer.RS256(t, renewed)), 0o600); err != nil {
			t.Error(err)
		}
		later := start.Add(2 * time.Hour) // the first token has expired
		now.Store(&later)
	}}
	srv, _ := server.NewGRPCServer(h, slog.New(slog.DiscardHandler), server.WithAuthorizer(auth.NewAuthorizer(verifier)))
	admin.Register(srv, renewing)
	addr := hubtest.Serve(t, srv)

	var out bytes.Buffer
	err = runAdmin(t.Context(), []string{"acknowledge", "--addr", addr, "--token-file", tokenFile, "--recipient", recipient,
		"--domain", "charges", "--content-type", "Charges", "--up-to", notes[2].ID, "--reason", "ticket 4802"}, &out, &out)
	if err != nil {
		t.Fatalf("acknowledge across the token's renewal: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "call 3: dequeued 1 notifications") || !strings.Contains(out.String(), "dequeued 3 notifications of recipient") {
		t.Fatalf("acknowledge said\n%s\nwant three calls of a bundle each", out.String())
	}
}
