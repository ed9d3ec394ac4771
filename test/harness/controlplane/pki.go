package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// CA is a throwaway certificate authority: client-go's self-signed CA
// certificate (cert.NewSelfSignedCACert), and the certificates it issues
// from a cert.Config, as kubeadm issues a cluster's.
type CA struct {
	// Cert is the CA's certificate; CertPEM the same, PEM (a kubeconfig's
	// certificate-authority-data, a webhook's caBundle, a --client-ca-file).
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer
}

// NewCA generates a CA named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	// An hour back, for clocks a little behind this one.
	ca, err := cert.NewSelfSignedCACert(cert.Config{CommonName: name, NotBefore: time.Now().Add(-time.Hour)}, key)
	if err != nil {
		return nil, err
	}
	certPEM, err := cert.EncodeCertificates(ca)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: ca, CertPEM: certPEM, key: key}, nil
}

// Issue signs a certificate for cfg (its CommonName and Organization as
// the subject, its AltNames, its Usages) with a new ECDSA key, valid as
// long as the CA, and returns both PEM. client-go's cert package makes the
// CA but signs nothing with it; this is the one signature of the harness.
func (ca *CA) Issue(cfg cert.Config) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	template := &x509.Certificate{
		SerialNumber: serial.Add(serial, big.NewInt(1)),
		Subject:      pkix.Name{CommonName: cfg.CommonName, Organization: cfg.Organization},
		DNSNames:     cfg.AltNames.DNSNames,
		IPAddresses:  cfg.AltNames.IPs,
		NotBefore:    ca.Cert.NotBefore,
		NotAfter:     ca.Cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  cfg.Usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, err
	}
	issued, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	if certPEM, err = cert.EncodeCertificates(issued); err != nil {
		return nil, nil, err
	}
	keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key)
	return certPEM, keyPEM, err
}

// ServingCert issues a serving certificate for these names.
func (ca *CA) ServingCert(ips []net.IP, dnsNames []string) (certPEM, keyPEM []byte, err error) {
	return ca.Issue(cert.Config{
		CommonName: firstName(ips, dnsNames),
		AltNames:   cert.AltNames{IPs: ips, DNSNames: dnsNames},
		Usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// ClientCert issues a client certificate for user in groups, as
// kube-apiserver reads one (CommonName the user, Organization the groups).
func (ca *CA) ClientCert(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	return ca.Issue(cert.Config{
		CommonName: user, Organization: groups,
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func firstName(ips []net.IP, dnsNames []string) string {
	if len(dnsNames) > 0 {
		return dnsNames[0]
	}
	if len(ips) > 0 {
		return ips[0].String()
	}
	return "server"
}

// User is an identity of the cluster: its bearer token in kube-apiserver's
// static token file, with a user name and groups (those Kubernetes'
// bootstrap RBAC grants a component, or system:masters).
type User struct {
	Name   string
	Groups []string
}

// PKI is every credential of a control plane, under Dir: the CA, the API
// server's serving certificate, its client certificate for the kubelets'
// API (logs, exec; in group system:masters), the service account signing
// key, and a static token per user.
type PKI struct {
	CA  *CA
	Dir string
	// CAFile is the CA's certificate: kube-apiserver's --client-ca-file,
	// a kubelet's clientCAFile, kube-controller-manager's --root-ca-file.
	CAFile                                      string
	CertFile, KeyFile                           string
	KubeletClientCertFile, KubeletClientKeyFile string
	ServiceAccountKeyFile                       string
	TokenFile                                   string
	tokens                                      map[string]string
}

// newPKI writes the control plane's credentials under dir; the serving
// certificate names ips and dnsNames.
func newPKI(dir string, ips []net.IP, dnsNames []string, users []User) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := NewCA("indexed-batch-job test cluster CA")
	if err != nil {
		return nil, err
	}
	p := &PKI{
		CA: ca, Dir: dir, CAFile: filepath.Join(dir, "ca.crt"),
		CertFile: filepath.Join(dir, "apiserver.crt"), KeyFile: filepath.Join(dir, "apiserver.key"),
		KubeletClientCertFile: filepath.Join(dir, "apiserver-kubelet-client.crt"),
		KubeletClientKeyFile:  filepath.Join(dir, "apiserver-kubelet-client.key"),
		ServiceAccountKeyFile: filepath.Join(dir, "sa.key"), TokenFile: filepath.Join(dir, "tokens.csv"),
		tokens: map[string]string{},
	}
	files := map[string][]byte{p.CAFile: ca.CertPEM}
	if files[p.CertFile], files[p.KeyFile], err = ca.ServingCert(ips, dnsNames); err != nil {
		return nil, err
	}
	if files[p.KubeletClientCertFile], files[p.KubeletClientKeyFile], err = ca.ClientCert("kube-apiserver-kubelet-client", "system:masters"); err != nil {
		return nil, err
	}
	if files[p.ServiceAccountKeyFile], err = keyutil.MakeEllipticPrivateKeyPEM(); err != nil {
		return nil, err
	}
	if files[p.TokenFile], err = p.tokenFile(users); err != nil {
		return nil, err
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// tokenFile makes a random token per user, as kube-apiserver's
// --token-auth-file reads them.
func (p *PKI) tokenFile(users []User) ([]byte, error) {
	var tokens strings.Builder
	for _, u := range users {
		raw := make([]byte, 16)
		if _, err := rand.Read(raw); err != nil {
			return nil, err
		}
		p.tokens[u.Name] = hex.EncodeToString(raw)
		// token,user,uid,"group1,group2"
		fmt.Fprintf(&tokens, "%s,%s,%s,%q\n", p.tokens[u.Name], u.Name, u.Name, strings.Join(u.Groups, ","))
	}
	return []byte(tokens.String()), nil
}

// Token is user's bearer token; empty for a user the PKI does not know.
func (p *PKI) Token(user string) string { return p.tokens[user] }
