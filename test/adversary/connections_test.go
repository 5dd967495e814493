package adversary

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// silent opens n TCP connections to addr that never send a byte; they are
// closed when the test ends.
func silent(t *testing.T, addr string, n int) {
	t.Helper()
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
}

// Connections that never send a byte cannot lock clients out: with twice
// --max-connections of them open on a listener, a new client is served
// at once (each new connection closes the oldest silent one), and within
// the handshake timeout at the latest. Without either, gRPC waited 2
// minutes for a handshake.
func silentConnections(t *testing.T) {
	const maxConns, handshake = 20, time.Second
	// A margin for a loaded machine; far below the 2 minutes it took.
	const margin = 10 * time.Second
	h := startHub(t, "--max-connections", strconv.Itoa(maxConns), "--grpc-handshake-timeout", handshake.String())

	t.Run("gRPC", func(t *testing.T) {
		measure(t, h, budget, func() {
			silent(t, h.grpcAddr, 2*maxConns)
			conn := dial(t, h.grpcAddr)
			ctx, cancel := context.WithTimeout(t.Context(), handshake+margin)
			defer cancel()
			start := time.Now()
			resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("a health check beside %d silent connections: %v %v", 2*maxConns, resp.GetStatus(), err)
			}
			t.Logf("served in %v beside %d silent connections", time.Since(start), 2*maxConns)
		})
	})
	// An HTTP connection has 10 s to send its headers; the new client must
	// not wait for that either.
	t.Run("HTTP", func(t *testing.T) {
		measure(t, h, budget, func() {
			silent(t, h.httpAddr, 2*maxConns)
			client := &http.Client{Timeout: margin, Transport: &http.Transport{DisableKeepAlives: true}}
			start := time.Now()
			resp, err := client.Get("http://" + h.httpAddr + "/healthz")
			if err != nil {
				t.Fatalf("GET /healthz beside %d silent connections: %v", 2*maxConns, err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /healthz beside %d silent connections: %d", 2*maxConns, resp.StatusCode)
			}
			t.Logf("served in %v beside %d silent connections", time.Since(start), 2*maxConns)
		})
	})
}
