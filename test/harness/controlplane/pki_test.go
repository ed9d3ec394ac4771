package controlplane

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// The names the serving certificates hold.
const (
	kubernetesDNS = "kubernetes.default.svc"
	localhostDNS  = "localhost"
)

func TestNewPKIWritesWhatTheAPIServerItsUsersAndKubeletsNeed(t *testing.T) {
	dir := t.TempDir()
	nodeIP := net.ParseIP("198.19.3.2")
	p, err := newPKI(dir, []net.IP{net.ParseIP("127.0.0.1"), nodeIP}, kubernetesDNSNames, []User{
		{Name: "local-admin", Groups: []string{masters}},
		{Name: "system:node:ibj-node", Groups: []string{"system:nodes"}},
		{Name: "system:kube-scheduler"},
	})
	if err != nil {
		t.Fatal(err)
	}
	roots, err := cert.NewPool(p.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	serving := mustCert(t, p.CertFile)
	for _, name := range []string{"127.0.0.1", "198.19.3.2", localhostDNS, kubernetesDNS} {
		if _, err := serving.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("the API server's certificate for %s: %v", name, err)
		}
	}
	if _, err := serving.Verify(x509.VerifyOptions{DNSName: "198.19.3.9", Roots: roots}); err == nil {
		t.Error("the API server's certificate also serves 198.19.3.9")
	}
	kubeletClient := mustCert(t, p.KubeletClientCertFile)
	if _, err := kubeletClient.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the API server's client certificate for the kubelets: %v", err)
	}
	if !slices.Equal(kubeletClient.Subject.Organization, []string{masters}) {
		t.Errorf("the kubelet client certificate's groups = %v, want [%s]", kubeletClient.Subject.Organization, masters)
	}
	for _, key := range []string{p.KeyFile, p.KubeletClientKeyFile, p.ServiceAccountKeyFile} {
		if k, err := keyutil.PrivateKeyFromFile(key); err != nil {
			t.Errorf("%s: %v", key, err)
		} else if _, ok := k.(*ecdsa.PrivateKey); !ok {
			t.Errorf("%s is a %T, want an ECDSA key", key, k)
		}
	}
	tokens, err := os.ReadFile(p.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	want := p.Token("local-admin") + ",local-admin,local-admin,\"system:masters\"\n" +
		p.Token("system:node:ibj-node") + ",system:node:ibj-node,system:node:ibj-node,\"system:nodes\"\n" +
		p.Token("system:kube-scheduler") + ",system:kube-scheduler,system:kube-scheduler,\"\"\n"
	if string(tokens) != want {
		t.Errorf("token file = %q, want %q", tokens, want)
	}
	if p.Token("local-admin") == p.Token("system:kube-scheduler") || len(p.Token("local-admin")) != 32 {
		t.Errorf("tokens are not distinct random hex: %q, %q", p.Token("local-admin"), p.Token("system:kube-scheduler"))
	}
}

func TestCAIssuesCertificatesOnlyItsOwnRootsTrust(t *testing.T) {
	ca, err := NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := ca.ClientCert("alice", "team-a", "team-b")
	if err != nil {
		t.Fatal(err)
	}
	certs, err := cert.ParseCertsPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	client := certs[0]
	if client.Subject.CommonName != "alice" || !slices.Equal(client.Subject.Organization, []string{"team-a", "team-b"}) {
		t.Errorf("subject = %v, want alice in team-a and team-b", client.Subject)
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if _, err := client.Verify(x509.VerifyOptions{Roots: pool(ca), KeyUsages: usage}); err != nil {
		t.Errorf("the issuing CA does not trust its client certificate: %v", err)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: pool(other), KeyUsages: usage}); err == nil {
		t.Error("another CA trusts the client certificate")
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: pool(ca), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("a client certificate serves")
	}
}

func mustCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	certs, err := cert.CertsFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(path, ".crt") || len(certs) != 1 {
		t.Fatalf("%s holds %d certificates, want 1", path, len(certs))
	}
	return certs[0]
}

func pool(ca *CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

func TestServingCertIsTrustedThroughItsCAForEachNameAndNoOther(t *testing.T) {
	ca, err := NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.ServingCert([]net.IP{net.ParseIP("127.0.0.1")}, []string{localhostDNS, kubernetesDNS})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("the certificate and key do not pair: %v", err)
	}
	if len(pair.Certificate) != 1 {
		t.Errorf("the serving PEM holds %d certificates, want only the serving one", len(pair.Certificate))
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	for _, name := range []string{localhostDNS, "127.0.0.1", kubernetesDNS} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: pool(ca), KeyUsages: usage}); err != nil {
			t.Errorf("serving %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: pool(ca), KeyUsages: usage}); err == nil {
		t.Error("the certificate also serves example.com")
	}
}
