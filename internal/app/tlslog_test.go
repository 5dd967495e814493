package app_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tlsFiles writes a self-signed certificate for 127.0.0.1 and its key.
func tlsFiles(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "messagehub-test"},
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
	return certFile, keyFile
}

// Any client that connects to the HTTP port can make the HTTP server log a
// line of its own (a failed TLS handshake: a port scan, a load balancer's
// TCP probe): those lines are limited to 10 a second, like the refused
// credentials. Every failed handshake was a warning line, without bound.
func TestFailedTLSHandshakesDoNotFloodTheLog(t *testing.T) {
	var logs logLines
	cfg := testConfig(t)
	cfg.TLSCert, cfg.TLSKey = tlsFiles(t)
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	r := start(t, cfg)
	handshakeLines := func() int {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		return strings.Count(logs.buf.String(), "TLS handshake error")
	}
	const probes = 100
	began := time.Now()
	for range probes { // connect and leave: the handshake meets EOF
		c, err := net.Dial("tcp", r.app.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
	}
	for deadline := time.Now().Add(time.Minute); handshakeLines() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no failed handshake was logged in a minute")
		}
	}
	// Give the server 2 s more to log them all (it does at once without a
	// limit); what may be logged follows from the time it had.
	for deadline := time.Now().Add(2 * time.Second); handshakeLines() < probes && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	n := handshakeLines()
	if most := 10 * (int(math.Ceil(time.Since(began).Seconds())) + 1); n > most {
		t.Fatalf("%d probes made %d lines in %s; want at most %d (10 a second)", probes, n, time.Since(began).Round(time.Millisecond), most)
	}
}
