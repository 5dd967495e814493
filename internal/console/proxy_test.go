package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// proxy is a loopback HTTP proxy in front of a hub's HTTP port, for
// changing or holding the calls the console makes: hook sees each request
// first, may change it, and says whether to hold it. Each held request is
// announced on held and goes on to the hub once the test calls release.
type proxy struct {
	url     string
	held    chan struct{}
	gate    chan struct{}
	release func()
}

// heldBound bounds the held requests announced and not yet waited for.
const heldBound = 16

func startProxy(t *testing.T, h *hub, hook func(*http.Request) bool) *proxy {
	t.Helper()
	target, err := url.Parse("http://" + h.app.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	// The proxy keeps the browser's Host header (a loopback address), which
	// a hub with --auth none requires.
	forward := httputil.NewSingleHostReverseProxy(target)
	p := &proxy{held: make(chan struct{}, heldBound), gate: make(chan struct{})}
	var once sync.Once
	p.release = func() { once.Do(func() { close(p.gate) }) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hook(r) {
			select {
			case p.held <- struct{}{}:
			default:
				t.Errorf("more than %d requests held at once", heldBound)
			}
			select {
			case <-p.gate:
			case <-r.Context().Done():
				return
			}
		}
		forward.ServeHTTP(w, r)
	}))
	// Held requests go on before the server closes, which waits for them.
	t.Cleanup(func() { p.release(); srv.Close() })
	p.url = srv.URL
	return p
}

// hold waits until the proxy holds a request.
func (p *proxy) hold(ctx context.Context, t *testing.T) {
	t.Helper()
	select {
	case <-p.held:
	case <-ctx.Done():
		t.Fatalf("waiting for the console's call: %v", ctx.Err())
	}
}
