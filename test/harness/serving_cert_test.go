package harness

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
)

func TestServingCertIsTrustedThroughItsCAForEachName(t *testing.T) {
	sc, err := NewServingCert("localhost", []net.IP{net.ParseIP("127.0.0.1")}, []string{"kubernetes.default.svc"})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(sc.Cert, sc.Key)
	if err != nil {
		t.Fatalf("the certificate and key do not pair: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(sc.CA) {
		t.Fatal("the CA is not a PEM certificate")
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(pair.Certificate) != 1 {
		t.Errorf("Cert holds %d certificates, want only the serving one", len(pair.Certificate))
	}
	for _, name := range []string{"localhost", "127.0.0.1", "kubernetes.default.svc"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: roots}); err == nil {
		t.Error("the certificate also serves example.com")
	}
}
