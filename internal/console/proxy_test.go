package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
)

// proxy is a loopback HTTP proxy in front of a hub's HTTP port, for
// changing or holding a call the console makes: hook sees each request
// first, may change it, and says whether to hold it; a held request is
// announced on held, and goes on to the hub once the test closes the
// channel it was announced with.
type proxy struct {
	url  string
	held chan chan struct{}
}

func startProxy(t *testing.T, h *hub, hook func(*http.Request) bool) *proxy {
	t.Helper()
	target, err := url.Parse("http://" + h.app.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	// The proxy keeps the browser's Host header (a loopback address), which
	// a hub with --auth none requires.
	forward := httputil.NewSingleHostReverseProxy(target)
	p := &proxy{held: make(chan chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hook(r) {
			goOn := make(chan struct{})
			select {
			case p.held <- goOn:
			case <-r.Context().Done():
				return
			}
			select {
			case <-goOn:
			case <-r.Context().Done():
				return
			}
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

// hold waits for the next request the proxy holds.
func (p *proxy) hold(ctx context.Context, t *testing.T) chan struct{} {
	t.Helper()
	select {
	case goOn := <-p.held:
		return goOn
	case <-ctx.Done():
		t.Fatalf("waiting for the console's call: %v", ctx.Err())
		return nil
	}
}
