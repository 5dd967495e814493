package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/app"
)

// runningHub runs the hub (embedded store) on loopback ports until the
// test ends, and returns a context for the test's calls, the hub and a gRPC
// connection to it.
func runningHub(t *testing.T) (context.Context, *app.App, *grpc.ClientConn) {
	t.Helper()
	cfg, err := app.ParseConfig([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--min-free-disk", "0"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	a, err := app.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- a.Run(runCtx) }()
	t.Cleanup(func() {
		stopRun()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
		_ = a.Close()
	})
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return ctx, a, conn
}

// "messagehub admin" answers an operator's three questions about a
// recipient from a running hub, and changes nothing the actor sees.
func TestTheAdminCommandInspectsARunningHub(t *testing.T) {
	ctx, a, conn := runningHub(t)
	hub := messagehubv1.NewMessageHubClient(conn)
	recipient, id := uuid.NewString(), uuid.NewString()
	if _, err := hub.Save(ctx, &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{{
		Id: id, Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_TIME_SERIES,
		ContentType: "TimeSeries", DocumentType: "TimeSeriesDoc", SupportsBundling: true, Weight: 1,
	}}}); err != nil {
		t.Fatal(err)
	}

	admin := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := runAdmin(ctx, append(args, "--addr", a.GRPCAddr(), "--recipient", recipient), &out, &errOut); err != nil {
			t.Fatalf("admin %v: %v\n%s", args, err, errOut.String())
		}
		return out.String()
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"backlog"}, []string{`"contentType": "TimeSeries"`, `"waiting": "1"`}},
		{[]string{"next"}, []string{id, `"pending": false`}},
		{[]string{"trace", "--id", id}, []string{"NOTIFICATION_STATE_WAITING"}},
	} {
		// protojson varies its spacing on purpose: compare words.
		got := strings.Join(strings.Fields(admin(tc.args...)), " ")
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("admin %v: %s\nlacks %s", tc.args, got, w)
			}
		}
	}
	// The preview created nothing: the actor's own Peek with its own bundle
	// id gets the notification under that id.
	bundleID := uuid.NewString()
	resp, err := hub.Peek(ctx, &messagehubv1.PeekRequest{Recipient: recipient, BundleId: bundleID})
	if err != nil || resp.GetBundle().GetId() != bundleID {
		t.Fatalf("the actor's Peek after the admin calls: %v, %v", resp.GetBundle(), err)
	}
	var errOut bytes.Buffer
	if err := runAdmin(ctx, []string{"trace", "--addr", a.GRPCAddr(), "--recipient", recipient}, io.Discard, &errOut); err == nil {
		t.Fatal("trace without --id: no error")
	}
	if err := runAdmin(ctx, []string{"recipients", "--addr", a.GRPCAddr(), "--order", "newest"}, io.Discard, &errOut); err == nil {
		t.Fatal("recipients --order newest: no error")
	}
	// The recipient is listed once the figures are recounted (at start and
	// every 15 s on the embedded store), by either order, without --recipient.
	for _, order := range []string{"oldest", "size"} {
		for {
			var out bytes.Buffer
			if err := runAdmin(ctx, []string{"recipients", "--addr", a.GRPCAddr(), "--order", order}, &out, &errOut); err != nil {
				t.Fatalf("admin recipients --order %s: %v\n%s", order, err, errOut.String())
			}
			if strings.Contains(out.String(), recipient) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("admin recipients --order %s never listed %s: %s", order, recipient, out.String())
			case <-time.After(time.Second):
			}
		}
	}
	var history bytes.Buffer
	if err := runAdmin(ctx, []string{"history", "--addr", a.GRPCAddr(), "--minutes", "60"}, &history, &errOut); err != nil ||
		!strings.Contains(history.String(), "DOMAIN_TIME_SERIES") {
		t.Fatalf("admin history: %v\n%s%s", err, history.String(), errOut.String())
	}

	// The audit log shows the three looks and the actor's Peek, one line
	// each, by "local" (no authentication), once the buffer is flushed.
	var lines []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		lines = strings.Split(strings.TrimSpace(admin("audit", "--since", "1h")), "\n")
		if len(lines) >= 4 {
			break
		}
	}
	text := strings.Join(lines, "\n")
	t.Logf("admin audit:\n%s", text)
	if len(lines) != 4 || strings.Count(text, "INSPECT ") != 3 || !strings.Contains(text, "PEEK ") ||
		!strings.Contains(text, bundleID) || strings.Count(text, " local ") != 4 || !strings.Contains(text, `"backlog"`) {
		t.Fatalf("admin audit:\n%s\nwant three INSPECT lines and the PEEK of %s, by local", text, bundleID)
	}
}

// "admin audit" takes --since or --from/--to, as times it can read.
func TestTheAdminAuditFlags(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	req, err := auditRequest("r", 2*time.Hour, "", "", now)
	if err != nil || req.GetFromMs() != now.Add(-2*time.Hour).UnixMilli() || req.GetToMs() != 0 {
		t.Fatalf("--since 2h: %v %v", req, err)
	}
	req, err = auditRequest("r", 0, "2026-11-26T08:00:00Z", "2026-11-26T09:30:00+01:00", now)
	if err != nil || req.GetFromMs() != now.Add(-4*time.Hour).UnixMilli() || req.GetToMs() != now.Add(-3*time.Hour-30*time.Minute).UnixMilli() {
		t.Fatalf("--from/--to: %v %v", req, err)
	}
	for _, bad := range []struct {
		since    time.Duration
		from, to string
	}{{time.Hour, "2026-11-26T08:00:00Z", ""}, {-time.Hour, "", ""}, {0, "yesterday", ""}, {0, "", "12:00"}} {
		if _, err := auditRequest("r", bad.since, bad.from, bad.to, now); err == nil {
			t.Errorf("--since %s --from %q --to %q accepted", bad.since, bad.from, bad.to)
		}
	}
}

// "messagehub admin backup --to DIR" writes a copy of a running hub's
// embedded store and prints where.
func TestTheAdminCommandBacksUpARunningHub(t *testing.T) {
	ctx, a, _ := runningHub(t)
	var out, errOut bytes.Buffer
	if err := runAdmin(ctx, []string{"backup", "--addr", a.GRPCAddr()}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "--to") {
		t.Fatalf("backup without --to: %v", err)
	}
	want := filepath.Join(t.TempDir(), "copy")
	if err := runAdmin(ctx, []string{"backup", "--addr", a.GRPCAddr(), "--to", want}, &out, &errOut); err != nil {
		t.Fatalf("backup: %v\n%s", err, errOut.String())
	}
	if got := strings.Join(strings.Fields(out.String()), " "); !strings.Contains(got, `"directory": "`+want+`"`) {
		t.Fatalf("backup printed %s; want the directory %s", got, want)
	}
	if manifests, _ := filepath.Glob(filepath.Join(want, "MANIFEST-*")); len(manifests) == 0 {
		t.Fatalf("the backup in %s holds no store", want)
	}
}

// An operator's admin token goes in plaintext only to a hub on this
// machine: to any other address, without --tls, the command refuses before
// it connects, so that whoever answers there in plaintext (a listener on the
// path, a spoofed name) never reads the token. A hub on loopback still gets
// it without TLS (make dev-tokens).
func TestTheAdminCommandSendsNoTokenInPlaintextOffLoopback(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "admin.jwt")
	if err := os.WriteFile(tokenFile, []byte("the-admin-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A plaintext gRPC server on every interface that keeps the tokens it
	// is sent, addressed by one of this machine's addresses off loopback
	// (by a name that never resolves on a machine without one).
	lis, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var tokens []string
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		mu.Lock()
		defer mu.Unlock()
		tokens = append(tokens, metadata.ValueFromIncomingContext(stream.Context(), "authorization")...)
		return status.Error(codes.Unimplemented, "not a hub")
	}))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	port := strconv.Itoa(lis.Addr().(*net.TCPAddr).Port)
	remote := net.JoinHostPort("hub.invalid", port)
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && !ip.IP.IsLoopback() {
				remote = net.JoinHostPort(ip.IP.String(), port)
				break
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = runAdmin(ctx, []string{"recipients", "--addr", remote, "--token-file", tokenFile}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--tls") {
		t.Errorf("a token to %s without --tls: %v; want a refusal naming --tls", remote, err)
	}
	mu.Lock()
	if len(tokens) > 0 {
		t.Errorf("the token went in plaintext to %s: %q", remote, tokens)
	}
	mu.Unlock()

	ctx, a, _ := runningHub(t)
	if err := runAdmin(ctx, []string{"recipients", "--addr", a.GRPCAddr(), "--token-file", tokenFile}, io.Discard, io.Discard); err != nil {
		t.Errorf("a token to the hub on loopback: %v", err)
	}
}

// A backup waits an hour by default, the other calls 30 s: a full copy of a
// large store takes minutes, and one given up is not kept.
func TestABackupWaitsLongerThanTheOtherCallsByDefault(t *testing.T) {
	for call, want := range map[string]string{"backup": "(default 1h0m0s)", "recipients": "(default 30s)"} {
		var errOut bytes.Buffer
		if err := runAdmin(context.Background(), []string{call, "-h"}, io.Discard, &errOut); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s -h: %v", call, err)
		}
		_, timeout, _ := strings.Cut(errOut.String(), "-timeout duration")
		if line, _, _ := strings.Cut(timeout, "\n  -"); !strings.Contains(line, want) {
			t.Errorf("%s's --timeout: %q, want %s", call, strings.TrimSpace(line), want)
		}
	}
}

// A backup that outlasts --timeout is given up, and the hub keeps nothing
// of it: the command says so and how to take one, rather than a bare
// "context deadline exceeded".
func TestABackupPastTheTimeoutSaysToGiveALongerOne(t *testing.T) {
	ctx, a, _ := runningHub(t)
	var out, errOut bytes.Buffer
	want := filepath.Join(t.TempDir(), "copy")
	err := runAdmin(ctx, []string{"backup", "--addr", a.GRPCAddr(), "--to", want, "--timeout", "1ns"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "--timeout") || !strings.Contains(err.Error(), "not kept") {
		t.Fatalf("a backup past --timeout: %v; want it to say it was not kept, and to give a longer --timeout", err)
	}
	if _, err := os.Stat(want); !os.IsNotExist(err) {
		t.Fatalf("a backup past --timeout left %s (%v)", want, err)
	}
}

// Asking for help is no mistake: it exits 0, as "messagehub --help" does;
// "messagehub admin" alone or with an unknown flag is, and exits 2.
func TestTheAdminCommandExitsZeroWhenAskedForHelp(t *testing.T) {
	for _, c := range []struct {
		args  []string
		code  int
		usage string
	}{
		{[]string{"--help"}, 0, "usage: messagehub admin"},
		{[]string{"-h"}, 0, "usage: messagehub admin"},
		{[]string{"-help"}, 0, "usage: messagehub admin"},
		{[]string{"backlog", "--help"}, 0, "-recipient"},
		{[]string{"audit", "-h"}, 0, "-since"},
		{nil, 2, "usage: messagehub admin"},
		{[]string{"--verbose"}, 2, "usage: messagehub admin"},
	} {
		var out, errOut strings.Builder
		if code := adminMain(context.Background(), c.args, &out, &errOut); code != c.code {
			t.Errorf("messagehub admin %q: exit %d, want %d", c.args, code, c.code)
		}
		if !strings.Contains(errOut.String(), c.usage) {
			t.Errorf("messagehub admin %q printed %.80q…, want the usage (%q)", c.args, errOut.String(), c.usage)
		}
	}
}

// A mistake in the command line (an unknown call or flag, a flag a call
// needs missing, a value out of range or that does not parse) exits 2, as
// "messagehub --bogus" does, says so once, naming the call or flag, and
// sends nothing to the hub: the address is one nothing listens on, where a
// call would fail as a call does, with exit 1.
func TestTheAdminCommandExitsTwoOnAMistakeInTheCommandLine(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "admin.jwt")
	if err := os.WriteFile(tokenFile, []byte("the-admin-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := uuid.NewString()
	ack := []string{"acknowledge", "--recipient", r, "--domain", "TIME_SERIES", "--content-type", "C", "--up-to", uuid.NewString()}
	for _, c := range []struct {
		args []string
		code int
		said string // exactly once on stderr
	}{
		{[]string{"backlog", "--verbose"}, 2, "flag provided but not defined: -verbose"},
		{[]string{"backlog", "--recipient", r, "--timeout", "x"}, 2, `invalid value "x" for flag -timeout`},
		{[]string{"history", "--minutes", "x"}, 2, `invalid value "x" for flag -minutes`},
		{[]string{"recipients", "--page-size", "x"}, 2, `invalid value "x" for flag -page-size`},
		{[]string{"audit", "--recipient", r, "--since", "x"}, 2, `invalid value "x" for flag -since`},
		{[]string{"nosuch"}, 2, `unknown admin call "nosuch"`},
		{[]string{"nosuch", "--recipient", r}, 2, `unknown admin call "nosuch"`},
		{[]string{"nosuch", "--verbose"}, 2, `unknown admin call "nosuch"`},
		{[]string{"backlog"}, 2, "--recipient is required"},
		{[]string{"backlog", "--recipient", r, "--timeout", "0s"}, 2, "--timeout 0s"},
		{[]string{"backup", "--to", "copy", "--timeout", "-1s"}, 2, "--timeout -1s"},
		{[]string{"backlog", "extra", "--recipient", r}, 2, `unexpected argument "extra"`},
		{[]string{"trace", "--recipient", r}, 2, "trace needs --id"},
		{[]string{"release", "--recipient", r, "--bundle", uuid.NewString()}, 2, "release needs --bundle and --reason"},
		{[]string{"next", "--recipient", r, "--group", "PEEK_GROUP_NONE"}, 2, `--group "PEEK_GROUP_NONE"`},
		{[]string{"recipients", "--order", "newest"}, 2, `--order "newest"`},
		{[]string{"recipients", "--page-size", "5000"}, 2, "--page-size 5000"},
		{[]string{"history", "--minutes", "2000"}, 2, "--minutes 2000"},
		{[]string{"backup"}, 2, "backup needs --to"},
		{[]string{"audit", "--recipient", r, "--since", "1h", "--from", "2026-11-26T08:00:00Z"}, 2, "not both"},
		{[]string{"audit", "--recipient", r, "--from", "yesterday"}, 2, `--from "yesterday"`},
		{[]string{"audit", "--recipient", r, "--from", "2026-11-26T09:00:00Z", "--to", "2026-11-26T08:00:00Z"}, 2, "--to 2026-11-26T08:00:00Z is before --from"},
		{[]string{"audit", "--recipient", r, "--from", "1969-12-31T23:00:00Z"}, 2, `--from "1969-12-31T23:00:00Z" is before 1970`},
		{[]string{"audit", "--recipient", r, "--since", "500000h"}, 2, "--since 500000h0m0s reaches before 1970"},
		{[]string{"audit", "--recipient", r, "--to", "1970-01-01T00:00:00Z"}, 2, `--to "1970-01-01T00:00:00Z" is not after 1970`},
		{append(ack[:len(ack):len(ack)], "--domain", "NOPE", "--reason", "why"), 2, "acknowledge needs --domain"},
		{ack, 2, "acknowledge needs --domain"},
		{append(ack[:len(ack):len(ack)], "--reason", " \t"), 2, "--reason: reason is required"},
		{[]string{"release", "--recipient", r, "--bundle", uuid.NewString(), "--reason", "\x1b"}, 2, "--reason: reason is required"},
		{[]string{"recipients", "--token-file", tokenFile, "--addr", "192.0.2.1:50051"}, 2, "add --tls"},
		// Well formed: the call is made, and fails.
		{[]string{"backlog", "--recipient", r}, 1, "Unavailable"},
		{[]string{"backlog", "--recipient", r, "--token-file", filepath.Join(t.TempDir(), "none")}, 1, "none"},
	} {
		args := c.args
		if !slices.Contains(args, "--addr") {
			args = append(args[:len(args):len(args)], "--addr", nowhere)
		}
		var out, errOut strings.Builder
		code := adminMain(context.Background(), args, &out, &errOut)
		if code != c.code {
			t.Errorf("messagehub admin %q: exit %d, want %d\n%s", c.args, code, c.code, errOut.String())
			continue
		}
		if n := strings.Count(errOut.String(), c.said); n != 1 {
			t.Errorf("messagehub admin %q said %q %d times, want once:\n%s", c.args, c.said, n, errOut.String())
		}
		if out.Len() != 0 {
			t.Errorf("messagehub admin %q printed %q on stdout", c.args, out.String())
		}
	}
}

// An unknown call is answered with the calls there are.
func TestAnUnknownAdminCallListsTheCalls(t *testing.T) {
	var errOut strings.Builder
	if code := adminMain(context.Background(), []string{"nosuch", "--recipient", uuid.NewString()}, io.Discard, &errOut); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	for _, call := range []string{"backlog", "next", "trace", "release", "acknowledge", "backup", "recipients", "history", "audit"} {
		if !strings.Contains(errOut.String(), call) {
			t.Errorf("the answer to an unknown call lacks %q:\n%s", call, errOut.String())
		}
	}
}
