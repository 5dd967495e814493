package app

import (
	"context"
	"errors"
	"net/http"
	"time"

	"google.golang.org/grpc/health"

	"github.com/energydatahub/messagehub/internal/server"
)

// gracefulTimeout bounds how long shutdown waits for in-flight HTTP and gRPC
// calls together before cutting them off, so the process exits well within
// 15 s of SIGTERM.
const gracefulTimeout = 10 * time.Second

// telemetryFlushTimeout bounds the flush of pending spans at exit.
const telemetryFlushTimeout = 2 * time.Second

// Close stops serving, if Run has not already, and releases everything New
// opened, in reverse order of opening. Later calls return the first one's
// answer.
func (a *App) Close() error {
	a.closeOnce.Do(func() {
		a.stopServing()
		a.closeErr = a.runClosers()
	})
	return a.closeErr
}

// runClosers releases everything opened, in reverse order of opening.
func (a *App) runClosers() error {
	var errs []error
	for i := len(a.closers) - 1; i >= 0; i-- {
		errs = append(errs, a.closers[i].fn())
	}
	return errors.Join(errs...)
}

// stopServing stops the servers once, whoever asks first: Run when its
// context ends, or Close.
func (a *App) stopServing() {
	a.stopOnce.Do(func() {
		close(a.stopping)
		a.shutdown()
	})
}

// shutdown turns health to NOT_SERVING and stops the servers, letting
// in-flight calls finish within gracefulTimeout before cutting them off.
func (a *App) shutdown() {
	a.logger.Info("shutting down")
	for _, hs := range []*health.Server{a.health, a.gatewayHealth} {
		server.SetServing(hs, false)
		hs.Shutdown()
	}
	deadline := time.Now().Add(gracefulTimeout)

	sctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for _, srv := range []*http.Server{a.httpSrv, a.metricsSrv} {
		if srv == nil {
			continue
		}
		if err := srv.Shutdown(sctx); err != nil {
			a.logger.Warn("HTTP graceful shutdown timed out; closing connections", "error", err)
			_ = srv.Close()
		}
	}
	a.logger.Info("HTTP server stopped")
	_ = a.gatewayConn.Close() // its calls have ended with the HTTP server

	done := make(chan struct{})
	go func() {
		a.gatewaySrv.GracefulStop()
		a.grpcSrv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		a.logger.Warn("graceful stop timed out; cancelling in-flight calls", "timeout", gracefulTimeout.String())
		a.gatewaySrv.Stop()
		a.grpcSrv.Stop()
		<-done
	}
	a.logger.Info("gRPC server stopped")
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
