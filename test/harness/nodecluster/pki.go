package nodecluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// identity is a component's user: its bearer token in the API server's
// static token file, with the user name and groups Kubernetes' bootstrap
// RBAC grants that component.
type identity struct {
	user   string
	groups []string
	token  string
}

// pki is every credential of the cluster, generated here with the standard
// library: one CA signing the API server's serving certificate and its
// client certificate for the kubelet's API, a service account signing key,
// and a static token per component.
type pki struct {
	dir    string
	caCert []byte // PEM
	// caFile is the CA certificate's path: the kubelet's client CA, the
	// controller manager's root CA (the kube-root-ca.crt ConfigMap).
	caFile string
	// apiserver's serving certificate and key.
	certFile, keyFile string
	// kubeletClientCert and Key are the API server's client certificate
	// for the kubelet's API (logs, exec), in group system:masters.
	kubeletClientCert, kubeletClientKey string
	saKeyFile                           string
	tokenFile                           string
	identities                          map[string]identity
}

// kubeletID is the identity of node i's kubelet.
func kubeletID(i int) string { return fmt.Sprintf("kubelet-%d", i) }

// The components' identities, by name.
const (
	admin      = "admin"
	controller = "kube-controller-manager"
	scheduler  = "kube-scheduler"
	proxy      = "kube-proxy"
)

// newPKI writes the cluster's credentials under dir. The serving
// certificate names every address the API server is reached at: loopback,
// the control plane's address, and the kubernetes Service's cluster IP.
// Each node's kubelet has an identity of its own, as the Node authorizer
// wants (system:node:<its node's name>).
func newPKI(dir string, nodeNames []string, ips []net.IP) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "indexed-batch-job node cluster CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p := &pki{
		dir:               dir,
		caCert:            pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		caFile:            filepath.Join(dir, "ca.crt"),
		certFile:          filepath.Join(dir, "apiserver.crt"),
		keyFile:           filepath.Join(dir, "apiserver.key"),
		kubeletClientCert: filepath.Join(dir, "apiserver-kubelet-client.crt"),
		kubeletClientKey:  filepath.Join(dir, "apiserver-kubelet-client.key"),
		saKeyFile:         filepath.Join(dir, "sa.key"),
		tokenFile:         filepath.Join(dir, "tokens.csv"),
		identities:        map[string]identity{},
	}
	if err := os.WriteFile(p.caFile, p.caCert, 0o600); err != nil {
		return nil, err
	}
	serving := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses:  append([]net.IP{net.ParseIP("127.0.0.1")}, ips...),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := p.sign(ca, caKey, serving, p.certFile, p.keyFile); err != nil {
		return nil, err
	}
	client := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := p.sign(ca, caKey, client, p.kubeletClientCert, p.kubeletClientKey); err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := writeKey(p.saKeyFile, saKey); err != nil {
		return nil, err
	}

	if err := p.writeTokens(nodeNames); err != nil {
		return nil, err
	}
	return p, nil
}

// writeTokens gives each component a static token, as the user
// Kubernetes' bootstrap RBAC (and the Node authorizer, for the kubelets)
// grants it.
func (p *pki) writeTokens(nodeNames []string) error {
	users := map[string]identity{
		admin:      {user: "ibj-admin", groups: []string{"system:masters"}},
		controller: {user: "system:kube-controller-manager"},
		scheduler:  {user: "system:kube-scheduler"},
		proxy:      {user: "system:kube-proxy"},
	}
	for i, name := range nodeNames {
		users[kubeletID(i)] = identity{user: "system:node:" + name, groups: []string{"system:nodes"}}
	}
	var tokens strings.Builder
	for name, id := range users {
		raw := make([]byte, 16)
		if _, err := rand.Read(raw); err != nil {
			return err
		}
		id.token = hex.EncodeToString(raw)
		p.identities[name] = id
		// token,user,uid,"group1,group2"
		fmt.Fprintf(&tokens, "%s,%s,%s,%q\n", id.token, id.user, id.user, strings.Join(id.groups, ","))
	}
	return os.WriteFile(p.tokenFile, []byte(tokens.String()), 0o600)
}

// sign issues template, signed by the CA, with a new key, and writes both.
func (p *pki) sign(ca *x509.Certificate, caKey crypto.Signer, template *x509.Certificate, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	template.NotBefore = ca.NotBefore
	template.NotAfter = ca.NotAfter
	template.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, template, ca, key.Public(), caKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return writeKey(keyFile, key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}
