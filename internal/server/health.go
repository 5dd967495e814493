package server

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// WithDraining ends the server's health watches (Health/Watch) once
// draining is closed and each has told its client a status other than
// SERVING (the caller turns health NOT_SERVING as it drains): a watch never
// ends by itself, and a graceful stop waits for every call, so one client
// watching the health status would hold the drain until it is forced.
func WithDraining(draining <-chan struct{}) Option {
	return func(o *options) { o.draining = draining }
}

// drainingHealth is gRPC's health service whose watches end as the server
// drains (WithDraining).
type drainingHealth struct {
	*health.Server
	draining <-chan struct{}
}

// Watch is health.Server's, on a stream whose context ends once the server
// drains and the watch has sent a status other than SERVING; it then
// answers UNAVAILABLE, which tells the client to look elsewhere.
func (h drainingHealth) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	w := &drainedWatch{Health_WatchServer: stream, ctx: ctx, cancel: cancel, sent: -1}
	go func() {
		select {
		case <-h.draining:
			w.drain()
		case <-ctx.Done():
		}
	}()
	err := h.Server.Watch(req, w)
	if stream.Context().Err() == nil && ctx.Err() != nil {
		return status.Error(codes.Unavailable, "the server is shutting down")
	}
	return err
}

// drainedWatch is a health watch's stream that ends (its context is
// cancelled) once draining and what it last sent is not SERVING.
type drainedWatch struct {
	healthpb.Health_WatchServer
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	draining bool
	sent     healthpb.HealthCheckResponse_ServingStatus // -1: nothing yet
}

func (w *drainedWatch) Context() context.Context { return w.ctx }

func (w *drainedWatch) Send(resp *healthpb.HealthCheckResponse) error {
	err := w.Health_WatchServer.Send(resp)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sent = resp.GetStatus()
	w.endIfToldLocked()
	return err
}

// drain marks the watch as draining, and ends it if it has told its
// client already.
func (w *drainedWatch) drain() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.draining = true
	w.endIfToldLocked()
}

func (w *drainedWatch) endIfToldLocked() {
	if w.draining && w.sent >= 0 && w.sent != healthpb.HealthCheckResponse_SERVING {
		w.cancel()
	}
}
