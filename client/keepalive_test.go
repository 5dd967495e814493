package client_test

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/test/bufconn"

	"github.com/energydatahub/messagehub/client"
	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/test/hubtest"
)

// holeProxy forwards TCP connections on loopback to a target. Once hole is
// called, the connections it forwards carry no more bytes either way and
// are not closed, not even when the target closes its end: what a NAT or
// load balancer that dropped a connection does. Connections accepted after
// that are forwarded.
type holeProxy struct {
	ln       net.Listener
	accepted atomic.Int32
	mu       sync.Mutex
	links    []*link
}

// link is one forwarded connection.
type link struct {
	holed atomic.Bool
}

func startHoleProxy(t *testing.T, target string) *holeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holeProxy{ln: ln}
	var conns []net.Conn
	var connsMu sync.Mutex
	t.Cleanup(func() {
		_ = ln.Close()
		connsMu.Lock()
		defer connsMu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = down.Close()
				continue
			}
			connsMu.Lock()
			conns = append(conns, down, up)
			connsMu.Unlock()
			l := &link{}
			p.mu.Lock()
			p.links = append(p.links, l)
			p.mu.Unlock()
			p.accepted.Add(1)
			go l.forward(up, down)
			go l.forward(down, up)
		}
	}()
	return p
}

func (p *holeProxy) addr() string { return p.ln.Addr().String() }

// hole makes the connections forwarded so far carry nothing more.
func (p *holeProxy) hole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.links {
		l.holed.Store(true)
	}
}

// forward copies src to dst until either fails, or drops what it reads
// once the link is holed.
func (l *link) forward(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if l.holed.Load() {
			if err != nil {
				return // dst stays open: its peer learns nothing
			}
			continue
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			_ = dst.Close()
			_ = src.Close()
			return
		}
	}
}

// A connection dropped silently while a Peek waits on it (a NAT or load
// balancer that forgot it: nothing arrives, nothing is closed) is found
// dead by the client's keepalive, and the Peek is retried on a new
// connection, which answers the bundle the dropped one could not carry.
// Without keepalive the attempt waits out its timeout, 10 minutes here:
// the call's context, 2 minutes, ends first (DEADLINE_EXCEEDED).
func TestAPeekOnAConnectionDroppedSilentlyIsRetriedOnANewOne(t *testing.T) {
	addr, h := startWaitingHub(t)
	proxy := startHoleProxy(t, addr)
	c := newClientWith(t, proxy.addr(), client.Options{
		Plaintext: true,
		Retry:     client.RetryPolicy{AttemptTimeout: 10 * time.Minute, InitialBackoff: time.Millisecond},
		// The shortest gRPC allows, so that the test takes seconds.
		Keepalive: client.KeepalivePolicy{Time: 10 * time.Second, Timeout: time.Second},
	})
	direct := newClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	recipient := uuid.NewString()

	type answer struct {
		b   *client.Bundle
		err error
	}
	answers := make(chan answer, 1)
	go func() {
		b, err := c.Peek(ctx, recipient, messagehubv1.PeekGroup_PEEK_GROUP_ALL, "", client.Wait(client.MaxWait))
		answers <- answer{b, err}
	}()
	untilWaiting(t, h)
	proxy.hole()
	// The waiting Peek answers this bundle into the hole.
	saved := notification(recipient)
	if _, err := direct.Save(ctx, saved); err != nil {
		t.Fatal(err)
	}
	a := <-answers
	if got := a.b.GetNotificationIds(); a.err != nil || len(got) != 1 || got[0] != saved.GetId() {
		t.Fatalf("the Peek on the dropped connection answered %v, %v; want the notification saved, on a new connection", got, a.err)
	}
	if n := proxy.accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: the dropped one and the one the Peek was retried on", n)
	}
}

// countedListener is an in-memory listener (connections a synctest bubble
// sees block) that counts the connections it accepts.
type countedListener struct {
	*bufconn.Listener
	accepted atomic.Int32
}

func (l *countedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

func (l *countedListener) dial(ctx context.Context, _ string) (net.Conn, error) {
	return l.DialContext(ctx)
}

// pingedFor serves the hub with srv over in-memory connections and keeps a
// client of opts busy for 20 minutes of a synctest bubble's clock: waiting
// Peeks of the longest wait, which nothing answers before it ends, then 4
// minutes without calls (less than the hub's 5 minutes before it closes an
// idle connection), then waiting Peeks again. The client pings all along:
// during the waits no byte comes from the hub. It returns how many
// connections the server accepted (one, unless it closed one) and the
// first failed Peek's error (a Peek on a connection closed is not retried).
func pingedFor(t *testing.T, srv *grpc.Server, opts client.Options) (int32, error) {
	t.Helper()
	lis := &countedListener{Listener: bufconn.Listen(1 << 20)}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	opts.Plaintext = true
	opts.Retry = client.RetryPolicy{MaxAttempts: 1}
	opts.DialOptions = append(opts.DialOptions, grpc.WithContextDialer(lis.dial))
	c, err := client.New("passthrough:///bufnet", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	var failed error
	peeks := func() {
		for range 8 {
			b, err := c.Peek(ctx, uuid.NewString(), messagehubv1.PeekGroup_PEEK_GROUP_ALL, "", client.Wait(client.MaxWait))
			if err == nil && b != nil {
				t.Fatalf("a Peek for a new recipient answered %v", b)
			}
			if failed == nil {
				failed = err
			}
		}
	}
	peeks()
	time.Sleep(4 * time.Minute)
	peeks()
	return lis.accepted.Load(), failed
}

// The client's default keepalive pings within the hub's enforcement
// policy: over 20 minutes of pings, during calls and between them, the hub
// does not close the connection (GOAWAY too_many_pings, which fails the
// calls on it). The bubble's clock runs them at once, whatever the
// machine's speed.
func TestTheDefaultKeepaliveKeepsWithinTheHubsPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, _ := server.NewGRPCServer(hubtest.Open(t), slog.New(slog.DiscardHandler))
		if n, err := pingedFor(t, srv, client.Options{}); n != 1 || err != nil {
			t.Fatalf("%d connections, a Peek failed with %v; want one connection and no failure", n, err)
		}
	})
}

// pingedFor sees a connection closed for its pings: against a policy that
// the default keepalive breaks (a ping every 30 s at most), the server
// closes the connection while it has no calls, between the Peeks (each
// answer it sends forgives the pings before).
func TestPingedForSeesAConnectionClosedForItsPings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 30 * time.Second, PermitWithoutStream: true}))
		messagehubv1.RegisterMessageHubServer(srv, server.NewService(hubtest.Open(t)))
		if n, _ := pingedFor(t, srv, client.Options{}); n == 1 {
			t.Fatal("one connection: the server kept that of a client pinging more often than it permits")
		}
	})
}
