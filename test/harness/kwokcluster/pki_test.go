package kwokcluster

import (
	"crypto/ecdsa"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

func TestNewPKIWritesWhatTheAPIServerAndItsAdminNeed(t *testing.T) {
	dir := t.TempDir()
	p, err := newPKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	roots, err := cert.NewPoolFromBytes(p.caCert)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := cert.CertsFromFile(p.certFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"127.0.0.1", "localhost", "kubernetes.default.svc"} {
		if _, err := serving[0].Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("the API server's certificate for %s: %v", name, err)
		}
	}
	if _, err := keyutil.PrivateKeyFromFile(p.keyFile); err != nil {
		t.Errorf("the serving key: %v", err)
	}
	if sa, err := keyutil.PrivateKeyFromFile(p.saKeyFile); err != nil {
		t.Errorf("the service account key: %v", err)
	} else if _, ok := sa.(*ecdsa.PrivateKey); !ok {
		t.Errorf("the service account key is a %T, want an ECDSA key", sa)
	}
	tokens, err := os.ReadFile(p.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if want := p.adminToken + ",kwok-admin,kwok-admin,\"system:masters\"\n"; string(tokens) != want {
		t.Errorf("token file = %q, want %q", tokens, want)
	}
	if ca, err := os.ReadFile(filepath.Join(dir, "ca.crt")); err != nil || !strings.Contains(string(ca), "BEGIN CERTIFICATE") {
		t.Errorf("ca.crt: %q, %v", ca, err)
	}
}
