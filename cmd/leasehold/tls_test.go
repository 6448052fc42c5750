package main_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/storetest/testserver"
)

// writeCert makes a certificate for cn signed by parent (self-signed when
// parent is nil) and writes it and its key as PEM files in dir.
func writeCert(t *testing.T, dir, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, cn+".crt"), filepath.Join(dir, cn+".key")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key, certPath, keyPath
}

// TestRedissWithCAAndClientCertificate: a redis-server that requires TLS
// client certificates is inspected over rediss:// with --tls-ca, --tls-cert
// and --tls-key; without the client certificate the handshake fails.
func TestRedissWithCAAndClientCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, caPath, _ := writeCert(t, dir, "test-ca", nil, nil)
	_, _, srvCert, srvKey := writeCert(t, dir, "server", ca, caKey)
	_, _, cliCert, cliKey := writeCert(t, dir, "client", ca, caKey)
	tlsAddr := freeAddr(t)
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	srv := testserver.StartRedis(t, testserver.WithRedisArgs("--tls-port", tlsPort,
		"--tls-cert-file", srvCert, "--tls-key-file", srvKey, "--tls-ca-cert-file", caPath, "--tls-auth-clients", "yes"))
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rc.Close() })
	c := appClient(t, rc)
	l := acquire(t, c, "runs:TLS", time.Minute)

	u := "rediss://" + tlsAddr + "/0"
	var got lockJSON
	decode(t, ok(t, "--timeout", "3s", "inspect", "--redis", u, "--tls-ca", caPath, "--tls-cert", cliCert, "--tls-key", cliKey, "-o", "json", l.Key()), &got)
	if !got.Held || got.Token != short(l.Token()) {
		t.Errorf("inspect over rediss:// = %+v", got)
	}
	// Without a client certificate the server refuses the handshake; without
	// the CA the client refuses the server.
	r := failsWith(t, 1, []string{"redis at " + tlsAddr}, "--timeout", "3s", "inspect", "--redis", u, "--tls-ca", caPath, l.Key())
	if r.elapsed > 3*time.Second+loadSlack { // --timeout 3s
		t.Errorf("a refused handshake took %v", r.elapsed)
	}
	failsWith(t, 1, []string{"certificate"}, "--timeout", "3s", "inspect", "--redis", u, "--tls-cert", cliCert, "--tls-key", cliKey, l.Key())
	if strings.Contains(ok(t, "ls", "--redis", u, "--tls-ca", caPath, "--tls-cert", cliCert, "--tls-key", cliKey, "runs:*"), l.Key()) == false {
		t.Errorf("ls over rediss:// does not list %s", l.Key())
	}
}
