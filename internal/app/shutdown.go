package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/energydatahub/messagehub/internal/server"
)

// Shutdown runs in two stages, each with a deadline counted from its start
// (Run's context ending, or Close), so that it is bounded whatever the
// store does:
//
//  1. Draining, until three quarters of Config.ShutdownTimeout: health turns
//     NOT_SERVING, the listeners take no new connections and the calls in
//     flight may finish. Then the servers are stopped: their connections
//     close and their calls' contexts are cancelled, so a client whose call
//     was cut off gets an error, never a success for what was not
//     committed. Stopping does not wait for the handlers: one that waits
//     for the store is left behind (the audit log, closing, waits for it
//     within its bound, to record what it did).
//  2. Closing, until ShutdownTimeout: everything New opened is released in
//     reverse order (the hub lets queued saves commit, then the store
//     closes). A step still running at the deadline is left running and
//     whatever was opened before it stays open, so the store is never
//     closed under an operation; Close then returns ErrShutdownTimedOut and
//     the process exits anyway.

// DefaultShutdownTimeout bounds shutdown unless Config says otherwise: the
// README promises an exit within 15 s of SIGTERM, which leaves 2 s for the
// signal, the last log lines and the process's exit.
const DefaultShutdownTimeout = 13 * time.Second

// ErrShutdownTimedOut is Close's answer when a step of closing outlived
// Config.ShutdownTimeout and was left running.
var ErrShutdownTimedOut = errors.New("shutdown timed out")

// telemetryFlushTimeout bounds the flush of pending spans at exit.
const telemetryFlushTimeout = 2 * time.Second

func (a *App) shutdownTimeout() time.Duration {
	return cmp.Or(a.cfg.ShutdownTimeout, DefaultShutdownTimeout)
}

// Close stops serving, if Run has not already, and releases everything New
// opened, in reverse order of opening, within Config.ShutdownTimeout of the
// start of shutdown. Later calls return the first one's answer.
func (a *App) Close() error {
	a.closeOnce.Do(func() {
		a.stopServing()
		a.closeErr = a.runClosers(a.stopStarted.Add(a.shutdownTimeout()))
	})
	return a.closeErr
}

// stopServing drains and stops the servers once, whoever asks first: Run
// when its context ends, or Close.
func (a *App) stopServing() {
	a.stopOnce.Do(func() {
		a.stopStarted = time.Now()
		close(a.stopping)
		a.logger.Info("shutting down", "timeout", a.shutdownTimeout().String())
		for _, hs := range []*health.Server{a.health, a.gatewayHealth} {
			server.SetServing(hs, false)
			hs.Shutdown()
		}
		if a.stopWaits != nil {
			a.stopWaits() // waiting Peeks answer (empty) instead of holding the drain
		}
		a.drain(a.stopStarted.Add(a.shutdownTimeout() * 3 / 4))
	})
}

// drain lets the calls in flight finish until forceAt, then cuts off those
// still running.
func (a *App) drain(forceAt time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), forceAt)
	defer cancel()
	// gRPC clients are told to go away at once; the gateway's server keeps
	// serving the HTTP calls in flight until they end.
	external := gracefulStop(a.grpcSrv)
	for _, srv := range []*http.Server{a.httpSrv, a.metricsSrv} {
		if srv == nil {
			continue
		}
		if err := srv.Shutdown(ctx); err != nil {
			a.logger.Warn("HTTP graceful shutdown timed out; closing connections", "error", err)
			_ = srv.Close()
		}
	}
	a.logger.Info("HTTP server stopped")
	// The HTTP calls have ended, or been cut off: closing the connection
	// cancels what they still wait for.
	_ = a.gatewayConn.Close()
	internal := gracefulStop(a.gatewaySrv)

	for _, s := range []struct {
		srv     *grpc.Server
		drained <-chan struct{}
	}{{a.gatewaySrv, internal}, {a.grpcSrv, external}} {
		select {
		case <-s.drained:
		case <-ctx.Done():
			a.logger.Warn("graceful stop timed out; cutting in-flight calls off")
			// Unlike GracefulStop, Stop does not wait for the handlers.
			s.srv.Stop()
		}
	}
	a.logger.Info("gRPC server stopped")
}

// gracefulStop starts srv's GracefulStop; the channel is closed once every
// call has ended.
func gracefulStop(srv *grpc.Server) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	return done
}

// runClosers releases everything opened, in reverse order of opening, until
// deadline. A step still running then is left running, and the steps after
// it with it: what was opened before it stays open until it returns.
// a.released is closed once every step has run.
func (a *App) runClosers(deadline time.Time) error {
	var step atomic.Pointer[string]
	done := make(chan error, 1)
	go func() {
		defer close(a.released)
		var errs []error
		for i := len(a.closers) - 1; i >= 0; i-- {
			c := a.closers[i]
			step.Store(&c.name)
			errs = append(errs, c.fn())
		}
		done <- errors.Join(errs...)
	}()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		name := *step.Load()
		a.logger.Error("shutdown timed out; exiting with a step unfinished and what it uses still open",
			"step", name, "timeout", a.shutdownTimeout().String())
		return fmt.Errorf("%w after %s: closing the %s did not finish", ErrShutdownTimedOut, a.shutdownTimeout(), name)
	}
}

// flushTelemetry exports what telemetry still holds, within
// telemetryFlushTimeout.
func (a *App) flushTelemetry() error {
	fctx, cancel := context.WithTimeout(context.Background(), telemetryFlushTimeout)
	defer cancel()
	if err := a.tel.Shutdown(fctx); err != nil {
		a.logger.Warn("telemetry shutdown", "error", err)
	}
	return nil
}
