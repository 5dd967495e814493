package app

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/energydatahub/messagehub/internal/console"
	"github.com/energydatahub/messagehub/internal/lograte"
	"github.com/energydatahub/messagehub/internal/server"
)

// loadTLS reads the listeners' certificate; nil without one (plaintext).
func loadTLS(cfg Config) (*tls.Config, error) {
	if cfg.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// listen opens the listeners; with --auth none every one must be on loopback.
func (a *App) listen() error {
	for _, l := range []struct {
		addr string
		into *net.Listener
	}{{a.cfg.GRPCAddr, &a.grpcLis}, {a.cfg.HTTPAddr, &a.httpLis}, {a.cfg.MetricsAddr, &a.metricsLis}} {
		if l.addr == "" {
			continue
		}
		lis, err := net.Listen("tcp", l.addr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", l.addr, err)
		}
		a.onClose("listener "+l.addr, func() error { _ = lis.Close(); return nil })
		if err := checkBound(a.cfg.Auth, lis.Addr()); err != nil {
			return err
		}
		*l.into = lis
	}
	return nil
}

// checkBound refuses, with --auth none, a listener bound off loopback: the
// configuration is checked before listening, but "localhost" might not
// resolve to loopback, so what was bound is checked too.
func checkBound(auth string, bound net.Addr) error {
	if auth != AuthNone {
		return nil
	}
	if a, ok := bound.(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
		return fmt.Errorf("refusing to start: --auth none is only allowed on loopback, but a listener is bound to %s", bound)
	}
	return nil
}

// withTLS terminates TLS at the gRPC listener when tlsConfig is set, rather
// than with gRPC transport credentials, which would apply to every listener
// of the server: the gateway's in-process connection then needs no TLS.
func withTLS(lis net.Listener, tlsConfig *tls.Config) net.Listener {
	if tlsConfig == nil {
		return lis
	}
	c := tlsConfig.Clone()
	c.NextProtos = []string{"h2"} // gRPC clients insist on ALPN h2
	return tls.NewListener(lis, c)
}

// limited bounds the connections of an HTTP listener: the HTTP server
// terminates TLS itself, so connections are read below TLS, where a
// client's first byte (its hello, or its request) tells it is not silent.
func (a *App) limited(lis net.Listener) net.Listener {
	return server.LimitListener(lis, a.cfg.Limits.MaxConnections, 1)
}

// httpMaxHeaderBytes bounds an HTTP request's headers (HTTP/2: its header
// list once decoded): a bearer token and the usual headers are a few KiB.
// Go's default, 1 MiB, let each connection hold that much before any check.
const httpMaxHeaderBytes = 64 << 10

func (a *App) newHTTPServer(handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		TLSConfig:         a.tlsConfig.Clone(), // its own: serving HTTP/2 sets its NextProtos while the gRPC listener clones a.tlsConfig
		ReadHeaderTimeout: min(10*time.Second, a.cfg.Limits.HTTPReadTimeout),
		ReadTimeout:       a.cfg.Limits.HTTPReadTimeout,
		WriteTimeout:      a.cfg.Limits.HTTPWriteTimeout,
		IdleTimeout:       a.cfg.Limits.HTTPIdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
		ErrorLog:          log.New(&httpErrorLog{logger: a.logger, limit: lograte.Limiter{Max: httpErrorsPerSecond}}, "", 0),
	}
}

// httpErrorsPerSecond bounds the HTTP server's own error lines: any client
// that connects can make one (a failed TLS handshake: a port scan, a load
// balancer's TCP probe of a TLS port), so they are limited like the lines
// of refused credentials.
const httpErrorsPerSecond = 10

// httpErrorLog writes the HTTP server's own error lines at warn, at most
// httpErrorsPerSecond a second, each with how many were left out before it.
type httpErrorLog struct {
	logger *slog.Logger
	limit  lograte.Limiter
}

func (l *httpErrorLog) Write(p []byte) (int, error) {
	if ok, suppressed := l.limit.Allow(time.Now()); ok {
		l.logger.Warn(strings.TrimSuffix(string(p), "\n"), "suppressed_since_last", suppressed)
	}
	return len(p), nil
}

func serveHTTP(srv *http.Server, lis net.Listener, tlsConfig *tls.Config) error {
	var err error
	if tlsConfig != nil {
		err = srv.ServeTLS(lis, "", "") // the certificate is in TLSConfig
	} else {
		err = srv.Serve(lis)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve HTTP on %s: %w", lis.Addr(), err)
	}
	return nil
}

// sameOriginOnly refuses (403) a request a browser marks as made by a page
// of another origin (Sec-Fetch-Site other than same-origin or none), reads
// included: with --auth none a GET has effects too (a Peek cuts a bundle,
// an inspection is audited), and cross-origin protection stops only the
// other methods. Clients that are not browsers send no Sec-Fetch-Site. The
// console's files pass: they hold no data and do nothing by themselves,
// and an operator may follow a link to them from another site.
func sameOriginOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		site := r.Header.Get("Sec-Fetch-Site")
		p := path.Clean(r.URL.Path) // what the gateway's mux routes by
		consoleFile := (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
			(p == console.Path || strings.HasPrefix(p, console.Path+"/"))
		switch {
		case site == "" || site == "same-origin" || site == "none" || consoleFile:
			next.ServeHTTP(w, r)
		default:
			http.Error(w, "--auth none: the hub answers no request a page of another origin makes ("+
				"Sec-Fetch-Site: "+strconv.Quote(site)+")", http.StatusForbidden)
		}
	})
}

// loopbackHost refuses (421) a request that names the hub by anything but
// a loopback address or "localhost": with --auth none nothing else stops a
// site whose name a browser was made to resolve to 127.0.0.1 (DNS
// rebinding), whose pages are then same-origin with the hub.
func loopbackHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if ip := net.ParseIP(host); !strings.EqualFold(host, "localhost") && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "--auth none: the hub answers requests for a loopback address or localhost only, not "+
				strconv.Quote(r.Host), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}
