package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/metadata"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/auth"
	"github.com/energydatahub/messagehub/internal/auth/authtest"
	"github.com/energydatahub/messagehub/internal/gateway"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/test/hubtest"
)

// realHub serves the real gateway in front of the real gRPC server over the
// embedded store on loopback, and returns its URL and a gRPC client of the
// same server (to save notifications as a domain does).
func realHub(t *testing.T) (string, messagehubv1.MessageHubClient) {
	t.Helper()
	return realHubWith(t, nil, nil)
}

// realHubWith is realHub with the hub's options and the gateway's.
func realHubWith(t *testing.T, serverOpts []server.Option, gatewayOpts []gateway.Option) (string, messagehubv1.MessageHubClient) {
	t.Helper()
	srv, hs := server.NewGRPCServer(hubtest.Open(t), slog.New(slog.DiscardHandler), serverOpts...)
	server.SetServing(hs, true)
	url, conn := hubtest.Gateway(t, hubtest.Serve(t, srv), gatewayOpts...)
	return url, messagehubv1.NewMessageHubClient(conn)
}

// cutDocuments drops the connection, as a network does, in the middle of
// the body of the first `cuts` content peeks: their answers end after a few
// bytes of the document.
type cutDocuments struct {
	cuts atomic.Int32
	next http.RoundTripper
}

func (c *cutDocuments) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err != nil || req.URL.Path != "/v1/peek/content" || resp.StatusCode != http.StatusOK || c.cuts.Add(-1) < 0 {
		return resp, err
	}
	resp.Body = &cutBody{ReadCloser: resp.Body, left: 10}
	return resp, nil
}

type cutBody struct {
	io.ReadCloser
	left int
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := b.ReadCloser.Read(p[:min(len(p), b.left)])
	b.left -= n
	return n, err
}

// saveOne saves one notification for a new recipient and returns the
// recipient.
func saveOne(t *testing.T, hubClient messagehubv1.MessageHubClient) string {
	t.Helper()
	recipient := uuid.NewString()
	_, err := hubClient.Save(t.Context(), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{{
		Id: uuid.NewString(), Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_TIME_SERIES,
		ContentType: "TimeSeries", SupportsBundling: true, Weight: 1,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return recipient
}

// A document whose answer is cut short is fetched again (every content
// peek of the pending bundle answers the same bytes), and only the whole
// document is stored before the dequeue.
func TestADocumentCutShortIsFetchedAgain(t *testing.T) {
	url, hubClient := realHub(t)
	recipient := saveOne(t, hubClient)
	cutter := &cutDocuments{next: http.DefaultTransport}
	cutter.cuts.Store(1)
	out := t.TempDir()
	a := &actor{hub: url, recipient: recipient, out: out, web: &http.Client{Transport: cutter, Timeout: 30 * time.Second}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if bundles, notifications, err := a.run(ctx, 10, 50*time.Millisecond); err != nil || bundles != 1 || notifications != 1 {
		t.Fatalf("%d bundles, %d notifications, %v; want 1, 1, no error", bundles, notifications, err)
	}
	files, err := os.ReadDir(out)
	if err != nil || len(files) != 1 {
		t.Fatalf("out folder: %v, %v; want the one document", files, err)
	}
	data, err := os.ReadFile(filepath.Join(out, files[0].Name()))
	var doc bundle
	if err != nil || json.Unmarshal(data, &doc) != nil || doc.ID+".json" != files[0].Name() {
		t.Fatalf("stored document %s: %q, %v; want the whole bundle document", files[0].Name(), data, err)
	}
}

// When every answer is cut short the actor stops with the error, and the
// out folder holds no part of the document under the bundle's name (where
// it would pass for the whole document); the bundle stays pending.
func TestADocumentNeverReadWholeLeavesNothingStored(t *testing.T) {
	url, hubClient := realHub(t)
	recipient := saveOne(t, hubClient)
	cutter := &cutDocuments{next: http.DefaultTransport}
	cutter.cuts.Store(attempts)
	out := t.TempDir()
	a := &actor{hub: url, recipient: recipient, out: out, web: &http.Client{Transport: cutter, Timeout: 30 * time.Second}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if bundles, _, err := a.run(ctx, 10, 50*time.Millisecond); err == nil || bundles != 0 {
		t.Fatalf("%d bundles, %v; want none and the error", bundles, err)
	}
	if files, err := os.ReadDir(out); err != nil || len(files) != 0 {
		names := make([]string, 0, len(files))
		for _, f := range files {
			names = append(names, f.Name())
		}
		t.Fatalf("out folder holds %q (%v) after no document was read whole; want nothing", names, err)
	}
	resp, err := http.Get(url + "/v1/peek?recipient=" + recipient)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("peek after the failed fetch: %s; want the bundle still pending", resp.Status)
	}
}

// renewToken writes a renewed token into the actor's token file, and moves
// the hub's clock past the end of the first token, once the first peek
// has answered a bundle: as a projected token is renewed in place while
// the actor runs.
type renewToken struct {
	once  atomic.Bool
	renew func()
	next  http.RoundTripper
}

func (r *renewToken) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil && req.URL.Path == "/v1/peek" && resp.StatusCode == http.StatusOK && r.once.CompareAndSwap(false, true) {
		r.renew()
	}
	return resp, err
}

// A token renewed in place in the token file is used from the next call
// on: the actor does not keep calling with the token it read at the start
// once that has expired.
func TestATokenRenewedInItsFileIsUsed(t *testing.T) {
	issuer := authtest.NewIssuer(t, "https://issuer.test", "messagehub")
	start := time.Now()
	authorizer, setClock := hubtest.Authorizer(t, issuer, start)
	url, hubClient := realHubWith(t, []server.Option{server.WithAuthorizer(authorizer)},
		[]gateway.Option{gateway.WithAuthentication(auth.LogRefusals(slog.New(slog.DiscardHandler), nil, authorizer.Admit))})

	// The domain saves one notification for the actor, with its own token.
	recipient := uuid.NewString()
	domainCtx := metadata.AppendToOutgoingContext(t.Context(), "authorization",
		"Bearer "+issuer.RS256(t, issuer.Claims(uuid.NewString(), auth.RoleDomain)))
	if _, err := hubClient.Save(domainCtx, &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{{
		Id: uuid.NewString(), Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_TIME_SERIES,
		ContentType: "TimeSeries", SupportsBundling: true, Weight: 1,
	}}}); err != nil {
		t.Fatal(err)
	}

	// The actor's first token ends in an hour; the renewed one in three.
	tokenFile := filepath.Join(t.TempDir(), "actor.jwt")
	if err := os.WriteFile(tokenFile, []byte(issuer.RS256(t, issuer.Claims(recipient, auth.RoleActor))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	renewed := issuer.Claims(recipient, auth.RoleActor)
	renewed["exp"] = start.Add(3 * time.Hour).Unix()
	a, err := newActor(url, "", tokenFile, t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	a.web.Transport = &renewToken{next: http.DefaultTransport, renew: func() {
		if err := os.WriteFile(tokenFile, []byte(issuer.RS256(t, renewed)), 0o600); err != nil {
			t.Error(err)
		}
		setClock(start.Add(2 * time.Hour)) // the first token has expired
	}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if bundles, notifications, err := a.run(ctx, 10, 50*time.Millisecond); err != nil || bundles != 1 || notifications != 1 {
		t.Fatalf("%d bundles, %d notifications, %v; want 1, 1, no error", bundles, notifications, err)
	}
}
