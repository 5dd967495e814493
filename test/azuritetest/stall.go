package azuritetest

import (
	"io"
	"net"
	"net/url"
	"strings"
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
	endpoint, err := url.Parse(s.BlobEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stalled, left := make(chan struct{}), make(chan struct{})
	var stalledOnce, leftOnce sync.Once
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		open   []net.Conn
		closed bool
	)
	track := func(conns ...net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		open = append(open, conns...)
		return !closed
	}
	t.Cleanup(func() {
		_ = lis.Close()
		mu.Lock()
		closed = true
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", endpoint.Host)
			if err != nil {
				_ = c.Close()
				continue
			}
			if !track(c, up) {
				_ = c.Close()
				_ = up.Close()
				return
			}
			quiet := make(chan struct{})
			wg.Go(func() {
				// The client's requests pass until it closes the connection.
				_, _ = io.Copy(up, c)
				select {
				case <-quiet:
					leftOnce.Do(func() { close(left) })
				default:
				}
				_ = c.Close()
				_ = up.Close()
			})
			wg.Go(func() {
				if m, _ := io.CopyN(c, up, n); m == n {
					close(quiet)
					stalledOnce.Do(func() { close(stalled) })
				}
			})
		}
	})
	return &Stall{
		ConnectionString: strings.Replace(s.ConnectionString(), endpoint.Host, lis.Addr().String(), 1),
		Stalled:          stalled, Left: left,
	}
}
