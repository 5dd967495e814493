package app_test

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A client watching the health status (Health/Watch, as gRPC's client-side
// health checking does) is told NOT_SERVING when a shutdown begins, and its
// stream ends then: it is no call the drain waits for. Without that, the
// stream, which never ends by itself, held every shutdown until its drain
// was forced (three quarters of the shutdown timeout).
func TestAHealthWatchDoesNotHoldTheDrain(t *testing.T) {
	cfg := testConfig(t)
	cfg.ShutdownTimeout = 20 * time.Second // the drain would be forced after 15 s
	r := start(t, cfg)
	conn, err := grpc.NewClient(r.app.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	watch, err := healthpb.NewHealthClient(conn).Watch(callContext(t), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := watch.Recv()
		if err != nil {
			t.Fatalf("the health watch ended before the shutdown: %v", err)
		}
		if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
	}
	// What the watch receives once the shutdown begins: its last status
	// before its end.
	last := make(chan healthpb.HealthCheckResponse_ServingStatus, 1)
	go func() {
		status := healthpb.HealthCheckResponse_SERVING
		for {
			resp, err := watch.Recv()
			if err != nil {
				last <- status
				return
			}
			status = resp.GetStatus()
		}
	}()
	began := time.Now()
	r.stop()
	if err := r.app.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if took := time.Since(began); took >= cfg.ShutdownTimeout*3/4 {
		t.Fatalf("Close took %s: the health watch held the drain until it was forced", took)
	}
	if status := <-last; status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("the health watch ended on %s, want NOT_SERVING", status)
	}
}
