package azuritetest

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// CutAnswers returns a connection string of s's account reached through a
// proxy that closes its first connection once n bytes of Azurite's answer
// went through, and every later one at the end of its answer's headers,
// before any of its body: a download longer than n breaks half-way, and
// each attempt to resume it breaks before its first byte of data.
// Requests pass whole. The proxy and its connections close at t.Cleanup.
func (s *Server) CutAnswers(t testing.TB, n int64) string {
	t.Helper()
	return s.relay(t, func(c net.Conn, target string, index int) { cut(c, target, n, index == 0) })
}

// relay starts a proxy to s that hands each connection it accepts (counted
// from 0) to serve, with Azurite's address, and returns a connection
// string of s's account through it. At t.Cleanup the proxy stops, closes
// the connections it accepted and waits for serve to return.
func (s *Server) relay(t testing.TB, serve func(c net.Conn, target string, index int)) string {
	t.Helper()
	endpoint, err := url.Parse(s.BlobEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		open   = map[net.Conn]bool{}
		closed bool
	)
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		open[c] = !closed
		return !closed
	}
	t.Cleanup(func() {
		_ = lis.Close()
		mu.Lock()
		closed = true
		for c := range open {
			_ = c.Close() // idle keep-alive connections of the clients
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for accepted := 0; ; accepted++ {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			if !track(c) {
				_ = c.Close()
				return
			}
			wg.Go(func() { serve(c, endpoint.Host, accepted) })
		}
	})
	return strings.Replace(s.ConnectionString(), endpoint.Host, lis.Addr().String(), 1)
}

// cut relays c to target and closes both once n bytes came back (the first
// connection) or the answer's headers did (the others), or either side
// closed.
func cut(c net.Conn, target string, n int64, first bool) {
	defer func() { _ = c.Close() }()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer func() { _ = up.Close() }()
	go func() {
		_, _ = io.Copy(up, c)
		_ = up.Close()
	}()
	if first {
		_, _ = io.CopyN(c, up, n)
		return
	}
	r := bufio.NewReader(up)
	var headers []byte
	for !bytes.HasSuffix(headers, []byte("\r\n\r\n")) {
		line, err := r.ReadSlice('\n')
		headers = append(headers, line...)
		if err != nil {
			break
		}
	}
	_, _ = c.Write(headers)
}
