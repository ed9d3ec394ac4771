package harness

import (
	"fmt"
	"net"

	"k8s.io/client-go/util/cert"
)

// ServingCert is a throwaway serving certificate and the throwaway CA that
// signed it, all PEM, for a test's kube-apiserver or webhook server.
type ServingCert struct {
	// CA is the CA's certificate, for a client's trust (a kubeconfig's
	// certificate-authority-data, a webhook's caBundle).
	CA []byte
	// Cert and Key are what the server serves.
	Cert, Key []byte
}

// NewServingCert generates a ServingCert for host and the alternate IPs and
// DNS names, with client-go's cert package (as kube-apiserver does for its
// own self-signed certificate).
func NewServingCert(host string, ips []net.IP, dnsNames []string) (ServingCert, error) {
	chain, key, err := cert.GenerateSelfSignedCertKey(host, ips, dnsNames)
	if err != nil {
		return ServingCert{}, err
	}
	// The chain is the serving certificate, then the CA's.
	certs, err := cert.ParseCertsPEM(chain)
	if err != nil {
		return ServingCert{}, err
	}
	if len(certs) != 2 || !certs[1].IsCA {
		return ServingCert{}, fmt.Errorf("expected a serving certificate and its CA, got %d certificates", len(certs))
	}
	ca, err := cert.EncodeCertificates(certs[1])
	if err != nil {
		return ServingCert{}, err
	}
	serving, err := cert.EncodeCertificates(certs[0])
	if err != nil {
		return ServingCert{}, err
	}
	return ServingCert{CA: ca, Cert: serving, Key: key}, nil
}
