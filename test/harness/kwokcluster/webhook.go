package kwokcluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/manifests"
)

// The names config/default gives the webhook's objects; the operator's
// flags default to them.
const (
	// OperatorNamespace is config/default's namespace, where the webhook's
	// certificate Secret lives.
	OperatorNamespace       = "indexed-batch-job-system"
	webhookSecret           = "indexed-batch-job-webhook-server-cert"
	validatingConfiguration = "indexed-batch-job-validating-webhook-configuration"
	mutatingConfiguration   = "indexed-batch-job-mutating-webhook-configuration"
)

// installWebhook installs the admission webhook as config/default does, for
// an operator run on this host rather than in a pod: the operator's
// namespace, the empty Secret the operator fills with its certificate, and
// the webhook configurations generated into config/webhook/manifests.yaml,
// with config/default's namespaceSelector, calling
// https://localhost:<WebhookPort> instead of the webhook Service (there is
// no Service network here). The operator injects the CA bundle itself.
func (c *Cluster) installWebhook(ctx context.Context, root string) error {
	clientset := c.clientset
	if _, err := clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", OperatorNamespace, err)
	}
	if _, err := clientset.CoreV1().Secrets(OperatorNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: webhookSecret},
		Type:       corev1.SecretTypeOpaque,
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the webhook's Secret: %w", err)
	}

	raw, err := os.ReadFile(filepath.Join(root, "config", "webhook", "manifests.yaml"))
	if err != nil {
		return err
	}
	base := "https://localhost:" + strconv.Itoa(c.WebhookPort)
	// As config/default: never the operator's own namespace, nor kube-system.
	selector := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn,
		Values: []string{"kube-system", OperatorNamespace},
	}}}
	clientConfig := func(cc admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.WebhookClientConfig {
		path := ptr.Deref(cc.Service.Path, "/")
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(base + path)}
	}
	docs, err := manifests.Documents(raw)
	if err != nil {
		return fmt.Errorf("reading config/webhook/manifests.yaml: %w", err)
	}
	for _, doc := range docs {
		var meta metav1.TypeMeta
		if err := utilyaml.Unmarshal(doc, &meta); err != nil {
			return err
		}
		switch meta.Kind {
		case "ValidatingWebhookConfiguration":
			cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := utilyaml.Unmarshal(doc, cfg); err != nil {
				return err
			}
			cfg.Name = validatingConfiguration
			for i := range cfg.Webhooks {
				cfg.Webhooks[i].ClientConfig = clientConfig(cfg.Webhooks[i].ClientConfig)
				cfg.Webhooks[i].NamespaceSelector = selector
			}
			if _, err := clientset.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
				return err
			}
		case "MutatingWebhookConfiguration":
			cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := utilyaml.Unmarshal(doc, cfg); err != nil {
				return err
			}
			cfg.Name = mutatingConfiguration
			for i := range cfg.Webhooks {
				cfg.Webhooks[i].ClientConfig = clientConfig(cfg.Webhooks[i].ClientConfig)
				cfg.Webhooks[i].NamespaceSelector = selector
			}
			if _, err := clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
				return err
			}
		default:
			return fmt.Errorf("config/webhook/manifests.yaml: unexpected kind %q", meta.Kind)
		}
	}
	return nil
}

// WebhookArgs are the flags an operator run on this host needs to serve the
// webhook through slot (0 ≤ slot < len(WebhookBackendPorts)), writing its
// certificate into certDir (a pod's emptyDir). Its certificate also names
// localhost, which the webhook configurations call.
func (c *Cluster) WebhookArgs(slot int, certDir string) []string {
	return []string{
		"--enable-webhook=true",
		"--webhook-port=" + strconv.Itoa(c.WebhookBackendPorts[slot]),
		"--webhook-cert-dir=" + certDir,
		"--webhook-namespace=" + OperatorNamespace,
		"--webhook-extra-dns-names=localhost",
	}
}

// forwarder stands in for the webhook Service: it accepts the API server's
// connections on one port and passes each, as bytes (TLS is between the API
// server and the operator), to the first backend port that accepts a
// connection, so that the webhook is served while any replica runs, as a
// Service's endpoints would have it.
type forwarder struct {
	listener net.Listener
	backends []int
	wg       sync.WaitGroup

	mu sync.Mutex
	// down: every connection is closed at once, as to a Service without
	// ready endpoints; conns are the connections being passed on.
	down  bool
	conns map[net.Conn]struct{}
}

func startForwarder(backends []int) (*forwarder, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &forwarder{listener: l, backends: backends, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

// port is the port the forwarder listens on.
func (f *forwarder) port() int { return f.listener.Addr().(*net.TCPAddr).Port }

func (f *forwarder) serve() {
	defer f.wg.Done()
	for {
		conn, err := f.listener.Accept()
		if err != nil {
			return // closed
		}
		go f.forward(conn)
	}
}

func (f *forwarder) forward(in net.Conn) {
	defer func() { _ = in.Close() }()
	f.mu.Lock()
	if f.down {
		f.mu.Unlock()
		return
	}
	f.conns[in] = struct{}{}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.conns, in)
		f.mu.Unlock()
	}()
	var out net.Conn
	for _, port := range f.backends {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err == nil {
			out = c
			break
		}
	}
	if out == nil {
		return // no replica: the API server sees the connection close
	}
	defer func() { _ = out.Close() }()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
	go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
	<-done
}

// setDown makes the webhook unreachable (closing the connections open now)
// or reachable again.
func (f *forwarder) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
	if down {
		for c := range f.conns {
			_ = c.Close()
		}
	}
}

func (f *forwarder) stop() {
	_ = f.listener.Close()
	f.wg.Wait()
}
