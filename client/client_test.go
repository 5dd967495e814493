package client_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/energydatahub/messagehub/client"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/test/hubtest"
)

// fault decides, per call, whether the hub fails it with UNAVAILABLE before
// (lose=false) or after (lose=true: the answer is lost) doing the work.
type fault struct {
	calls   atomic.Int32
	failN   int32 // the first failN calls fail
	lose    bool
	hang    bool                   // the failing calls wait until the caller gives up
	methods string                 // only calls whose method contains this
	token   atomic.Pointer[string] // when set, calls without "Bearer <token>" are UNAUTHENTICATED
}

func (f *fault) requireToken(token string) *fault { f.token.Store(&token); return f }

func (f *fault) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if token := f.token.Load(); token != nil {
		if md, _ := metadata.FromIncomingContext(ctx); !slices.Equal(md.Get("authorization"), []string{"Bearer " + *token}) {
			return nil, status.Error(codes.Unauthenticated, "no token")
		}
	}
	if !strings.Contains(info.FullMethod, f.methods) {
		return handler(ctx, req)
	}
	n := f.calls.Add(1)
	if n > f.failN {
		return handler(ctx, req)
	}
	if f.lose {
		_, _ = handler(ctx, req)
	}
	if f.hang {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return nil, status.Error(codes.Unavailable, "injected")
}

// startHub serves the real service over the embedded store on loopback,
// with f's faults in front.
func startHub(t *testing.T, f *fault) string {
	t.Helper()
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(f.interceptor, server.UnaryErrorInterceptor(slog.New(slog.DiscardHandler))))
	messagehubv1.RegisterMessageHubServer(srv, server.NewService(hubtest.Open(t)))
	return hubtest.Serve(t, srv)
}

func newClient(t *testing.T, addr string) *client.Client {
	t.Helper()
	return newClientWith(t, addr, client.Options{Plaintext: true, Retry: client.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}})
}

// newClientWith is a client of opts, closed when the test ends.
func newClientWith(t *testing.T, addr string, opts client.Options) *client.Client {
	t.Helper()
	c, err := client.New(addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func notification(recipient string) *client.Notification {
	return &client.Notification{
		Id: uuid.NewString(), Recipient: recipient, Origin: messagehubv1.Domain_DOMAIN_TIME_SERIES,
		ContentType: "rsm-014", SupportsBundling: true, Weight: 1,
	}
}

// saved saves a notification for a new recipient and returns the recipient.
func saved(t *testing.T, c *client.Client) string {
	t.Helper()
	recipient := uuid.NewString()
	if _, err := c.Save(within(t), notification(recipient)); err != nil {
		t.Fatal(err)
	}
	return recipient
}

// pending saves a notification for a new recipient and peeks its bundle.
func pending(t *testing.T, c *client.Client) (recipient string, b *client.Bundle) {
	t.Helper()
	recipient = saved(t, c)
	b, err := c.Peek(within(t), recipient, messagehubv1.PeekGroup_PEEK_GROUP_ALL, "")
	if err != nil || b == nil {
		t.Fatalf("peek: %v, %v", b, err)
	}
	return recipient, b
}

// peeking peeks for a new recipient on a goroutine and returns the
// channel its error comes on.
func peeking(ctx context.Context, c *client.Client) <-chan error {
	errs := make(chan error, 1)
	go func() {
		_, err := c.Peek(ctx, uuid.NewString(), 0, "")
		errs <- err
	}()
	return errs
}

func within(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSaveRetriesUnavailableWithTheSameIDs(t *testing.T) {
	f := &fault{failN: 2, lose: true, methods: "Save"} // two attempts store and lose their answer
	c := newClient(t, startHub(t, f))
	recipient := uuid.NewString()
	res, err := c.Save(within(t), notification(recipient), notification(recipient))
	if err != nil {
		t.Fatal(err)
	}
	if f.calls.Load() != 3 || res.Saved != 0 || res.Duplicates != 2 {
		t.Fatalf("%d attempts, %+v; want 3 attempts, the last finding both stored (duplicates)", f.calls.Load(), res)
	}
	b, err := c.Peek(within(t), recipient, messagehubv1.PeekGroup_PEEK_GROUP_ALL, "")
	if err != nil || len(b.GetNotificationIds()) != 2 {
		t.Fatalf("peek after retried saves: %v, %v; want the two notifications once", b, err)
	}
}

func TestADequeueWhoseAnswerWasLostIsDone(t *testing.T) {
	f := &fault{failN: 1, lose: true, methods: "Dequeue"}
	c := newClient(t, startHub(t, f))
	recipient, b := pending(t, c)
	if err := c.Dequeue(within(t), recipient, b.GetId()); err != nil {
		t.Fatalf("a dequeue acknowledged by an attempt whose answer was lost: %v", err)
	}
	if f.calls.Load() != 2 {
		t.Fatalf("%d attempts, want 2", f.calls.Load())
	}
	// Without a lost answer, NOT_FOUND is the caller's to see.
	if err := c.Dequeue(within(t), recipient, b.GetId()); !errors.Is(err, client.ErrNotFound) || status.Code(err) != codes.NotFound {
		t.Fatalf("a second dequeue: %v, want ErrNotFound with code NOT_FOUND", err)
	}
	if next, err := c.Peek(within(t), recipient, messagehubv1.PeekGroup_PEEK_GROUP_ALL, ""); err != nil || next != nil {
		t.Fatalf("after the dequeue: %v, %v; want nothing", next, err)
	}
}

// A Peek that names its bundle id and whose answer was lost is answered
// that same bundle on the retry: nothing is delivered under another id.
func TestAPeekWithABundleIDIsRetriedToTheSameBundle(t *testing.T) {
	f := &fault{failN: 1, lose: true, methods: "Peek"}
	c := newClient(t, startHub(t, f))
	recipient, bundleID := saved(t, c), uuid.NewString()
	b, err := c.Peek(within(t), recipient, messagehubv1.PeekGroup_PEEK_GROUP_ALL, bundleID)
	if err != nil || b.GetId() != bundleID || f.calls.Load() != 2 {
		t.Fatalf("peek: %v, %v after %d attempts; want bundle %s after 2", b, err, f.calls.Load(), bundleID)
	}
	if err := c.Dequeue(within(t), recipient, bundleID); err != nil {
		t.Fatal(err)
	}
}

// attemptTimeout is the AttemptTimeout of the tests whose first attempt
// hangs until it: the attempt that answers has as long, so that a busy
// machine's pause in it does not make it time out too.
const attemptTimeout = 5 * time.Second

// An attempt that outlives its own timeout is retried; the caller's
// deadline still bounds the whole call.
func TestAnAttemptThatTimesOutIsRetried(t *testing.T) {
	f := &fault{failN: 1, hang: true, methods: "Peek"}
	addr := startHub(t, f)
	c, err := client.New(addr, client.Options{Plaintext: true, Retry: client.RetryPolicy{AttemptTimeout: attemptTimeout, InitialBackoff: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Peek(within(t), uuid.NewString(), 0, ""); err != nil || f.calls.Load() != 2 {
		t.Fatalf("got %v after %d attempts; want the second to answer", err, f.calls.Load())
	}
	// Once the caller's own context has ended, nothing more is tried.
	f.calls.Store(0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Peek(ctx, uuid.NewString(), 0, ""); status.Code(err) != codes.Canceled || f.calls.Load() > 1 {
		t.Fatalf("got %v after %d attempts; want CANCELED at once", err, f.calls.Load())
	}
}

func TestTheCallersMistakesAreNotRetried(t *testing.T) {
	f := &fault{failN: 0, methods: "Save"}
	c := newClient(t, startHub(t, f))
	bad := notification(uuid.NewString())
	bad.Id = "not-a-uuid"
	if _, err := c.Save(within(t), bad); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("got %v, want INVALID_ARGUMENT", err)
	}
	if f.calls.Load() != 1 {
		t.Fatalf("an invalid save was sent %d times", f.calls.Load())
	}
}

// A Save larger than the hub takes (only an invalid one is: a full Save of
// valid notifications is about 6 MiB) can never be sent: it is the
// caller's mistake, answered at once, not a RESOURCE_EXHAUSTED that the
// caller is told to save again later.
func TestASaveOverTheSizeLimitIsRefusedAtOnce(t *testing.T) {
	var attempts atomic.Int32
	count := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		attempts.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	c, err := client.New(startHub(t, &fault{}), client.Options{Plaintext: true, DialOptions: []grpc.DialOption{count},
		Retry: client.RetryPolicy{InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	recipient, long := uuid.NewString(), strings.Repeat("x", 4<<10)
	notes := make([]*client.Notification, 10_000) // 10,000 of about 4 KiB: over 32 MiB
	for i := range notes {
		notes[i] = notification(recipient)
		notes[i].ContentType = long
	}
	_, err = c.Save(within(t), notes...)
	if status.Code(err) != codes.InvalidArgument || attempts.Load() > 1 {
		t.Fatalf("got %v after %d attempts; want INVALID_ARGUMENT at once", err, attempts.Load())
	}
}

func TestRetriesStopAtMaxAttempts(t *testing.T) {
	f := &fault{failN: 100, methods: "Peek"}
	addr := startHub(t, f)
	c, err := client.New(addr, client.Options{Plaintext: true, Retry: client.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Peek(within(t), uuid.NewString(), 0, ""); status.Code(err) != codes.Unavailable || f.calls.Load() != 3 {
		t.Fatalf("got %v after %d attempts; want UNAVAILABLE after 3", err, f.calls.Load())
	}
}

func TestTokensAreNeverSentInPlaintext(t *testing.T) {
	if _, err := client.New("127.0.0.1:1", client.Options{Plaintext: true, Tokens: client.StaticToken("secret")}); err == nil {
		t.Fatal("a client sending a token in plaintext was made")
	}
	if _, err := client.New("127.0.0.1:1", client.Options{}); err == nil {
		t.Fatal("a client without TLS was made without asking for plaintext")
	}
	for _, target := range []string{"hub.example.org:50051", "10.0.0.1:50051", "dns:///hub.example.org:50051", "127.0.0.1"} {
		opts := client.Options{Plaintext: true, Tokens: client.StaticToken("secret"), TokensOverLoopback: true}
		if _, err := client.New(target, opts); err == nil {
			t.Errorf("a client sending a token in plaintext to %s (not loopback) was made", target)
		}
	}
}

// A TokenFile is read at every call: a token renewed in place is sent at
// once, and an unreadable one fails the call without sending it.
func TestATokenFileIsReadAtEveryCall(t *testing.T) {
	f := (&fault{methods: "none"}).requireToken("first")
	addr := startHub(t, f)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(addr, client.Options{Plaintext: true, Tokens: client.TokenFile(file), TokensOverLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Peek(within(t), uuid.NewString(), 0, ""); err != nil {
		t.Fatalf("peek with the first token: %v", err)
	}
	f.requireToken("second")
	if err := os.WriteFile(file, []byte("second"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Peek(within(t), uuid.NewString(), 0, ""); err != nil {
		t.Fatalf("peek with the renewed token: %v", err)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Peek(within(t), uuid.NewString(), 0, ""); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("peek with an empty token file: %v, want an error saying so", err)
	}
}

// For trying --auth jwt on one machine, tokens may go in plaintext to a hub
// on loopback when the caller says so, and then they are sent.
func TestTokensGoInPlaintextToLoopbackWhenAllowed(t *testing.T) {
	f := (&fault{methods: "none"}).requireToken("dev-token")
	addr := startHub(t, f)
	for _, target := range []string{addr, "passthrough:///" + addr, strings.Replace(addr, "127.0.0.1", "localhost", 1)} {
		c, err := client.New(target, client.Options{Plaintext: true, Tokens: client.StaticToken("dev-token"), TokensOverLoopback: true})
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		if _, err := c.Peek(within(t), uuid.NewString(), 0, ""); err != nil {
			t.Errorf("peek with the token to %s: %v", target, err)
		}
		_ = c.Close()
	}
	// The hub does check: a client without the token is refused.
	if _, err := newClient(t, addr).Peek(within(t), uuid.NewString(), 0, ""); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("peek without a token: %v, want UNAUTHENTICATED", err)
	}
}

// Domain services and actors import the client: it must not bring the
// server's weight with it.
func TestTheClientLinksNothingOfTheServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/energydatahub/messagehub/client").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, forbidden := range []string{
		"grpc-gateway", "cockroachdb/pebble", "azcosmos", "prometheus", "go.opentelemetry.io",
		"github.com/energydatahub/messagehub/internal/",
	} {
		if strings.Contains(string(out), forbidden) {
			t.Errorf("the client links %s", forbidden)
		}
	}
}

// A Dequeue attempt that never reached the hub (the connection was refused)
// cannot have acknowledged the bundle: a NOT_FOUND after it is the caller's
// to see, as without it.
func TestADequeueRefusedBeforeItWasSentDoesNotHideNotFound(t *testing.T) {
	f := &fault{methods: "Dequeue"} // counts the dequeues the hub receives
	addr := startHub(t, f)
	c := newClient(t, addr)
	recipient, b := pending(t, c)
	if err := c.Dequeue(within(t), recipient, b.GetId()); err != nil { // another poller of the recipient
		t.Fatal(err)
	}

	// A port nothing listens on: the first connection is refused, the next
	// ones reach the hub.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	_ = lis.Close()
	var dials atomic.Int32
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		if dials.Add(1) == 1 {
			return (&net.Dialer{}).DialContext(ctx, "tcp", closed)
		}
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	refused, err := client.New(addr, client.Options{
		Plaintext: true,
		Retry:     client.RetryPolicy{MaxAttempts: 100, InitialBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond},
		DialOptions: []grpc.DialOption{
			grpc.WithContextDialer(dialer),
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: time.Millisecond, Multiplier: 1, MaxDelay: time.Millisecond}, MinConnectTimeout: 20 * time.Second}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = refused.Close() }()
	f.calls.Store(0)
	err = refused.Dequeue(within(t), recipient, b.GetId())
	if dials.Load() < 2 || f.calls.Load() != 1 {
		t.Fatalf("%d dials, %d dequeues received by the hub; want the first dial refused and one dequeue received", dials.Load(), f.calls.Load())
	}
	if !errors.Is(err, client.ErrNotFound) || status.Code(err) != codes.NotFound {
		t.Fatalf("a dequeue of a bundle already dequeued, whose first attempt was refused: %v, want ErrNotFound", err)
	}
}

// A caller whose context ends while the client pauses before a retry gets
// the last attempt's error at once, and nothing more is sent.
func TestACancelDuringTheBackoffEndsTheCall(t *testing.T) {
	f := &fault{failN: 100, methods: "Peek"}
	addr := startHub(t, f)
	answered := make(chan struct{}, 1)
	observe := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		answered <- struct{}{}
		return err
	}
	c := newClientWith(t, addr, client.Options{Plaintext: true, Retry: client.RetryPolicy{InitialBackoff: time.Hour},
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(observe)}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := peeking(ctx, c)
	<-answered // the first attempt failed: the client pauses for up to an hour
	cancel()
	select {
	case err := <-errs:
		if status.Code(err) != codes.Unavailable || f.calls.Load() != 1 {
			t.Fatalf("got %v after %d attempts; want the first attempt's UNAVAILABLE and no other attempt", err, f.calls.Load())
		}
	case <-within(t).Done():
		t.Fatal("the call went on pausing after its context was cancelled")
	}
}

// A TokenFunc that asks an identity provider with the call's context and
// outlives the attempt's own timeout is retried like an attempt the hub
// did not answer in time; once the caller's context has ended, it is not.
func TestATokenFuncOutlivingTheAttemptIsRetried(t *testing.T) {
	f := (&fault{methods: "none"}).requireToken("fresh")
	addr := startHub(t, f)
	var asked atomic.Int32
	tokens := client.TokenFunc(func(ctx context.Context) (string, error) {
		if asked.Add(1) == 1 { // the identity provider does not answer
			<-ctx.Done()
			return "", ctx.Err()
		}
		return "fresh", nil
	})
	c, err := client.New(addr, client.Options{Plaintext: true, Tokens: tokens, TokensOverLoopback: true,
		Retry: client.RetryPolicy{AttemptTimeout: attemptTimeout, InitialBackoff: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Peek(within(t), uuid.NewString(), 0, ""); err != nil || asked.Load() != 2 {
		t.Fatalf("got %v after %d tokens asked; want the second attempt's token to be used", err, asked.Load())
	}
}

// A Peek naming a bundle id while another bundle is pending answers
// FAILED_PRECONDITION whatever new id it names; a Peek without an id (or
// with the pending bundle's) answers the pending bundle, which the package
// comment says to do.
func TestAPeekWithANewIDWhileAnotherBundleIsPendingIsRefusedUntilPeekedWithout(t *testing.T) {
	c := newClient(t, startHub(t, &fault{}))
	recipient, pendingBundle := pending(t, c)
	for range 2 {
		if _, err := c.Peek(within(t), recipient, messagehubv1.PeekGroup_PEEK_GROUP_ALL, uuid.NewString()); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("a peek with a new id: %v, want FAILED_PRECONDITION", err)
		}
	}
	if b, err := c.Peek(within(t), recipient, messagehubv1.PeekGroup_PEEK_GROUP_ALL, ""); err != nil || b.GetId() != pendingBundle.GetId() {
		t.Fatalf("a peek without an id: %v, %v; want the pending bundle %s", b, err, pendingBundle.GetId())
	}
}

// A token that an HTTP/2 header cannot carry (a line break within a token
// file's content, a character outside printable ASCII) fails the call as
// any token source's error does: UNAUTHENTICATED, not sent, not retried.
func TestATokenAHeaderCannotCarryIsUnauthenticated(t *testing.T) {
	f := (&fault{methods: "none"}).requireToken("first")
	addr := startHub(t, f)
	for _, token := range []string{"fir\nst", "firsté"} {
		asked := 0
		tokens := client.TokenFunc(func(context.Context) (string, error) { asked++; return token, nil })
		c := newClientWith(t, addr, client.Options{Plaintext: true, Tokens: tokens, TokensOverLoopback: true})
		_, err := c.Peek(within(t), uuid.NewString(), 0, "")
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "cannot carry") {
			t.Errorf("peek with the token %q: %v; want UNAUTHENTICATED saying a header cannot carry it", token, err)
		}
		if asked != 1 {
			t.Errorf("the token %q was asked for %d times; want 1 (not retried)", token, asked)
		}
	}
}
