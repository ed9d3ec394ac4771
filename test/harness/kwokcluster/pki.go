package kwokcluster

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"k8s.io/client-go/util/keyutil"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// pki is what the API server needs to serve TLS, sign service account
// tokens and let the admin in: all generated here, so no openssl is needed.
type pki struct {
	caCert     []byte // PEM
	certFile   string // serving certificate for 127.0.0.1 and localhost
	keyFile    string
	saKeyFile  string // service account signing key
	tokenFile  string // static token file with one admin in system:masters
	adminToken string
}

// newPKI writes a throwaway CA, serving certificate, service account key
// and admin token under dir.
func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	serving, err := harness.NewServingCert("localhost",
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc"})
	if err != nil {
		return nil, err
	}
	saKey, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return nil, err
	}
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return nil, err
	}

	p := &pki{
		caCert:     serving.CA,
		certFile:   filepath.Join(dir, "apiserver.crt"),
		keyFile:    filepath.Join(dir, "apiserver.key"),
		saKeyFile:  filepath.Join(dir, "sa.key"),
		tokenFile:  filepath.Join(dir, "tokens.csv"),
		adminToken: hex.EncodeToString(token),
	}
	files := map[string][]byte{
		filepath.Join(dir, "ca.crt"): p.caCert,
		p.certFile:                   serving.Cert,
		p.keyFile:                    serving.Key,
		p.saKeyFile:                  saKey,
		// token,user,uid,"group1,group2"
		p.tokenFile: fmt.Appendf(nil, "%s,kwok-admin,kwok-admin,\"system:masters\"\n", p.adminToken),
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}
