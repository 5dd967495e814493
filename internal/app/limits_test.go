package app

import (
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serveHTTPForTest serves handler with the hub's HTTP server settings on
// loopback and returns its base URL.
func serveHTTPForTest(t *testing.T, handler http.Handler) string {
	t.Helper()
	a := &App{logger: slog.New(slog.DiscardHandler), cfg: Config{Limits: Limits{
		HTTPReadTimeout: time.Minute, HTTPWriteTimeout: time.Minute, HTTPIdleTimeout: time.Minute,
	}}}
	srv := a.newHTTPServer(handler)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + lis.Addr().String()
}

// The HTTP server takes headers of at most httpMaxHeaderBytes: Go's default
// of 1 MiB per request let every connection hold that much.
func TestHTTPHeadersOverTheLimitAreRefused(t *testing.T) {
	url := serveHTTPForTest(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	for _, tc := range []struct {
		size int
		want int
	}{
		{httpMaxHeaderBytes / 2, http.StatusOK},
		{2 * httpMaxHeaderBytes, http.StatusRequestHeaderFieldsTooLarge},
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Large", strings.Repeat("a", tc.size))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("a header of %d bytes: %d, want %d", tc.size, resp.StatusCode, tc.want)
		}
	}
}
