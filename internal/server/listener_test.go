package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// serveLimited serves a gRPC server with limits on a loopback listener
// that takes at most max connections, and returns its address.
func serveLimited(t *testing.T, max int, limits Limits) string {
	t.Helper()
	srv, hs := NewGRPCServer(&recordingHub{}, slog.New(slog.DiscardHandler), WithLimits(limits))
	SetServing(hs, true)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(LimitListener(lis, max, len(http2.ClientPreface))) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// silent opens a TCP connection that never sends a byte.
func silent(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Connections that never send a byte must not keep working clients out:
// with every place of the listener taken by silent connections, a client's
// call is served within the handshake timeout (it closes them), here
// within it and a margin for a busy machine, far below gRPC's default of two
// minutes.
func TestSilentConnectionsDoNotLockClientsOut(t *testing.T) {
	const max, handshake = 20, time.Second
	const margin = 10 * time.Second
	addr := serveLimited(t, max, Limits{HandshakeTimeout: handshake})
	for range max {
		silent(t, addr)
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), handshake+margin)
	defer cancel()
	start := time.Now()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("a health check beside %d silent connections: %v", max, err)
	}
	t.Logf("served after %v", time.Since(start))
}

// A connection that does not complete its HTTP/2 handshake is closed after
// the handshake timeout, not gRPC's default of two minutes.
func TestAHandshakeTimesOut(t *testing.T) {
	const handshake = time.Second
	addr := serveLimited(t, 10, Limits{HandshakeTimeout: handshake})
	c := silent(t, addr)
	if err := c.SetReadDeadline(time.Now().Add(10 * handshake)); err != nil {
		t.Fatal(err)
	}
	// The server speaks first (its settings); then it closes.
	_, err := io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a silent connection is still open after %v", 10*handshake)
	}
}

// accepted is a connection as both ends see it.
type accepted struct{ client, server net.Conn }

// dialAccept connects to l and accepts the connection.
func dialAccept(t *testing.T, l net.Listener) accepted {
	t.Helper()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	server, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Close() })
	return accepted{client, server}
}

// A new connection beyond the limit closes the oldest one still in its
// handshake, not one that is established.
func TestANewConnectionClosesTheOldestStillInItsHandshake(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := LimitListener(raw, 3, 2)
	t.Cleanup(func() { _ = l.Close() })

	established := dialAccept(t, l)
	if _, err := established.client.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(established.server, make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
	oldest, younger := dialAccept(t, l), dialAccept(t, l)
	dialAccept(t, l) // a fourth, beyond the limit of three

	// The oldest silent one is closed: its client reads the end.
	if err := oldest.client.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := oldest.client.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the oldest connection in its handshake: %v, want closed", err)
	}
	// The others are open: the server can still talk to them.
	for name, c := range map[string]accepted{"the established one": established, "the younger one": younger} {
		if _, err := c.server.Write([]byte("x")); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := io.ReadFull(c.client, make([]byte, 1)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
