// Package client is the Go client of MessageHub for domain services (Save)
// and market actors (Peek or PeekContent, Dequeue). It speaks gRPC only: it links neither
// the HTTP gateway nor anything of the server.
//
// # Retries
//
// Each call is retried, with exponential backoff and jitter, when the hub
// answers UNAVAILABLE or RESOURCE_EXHAUSTED (or an attempt's own deadline
// passes), for at most RetryPolicy.MaxAttempts attempts and never past the
// caller's context. That is safe because:
//   - Save is idempotent per notification id: a retry sends the same ids, and
//     notifications stored by an attempt whose answer was lost come back as
//     duplicates, never stored twice. Never give a retried notification a new id.
//   - Peek returns the pending bundle of its group again until it is
//     dequeued, so a retried Peek answers the same bundle. Pass a bundle id
//     of your own (a new UUID per bundle you expect) to know the id even if
//     every answer is lost: a retry with it answers that bundle, and the id
//     can be dequeued later. A retried Peek with a bundle id answers
//     ALREADY_EXISTS if the bundle was dequeued in between (another poller
//     of the same recipient did it): peek again with a new id; and
//     FAILED_PRECONDITION if another bundle is pending (another poller
//     peeked it), whatever new id it names, until that bundle is dequeued:
//     peek without a bundle id to get that bundle.
//   - Dequeue: an attempt whose answer was lost may have acknowledged the
//     bundle, and then the retry answers NOT_FOUND. Dequeue therefore treats
//     NOT_FOUND after such an attempt (one sent on a connection that then
//     failed, timed out or answered UNAVAILABLE or RESOURCE_EXHAUSTED) as
//     done. An attempt never sent (the connection refused) acknowledged
//     nothing: NOT_FOUND after it is returned (see ErrNotFound).
//
// DEADLINE_EXCEEDED is retried, whether an attempt's own timeout
// (RetryPolicy.AttemptTimeout) passed or the hub answered it, never once the
// caller's context ended. Other codes (INVALID_ARGUMENT, ALREADY_EXISTS, FAILED_PRECONDITION,
// PERMISSION_DENIED, UNAUTHENTICATED, NOT_FOUND, INTERNAL) are the caller's to
// handle and are returned at once (so is a Save over the hub's message size
// limit: INVALID_ARGUMENT, never sent); status.Code reads the code of the error
// returned (the last attempt's). RESOURCE_EXHAUSTED on Save means the hub is
// short of disk and refuses saves until space is freed, or that a cabinet
// of the Save holds as many notifications not yet dequeued as it may (its
// actor must dequeue first): after the attempts, keep the notifications and
// save them again later, with the same ids.
//
// # Tokens
//
// With --auth jwt give Options.Tokens: StaticToken, TokenFile (re-read at
// every call), or a TokenFunc that renews tokens. It is asked for a token on every call, and the token is
// sent only over TLS, so that it cannot be read on the wire. To try tokens
// against a hub on the same machine (`make dev-tokens`), set Plaintext and
// TokensOverLoopback with a loopback target such as 127.0.0.1:50051; any
// other target is refused. A token source's error fails the call with
// UNAUTHENTICATED, not retried (a TokenFile missing or empty, a token with a
// character other than printable ASCII, which no header carries), except when
// the attempt's own timeout ended while the token was asked for: that
// attempt is retried as one the hub did not answer in time.
//
// # Deadlines
//
// Give every call a context with a deadline. A Save of 10,000 notifications
// or a Peek of a full bundle takes well under a second on a healthy hub;
// 30 s per call leaves room for retries. Each attempt is also bounded by
// RetryPolicy.AttemptTimeout, which a Peek or PeekContent with Wait(d)
// extends by d and a second: the hub ends a wait a second before the
// attempt's deadline, so the attempt has the whole wait and then
// AttemptTimeout to answer, whatever AttemptTimeout is. Give the call's
// context more than d and a second too, or the hub cuts the wait to fit it.
//
// # Dead connections
//
// A NAT or load balancer may drop a connection without a word: nothing
// arrives any more, nothing is closed. The client pings the hub after
// KeepalivePolicy.Time (20 s) without a byte from it, with or without calls
// on the connection, and closes the connection when a ping is not answered
// within KeepalivePolicy.Timeout (10 s). The calls on it fail with
// UNAVAILABLE and are retried on a new connection, about 30 s after the
// hub last spoke rather than at the end of the attempt (a Peek with
// Wait(30s) has 61 s by default). The hub closes the connection of a
// client that pings more often than every 10 s, which is also gRPC's
// shortest Time: leave Time above it.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/energydatahub/messagehub/codec"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// Notification is the contract's DataAvailable: what a domain saves.
type Notification = messagehubv1.DataAvailable

// Bundle is what a Peek returns.
type Bundle = messagehubv1.Bundle

// PeekGroup picks the domains a Peek looks at.
type PeekGroup = messagehubv1.PeekGroup

// Message size limits of the hub: a full Save and the largest bundle fit.
const (
	maxSendBytes = 32 << 20
	maxRecvBytes = 64 << 20
)

// TokenSource gives the bearer token sent with every call (--auth jwt).
type TokenSource interface {
	Token(ctx context.Context) (string, error)
}

// StaticToken is a TokenSource of one fixed token.
type StaticToken string

// Token returns the token.
func (s StaticToken) Token(context.Context) (string, error) { return string(s), nil }

// TokenFunc adapts a function, such as one asking an identity provider for
// a fresh token, to a TokenSource. It is called for every call, at the
// same time by calls made at the same time: cache tokens in it until
// shortly before they expire, behind a mutex.
type TokenFunc func(ctx context.Context) (string, error)

// Token calls f.
func (f TokenFunc) Token(ctx context.Context) (string, error) { return f(ctx) }

// TokenFile is a TokenSource that reads the token from a file at every
// call, so that a token renewed in place (a mounted secret, a projected
// service-account token) is used at once. Surrounding white space is
// dropped; an empty file is an error. The file is read on a goroutine of
// its own, one read of a file at a time, which the calls asking meanwhile
// share: a call whose context ends during a read that does not end (the
// file on a network file system whose server stopped answering) ends with
// its context's error instead of waiting for it, and the calls after it
// start no other read that would wait too.
type TokenFile string

// Token reads the file, or takes the outcome of the read of it under way.
func (f TokenFile) Token(ctx context.Context) (string, error) {
	read := f.read()
	select {
	case <-read.done:
		return read.token, read.err
	case <-ctx.Done():
		return "", fmt.Errorf("token file %s not read: %w", f, ctx.Err())
	}
}

// tokenRead is a read of a token file; token and err are set once done is
// closed.
type tokenRead struct {
	done  chan struct{}
	token string
	err   error
}

// tokenReads holds the read under way of each token file.
var tokenReads = struct {
	sync.Mutex
	m map[TokenFile]*tokenRead
}{m: map[TokenFile]*tokenRead{}}

// read returns the read of f under way, starting one if there is none.
func (f TokenFile) read() *tokenRead {
	tokenReads.Lock()
	defer tokenReads.Unlock()
	if r, ok := tokenReads.m[f]; ok {
		return r
	}
	r := &tokenRead{done: make(chan struct{})}
	tokenReads.m[f] = r
	go func() {
		r.token, r.err = f.readNow()
		tokenReads.Lock()
		delete(tokenReads.m, f)
		tokenReads.Unlock()
		close(r.done)
	}()
	return r
}

// readNow reads the file on the caller's goroutine.
func (f TokenFile) readNow() (string, error) {
	data, err := os.ReadFile(string(f))
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("token file %s is empty", f)
	}
	return token, nil
}

// RetryPolicy says how calls are retried. Zero fields take the defaults.
// The pause before retry n is between half and all of
// min(InitialBackoff*2^(n-1), MaxBackoff), at random; with the defaults the
// five attempts of a call span about 1.5 s of pauses at most. A MaxBackoff
// given caps every pause, the first as well (an InitialBackoff over it is
// lowered to it); an InitialBackoff given over the default MaxBackoff
// raises that to it.
type RetryPolicy struct {
	MaxAttempts    int           // default 5; 1 turns retries off
	InitialBackoff time.Duration // default 100 ms (at most MaxBackoff)
	MaxBackoff     time.Duration // default 5 s (at least InitialBackoff)
	AttemptTimeout time.Duration // default 30 s; a Peek's Wait(d) adds d and a second
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 5
	}
	switch {
	case p.MaxBackoff <= 0 && p.InitialBackoff <= 0:
		p.InitialBackoff, p.MaxBackoff = 100*time.Millisecond, 5*time.Second
	case p.MaxBackoff <= 0:
		p.MaxBackoff = max(5*time.Second, p.InitialBackoff)
	case p.InitialBackoff <= 0:
		p.InitialBackoff = min(100*time.Millisecond, p.MaxBackoff)
	default:
		// The cap given bounds every pause, the first as well.
		p.InitialBackoff = min(p.InitialBackoff, p.MaxBackoff)
	}
	if p.AttemptTimeout <= 0 {
		p.AttemptTimeout = 30 * time.Second
	}
	return p
}

// Options configure New.
type Options struct {
	// TLS secures the connection. Nil means plaintext, which New refuses
	// unless Plaintext is set (for a hub on loopback during development).
	TLS       *tls.Config
	Plaintext bool
	// Tokens, when set, adds "authorization: Bearer <token>" to every call.
	// Tokens are sent over TLS only, unless TokensOverLoopback is also set
	// and the target is a loopback address (a hub started with
	// `make run ARGS="--auth jwt ..."` to try tokens locally).
	Tokens             TokenSource
	TokensOverLoopback bool
	Retry              RetryPolicy
	Keepalive          KeepalivePolicy
	// DialOptions are passed to grpc.NewClient after the client's own.
	DialOptions []grpc.DialOption
}

// KeepalivePolicy says how soon the client finds a connection that died
// without a word (a NAT or load balancer that dropped it): after Time
// without a byte from the hub, with or without calls on the connection, it
// pings, and a ping unanswered within Timeout closes the connection. The
// calls on it then fail with UNAVAILABLE and are retried on a new one,
// instead of each waiting out its attempt's timeout (a Peek with Wait(d):
// AttemptTimeout, d and a second). Zero fields take the defaults.
type KeepalivePolicy struct {
	// Time is at least 10 s: gRPC raises a shorter one to that, and the
	// hub closes the connection of a client that pings more often. The
	// default, 20 s, leaves the hub's bound a margin.
	Time    time.Duration // default 20 s
	Timeout time.Duration // default 10 s
}

func (p KeepalivePolicy) withDefaults() KeepalivePolicy {
	if p.Time <= 0 {
		p.Time = 20 * time.Second
	}
	if p.Timeout <= 0 {
		p.Timeout = 10 * time.Second
	}
	return p
}

// Client calls one MessageHub. It is safe for concurrent use.
type Client struct {
	conn  *grpc.ClientConn
	hub   messagehubv1.MessageHubClient
	retry RetryPolicy
}

// New connects to target (host:port or any gRPC target).
func New(target string, opts Options) (*Client, error) {
	var dial []grpc.DialOption
	switch {
	case opts.TLS != nil:
		dial = append(dial, grpc.WithTransportCredentials(credentials.NewTLS(opts.TLS)))
	case opts.Plaintext:
		if opts.Tokens != nil && !(opts.TokensOverLoopback && isLoopback(target)) {
			return nil, fmt.Errorf("client: a bearer token is never sent in plaintext to %q: give Options.TLS "+
				"(or, for a hub on this machine, Options.TokensOverLoopback with a loopback address)", target)
		}
		dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	default:
		return nil, errors.New("client: give Options.TLS, or set Options.Plaintext for a hub on loopback")
	}
	if opts.Tokens != nil {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{tokens: opts.Tokens, requireTLS: opts.TLS != nil}))
	}
	// The hub's codec: a Save of 1,000 notifications is encoded without
	// protobuf's reflection (codec.BenchmarkEncodeSave1000).
	dial = append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(maxSendBytes), grpc.MaxCallRecvMsgSize(maxRecvBytes),
		grpc.ForceCodecV2(codec.New())))
	// The hub permits pings without calls: an idle connection that died is
	// found and closed, and the next call opens a new one instead of being
	// sent on it.
	ka := opts.Keepalive.withDefaults()
	dial = append(dial, grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: ka.Time, Timeout: ka.Timeout, PermitWithoutStream: true}))
	conn, err := grpc.NewClient(target, append(dial, opts.DialOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Client{conn: conn, hub: messagehubv1.NewMessageHubClient(conn), retry: opts.Retry.withDefaults()}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// SaveResult counts a Save's notifications: stored now, or already stored.
type SaveResult struct {
	Saved, Duplicates int
}

// Save stores the notifications all or nothing (1..10,000 of them). A
// Save over the hub's message size limit is INVALID_ARGUMENT, not sent:
// only an invalid one is that large (10,000 notifications of the longest
// valid fields take about 6 MiB).
func (c *Client) Save(ctx context.Context, notifications ...*Notification) (SaveResult, error) {
	req := &messagehubv1.SaveRequest{Notifications: notifications}
	if size := req.SizeVT(); size > maxSendBytes {
		// gRPC would refuse it with RESOURCE_EXHAUSTED, which says to
		// retry and to save again later: this Save can never be sent.
		return SaveResult{}, status.Errorf(codes.InvalidArgument,
			"client: a Save of %d bytes is over the hub's %d: it holds more than 10,000 notifications or fields longer than allowed", size, maxSendBytes)
	}
	var res SaveResult
	err := c.do(ctx, c.retry.AttemptTimeout, func(ctx context.Context) error {
		resp, err := c.hub.Save(ctx, req)
		if err == nil {
			res = SaveResult{Saved: int(resp.GetSaved()), Duplicates: int(resp.GetDuplicates())}
		}
		return err
	})
	return res, err
}

// MaxWait is the longest wait a Peek may ask for.
const MaxWait = 30 * time.Second

// PeekOption modifies a Peek or PeekContent.
type PeekOption func(*messagehubv1.PeekRequest)

// Wait makes a Peek with nothing to deliver wait up to d (at most MaxWait;
// more is INVALID_ARGUMENT) for a bundle: the hub answers as soon as one is
// saved, or with nothing when d is over. Peeking again at once after an
// empty answer then costs one call per d instead of one per polling
// interval, and a bundle arrives without the interval's delay. Each attempt
// of the call gets d and a second on top of RetryPolicy.AttemptTimeout (the
// hub ends the wait a second before the deadline it is given); the hub
// still ends the wait a second before ctx's deadline, so give ctx more than
// d and a second.
func Wait(d time.Duration) PeekOption {
	return func(req *messagehubv1.PeekRequest) {
		ms := max(d.Milliseconds(), 0)
		req.WaitMs = uint32(min(ms, 1<<32-1)) //nolint:gosec // clamped to uint32
	}
}

// waitMargin is how long before its deadline the hub ends a Peek's wait.
const waitMargin = time.Second

// peekRequest builds a Peek's request and the timeout of each of its
// attempts: AttemptTimeout, plus the wait and the hub's margin when it
// waits, so that a short AttemptTimeout does not cut the wait to nothing
// (an answer at once, and a caller peeking again at once would poll the
// hub without pause).
func (c *Client) peekRequest(recipient string, group PeekGroup, bundleID string, opts []PeekOption) (*messagehubv1.PeekRequest, time.Duration) {
	req := &messagehubv1.PeekRequest{Recipient: recipient, Group: group, BundleId: bundleID}
	for _, opt := range opts {
		opt(req)
	}
	timeout := c.retry.AttemptTimeout
	if req.GetWaitMs() > 0 {
		// Capped at the longest duration: an AttemptTimeout near it (no
		// bound of the client's own) would otherwise wrap around to a
		// timeout already passed, and no attempt would be sent.
		extra := time.Duration(req.GetWaitMs())*time.Millisecond + waitMargin
		timeout += min(extra, math.MaxInt64-timeout)
	}
	return req, timeout
}

// Peek returns the recipient's next bundle of the group, or nil when there
// is nothing to deliver now (or within the wait of Wait). bundleID may be
// empty (the hub makes one). With --auth jwt an actor may leave recipient
// empty: it peeks as itself.
func (c *Client) Peek(ctx context.Context, recipient string, group PeekGroup, bundleID string, opts ...PeekOption) (*Bundle, error) {
	req, timeout := c.peekRequest(recipient, group, bundleID, opts)
	var b *Bundle
	err := c.do(ctx, timeout, func(ctx context.Context) error {
		resp, err := c.hub.Peek(ctx, req)
		b = resp.GetBundle()
		return err
	})
	return b, err
}

// Content is a bundle with its document, as PeekContent answers it.
type Content struct {
	Bundle *Bundle
	// MediaType is the document's, e.g. "application/xml; charset=utf-8";
	// empty when the bundle's domain has no document provider (and
	// Document is empty: use the bundle's notification ids).
	MediaType string
	Document  []byte
}

// PeekContent picks the bundle exactly as Peek does and returns it with its
// document, read whole. It returns nil when there is nothing to deliver. An
// UNAVAILABLE answer (the domain has not built the document yet within the
// hub's content timeout) is retried like any other.
func (c *Client) PeekContent(ctx context.Context, recipient string, group PeekGroup, bundleID string, opts ...PeekOption) (*Content, error) {
	req, timeout := c.peekRequest(recipient, group, bundleID, opts)
	var content *Content
	err := c.do(ctx, timeout, func(ctx context.Context) error {
		content = nil
		stream, err := c.hub.PeekContent(ctx, req)
		if err != nil {
			return err
		}
		for {
			msg, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			if content == nil {
				content = &Content{Bundle: msg.GetBundle(), MediaType: msg.GetMediaType()}
			}
			content.Document = append(content.Document, msg.GetData()...)
		}
	})
	if err != nil {
		return nil, err
	}
	return content, nil
}

// ErrNotFound is what Dequeue returns (wrapped) when the hub does not know
// the bundle as pending, and no earlier attempt of this call can explain it.
var ErrNotFound = errors.New("client: no such pending bundle")

// Dequeue acknowledges a pending bundle: it is never delivered again.
func (c *Client) Dequeue(ctx context.Context, recipient, bundleID string) error {
	lostAnswer := false // an earlier attempt may have acknowledged the bundle
	return c.do(ctx, c.retry.AttemptTimeout, func(ctx context.Context) error {
		// gRPC sets the peer only for an attempt that got a stream on a
		// connection: one without (connection refused, no token) was
		// never sent and cannot have acknowledged the bundle.
		var sentTo peer.Peer
		_, err := c.hub.Dequeue(ctx, &messagehubv1.DequeueRequest{Recipient: recipient, BundleId: bundleID}, grpc.Peer(&sentTo))
		switch code := status.Code(err); {
		case code == codes.NotFound && lostAnswer:
			return nil
		case code == codes.NotFound:
			return fmt.Errorf("%w: %w", ErrNotFound, err) // status.Code still reads NOT_FOUND
		case retryable(code) && sentTo.Addr != nil:
			lostAnswer = true
		}
		return err
	})
}

// retryable codes say the hub could not answer now, not that the request
// is wrong.
func retryable(code codes.Code) bool {
	return code == codes.Unavailable || code == codes.ResourceExhausted || code == codes.DeadlineExceeded
}

// do runs call until it succeeds, fails for good, runs out of attempts or
// the caller's context ends; each attempt is bounded by timeout.
func (c *Client) do(ctx context.Context, timeout time.Duration, call func(context.Context) error) error {
	pause := c.retry.InitialBackoff
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, timeout)
		err := call(actx)
		cancel()
		if err == nil || !retryable(status.Code(err)) || attempt == c.retry.MaxAttempts || ctx.Err() != nil {
			return err
		}
		// A random half of the pause keeps many clients from retrying in step.
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause/2 + rand.N(pause/2+1)):
		}
		pause = min(2*pause, c.retry.MaxBackoff)
	}
}

// isLoopback reports whether a target (host:port, optionally with the
// passthrough or dns scheme) names this machine: a loopback IP or
// "localhost".
func isLoopback(target string) bool {
	for _, scheme := range []string{"passthrough:///", "dns:///"} {
		target = strings.TrimPrefix(target, scheme)
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// bearer sends the token source's token with every call; over TLS only,
// unless New allowed plaintext to a loopback hub.
type bearer struct {
	tokens     TokenSource
	requireTLS bool
}

func (b bearer) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	token, err := b.tokens.Token(ctx)
	if err != nil && ctx.Err() != nil {
		// The attempt's time ran out while the token was asked for: its
		// code says so, so that do retries it as any attempt that timed
		// out (gRPC makes any other error UNAUTHENTICATED).
		return nil, status.Errorf(status.FromContextError(ctx.Err()).Code(), "client: token: %v", err)
	}
	if err != nil {
		return nil, fmt.Errorf("client: token: %w", err)
	}
	// gRPC refuses such a header as INTERNAL, the hub's fault to a caller;
	// it is the token's (e.g. a token file with a line break within).
	for i := range len(token) {
		if c := token[i]; c < 0x20 || c > 0x7e {
			return nil, fmt.Errorf("client: token: its byte %d (0x%02x) is one an HTTP/2 header cannot carry (printable ASCII only)", i, c)
		}
	}
	return map[string]string{"authorization": "Bearer " + token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.requireTLS }
