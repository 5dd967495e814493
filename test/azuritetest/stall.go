package azuritetest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Stall is a proxy to Azurite that passes the first n bytes of Azurite's
// answers on each connection and then nothing more, keeping the
// connection open: a download longer than n goes quiet half-way, as over
// a connection whose far end stopped sending without closing it.
type Stall struct {
	// ConnectionString reaches the account through the proxy.
	ConnectionString string
	// Stalled closes once a connection has gone quiet; Left once the
	// client has closed a connection that went quiet.
	Stalled, Left <-chan struct{}
}

// StallAnswers starts a Stall proxy to s; it and its connections close at
// t.Cleanup.
func (s *Server) StallAnswers(t testing.TB, n int64) *Stall {
	t.Helper()
	stalled, left := make(chan struct{}), make(chan struct{})
	var stalledOnce, leftOnce sync.Once
	connection := s.relay(t, func(c net.Conn, target string, _ int) {
		defer func() { _ = c.Close() }()
		up, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer func() { _ = up.Close() }()
		quiet := make(chan struct{})
		go func() {
			if m, _ := io.CopyN(c, up, n); m == n {
				close(quiet)
				stalledOnce.Do(func() { close(stalled) })
			}
		}()
		// The client's requests pass until it closes the connection.
		_, _ = io.Copy(up, c)
		select {
		case <-quiet:
			leftOnce.Do(func() { close(left) })
		default:
		}
	})
	return &Stall{ConnectionString: connection, Stalled: stalled, Left: left}
}
