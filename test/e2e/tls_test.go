package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns
// their paths and a pool that trusts it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "messagehub-e2e"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestTLSOnBothListeners(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	h := startHub(t, "--http-addr", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile)
	httpAddr := httpAddrOf(t, h)

	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	client := messagehubv1.NewMessageHubClient(conn)
	recipient := newID()
	n := notification(recipient, messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries")
	if _, err := client.Save(ctxT(t), saveRequest(n)); err != nil {
		t.Fatalf("Save over TLS: %v", err)
	}

	// The gateway answers HTTPS (HTTP/2 and HTTP/1.1) and reaches the same hub.
	for _, h2 := range []bool{true, false} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		web := &httpHub{hub: h, base: "https://" + httpAddr, web: &http.Client{Transport: tr, Timeout: callTimeout}}
		b := web.do(t, http.MethodGet, "/v1/peek/timeseries?recipient="+recipient, "", nil).bundle(t)
		if len(b.GetNotificationIds()) != 1 || b.GetNotificationIds()[0] != n.GetId() {
			t.Fatalf("HTTPS peek %v, want the saved notification", b)
		}
		tr.CloseIdleConnections()
	}

	// Plaintext is not served on either port.
	plain, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plain.Close() })
	if _, err := healthpb.NewHealthClient(plain).Check(ctxT(t), &healthpb.HealthCheckRequest{}); err == nil {
		t.Error("a plaintext gRPC call succeeded on the TLS listener")
	}
	web := &httpHub{hub: h, base: "http://" + httpAddr, web: &http.Client{Timeout: callTimeout}}
	if r := web.do(t, http.MethodGet, "/healthz", "", nil); r.status == http.StatusOK {
		t.Error("a plaintext HTTP call succeeded on the TLS listener")
	}
}
