package main

import (
	"context"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// callFloor runs closed-loop gRPC health checks from concurrency workers
// (default 64, as save-single) until cfg.Duration has passed or cfg.Requests
// were sent. A health check does no store work, so its rate and its CPU on
// each side are what any unary call costs on this machine before the hub
// does anything: the floor under save-single.
func callFloor(ctx context.Context, e *env) (*Result, error) {
	concurrency := cmpOr(e.cfg.Concurrency, 64)
	res := newResult(map[string]any{
		"concurrency": concurrency, "duration": e.cfg.Duration.String(), "requests": e.cfg.Requests, "conns": e.cfg.Conns,
	})
	run := e.closedLoop(ctx, concurrency, func(w int) (func(), func(context.Context) error) {
		c := e.health[w%len(e.health)]
		req := &healthpb.HealthCheckRequest{}
		check := func(cctx context.Context) error {
			_, err := c.Check(cctx, req)
			return err
		}
		return func() {}, check
	})
	run.report(res)
	return res, ctx.Err()
}
