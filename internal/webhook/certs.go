package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

var errNotReady = errors.New("webhook certificates are not ready")

// The operator reads and updates its certificate Secret, and injects the
// CA bundle into its two webhook configurations. The RBAC for the Secret is
// a Role in the operator's namespace (config/rbac/webhook_cert_role.yaml);
// get and update of the configurations are limited to their names, list and
// watch cannot be (cert-controller watches them).
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations;mutatingwebhookconfigurations,verbs=list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,resourceNames=indexed-batch-job-validating-webhook-configuration,verbs=get;update
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,resourceNames=indexed-batch-job-mutating-webhook-configuration,verbs=get;update

// CertOptions say where the operator keeps its webhook certificate.
type CertOptions struct {
	// SecretName and Namespace name the Secret holding the CA and the
	// serving certificate. It must exist (the manifests create it empty);
	// the rotator fills it, and every replica serves what it holds, so the
	// certificate and the CA bundle survive restarts and are shared.
	SecretName, Namespace string
	// ServiceName is the webhook's Service; the certificate is issued for
	// <ServiceName>.<Namespace>.svc, and ExtraDNSNames (for example
	// localhost, for an operator run outside the cluster).
	ServiceName   string
	ExtraDNSNames []string
	// ValidatingConfig and MutatingConfig are the webhook configurations
	// whose caBundle the rotator keeps current.
	ValidatingConfig, MutatingConfig string
	// CertDir is where the webhook server reads tls.crt and tls.key.
	CertDir string
}

// ManageCerts adds to mgr cert-controller's rotator (a self-signed CA in
// the Secret, rotated before it expires, its bundle injected into the
// webhook configurations) and a writer that copies the Secret's serving
// certificate into CertDir, and returns a channel closed once the
// certificate is in CertDir and the CA bundle injected. Both run on every
// replica, leader or not.
//
// The certificate is written by the operator rather than mounted as a
// Secret volume, as JobSet and Kueue do it: a Secret volume shows a change
// only after the kubelet's next sync (a minute or more), and an operator run
// outside the cluster (make run, the demo, the e2e suite) has no volume.
func ManageCerts(mgr manager.Manager, opts CertOptions) (<-chan struct{}, error) {
	ready := make(chan struct{})
	secret := types.NamespacedName{Namespace: opts.Namespace, Name: opts.SecretName}
	r := &rotator.CertRotator{
		SecretKey:      secret,
		CertDir:        opts.CertDir,
		CAName:         "indexed-batch-job-ca",
		CAOrganization: "indexed-batch-job",
		DNSName:        fmt.Sprintf("%s.%s.svc", opts.ServiceName, opts.Namespace),
		ExtraDNSNames:  opts.ExtraDNSNames,
		IsReady:        ready,
		Webhooks: []rotator.WebhookInfo{
			{Type: rotator.Validating, Name: opts.ValidatingConfig},
			{Type: rotator.Mutating, Name: opts.MutatingConfig},
		},
		// Every replica serves the webhook, so every replica keeps its
		// certificate current; concurrent writes of the Secret are settled
		// by its resourceVersion (the loser reads the winner's).
		RequireLeaderElection: false,
	}
	if err := rotator.AddRotator(mgr, r); err != nil {
		return nil, fmt.Errorf("adding the certificate rotator: %w", err)
	}
	if err := mgr.Add(&certWriter{reader: mgr.GetAPIReader(), secret: secret, dir: opts.CertDir, every: certWriteInterval}); err != nil {
		return nil, err
	}
	return ready, nil
}

// certWriteInterval is how often the writer looks for a changed certificate
// once it has written one: the rotator renews it months before it expires,
// and a replica that rotated it first updates the others through the Secret.
const certWriteInterval = 30 * time.Second

// certWriter copies tls.crt and tls.key from the Secret into dir: every
// second until the rotator has filled the Secret, then every interval.
type certWriter struct {
	reader client.Reader
	secret types.NamespacedName
	dir    string
	every  time.Duration
}

// NeedLeaderElection is false: every replica serves the webhook.
func (w *certWriter) NeedLeaderElection() bool { return false }

// Start writes the certificate until ctx is done.
func (w *certWriter) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("webhook-certs")
	for {
		interval := time.Second
		switch current, changed, err := w.writeOnce(ctx); {
		case err != nil:
			logger.Error(err, "Could not write the webhook certificate", "secret", w.secret, "dir", w.dir)
		case changed:
			logger.Info("Wrote the webhook certificate", "secret", w.secret, "dir", w.dir)
			interval = w.every
		case current:
			interval = w.every
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// writeOnce writes the Secret's certificate and key into dir if they differ
// from what is there. It reports whether dir now holds the Secret's
// certificate (current) and whether it wrote (changed). The key goes first
// and each file is renamed into place, so the server never reads half a
// file.
func (w *certWriter) writeOnce(ctx context.Context) (current, changed bool, err error) {
	s := &corev1.Secret{}
	if err := w.reader.Get(ctx, w.secret, s); err != nil {
		if apierrors.IsNotFound(err) {
			return false, false, fmt.Errorf("secret %s does not exist (the manifests create it empty): %w", w.secret, err)
		}
		return false, false, err
	}
	crt, key := s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
	if len(crt) == 0 || len(key) == 0 {
		return false, false, nil // the rotator has not filled it yet
	}
	if err := os.MkdirAll(w.dir, 0o700); err != nil {
		return false, false, err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{corev1.TLSPrivateKeyKey, key}, {corev1.TLSCertKey, crt}} {
		path := filepath.Join(w.dir, f.name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, f.data) {
			continue
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, f.data, 0o600); err != nil {
			return false, changed, err
		}
		if err := os.Rename(tmp, path); err != nil {
			return false, changed, err
		}
		changed = true
	}
	return true, changed, nil
}
