package install_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/indexed-batch-job/indexed-batch-job/internal/webhook"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
)

// managers are every process started, killed at the end of the suite.
var managers []*manager

// killManagers kills every manager process still running.
func killManagers() {
	for _, m := range managers {
		m.kill()
	}
}

// dumpManagerLogs shows the end of every manager's log, after a failure.
func dumpManagerLogs() {
	for _, m := range managers {
		lines := strings.Split(m.log(), "\n")
		lines = lines[max(0, len(lines)-80):]
		GinkgoWriter.Printf("----- last lines of %s's log (%s)\n%s\n", m.name, m.logPath, strings.Join(lines, "\n"))
	}
}

// manager is one operator process, started from the binary as a Pod's
// container would run it.
type manager struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	probe   string // host:port of the health probes
	metrics string // host:port of the metrics endpoint, or ""
	webhook string // host:port of the admission webhook
	done    chan struct{}
}

// pointWebhooksAt sends the installed webhook configurations to m, as the
// webhook Service sends them to a ready replica in a cluster: envtest's API
// server cannot reach a Service, so the configurations call m's port on
// localhost instead. Only clientConfig changes; the CA bundle stays the one
// the operator injected.
func pointWebhooksAt(ctx context.Context, m *manager) {
	_, port, err := net.SplitHostPort(m.webhook)
	Expect(err).NotTo(HaveOccurred())
	for _, kind := range []string{validatingKind, mutatingKind} {
		Eventually(func() error {
			cfg := &unstructured.Unstructured{}
			cfg.SetAPIVersion("admissionregistration.k8s.io/v1")
			cfg.SetKind(kind)
			name, path := "indexed-batch-job-validating-webhook-configuration", webhook.ValidatePath
			if kind == mutatingKind {
				name, path = "indexed-batch-job-mutating-webhook-configuration", webhook.MutatePath
			}
			if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, cfg); err != nil {
				return err
			}
			hooks, _, _ := unstructured.NestedSlice(cfg.Object, "webhooks")
			for i := range hooks {
				h := hooks[i].(map[string]any)
				cc := h["clientConfig"].(map[string]any)
				delete(cc, "service")
				cc["url"] = "https://localhost:" + port + path
			}
			Expect(unstructured.SetNestedSlice(cfg.Object, hooks, "webhooks")).To(Succeed())
			return k8sClient.Update(ctx, cfg)
		}, 10*time.Second, 200*time.Millisecond).Should(Succeed())
	}
}

// givenAddresses are the addresses freeAddress handed out: a port just
// closed can come back from the next listen on port 0, and one manager's
// probe and metrics ports must differ. Two managers can start at once (as a
// two-replica Deployment's pods do), so processMu guards it and managers.
var (
	processMu      sync.Mutex
	givenAddresses = map[string]bool{}
)

// freeAddress is a loopback address with a port nobody binds now
// (controlplane.FreePort: below the ephemeral range, which outgoing
// connections draw from) and that it has not handed out before.
func freeAddress() string {
	processMu.Lock()
	defer processMu.Unlock()
	for range 100 {
		port, err := controlplane.FreePort()
		Expect(err).NotTo(HaveOccurred())
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if !givenAddresses[addr] {
			givenAddresses[addr] = true
			return addr
		}
	}
	Fail("no loopback port that was not handed out before")
	return ""
}

// startManager runs the manager binary with the kubeconfig and args (the
// Deployment's, see deploymentArgs) and waits until it reports ready. What
// differs between processes on one host comes after args, so it wins: probe
// and webhook addresses of its own, a certificate directory of its own (a
// pod's emptyDir), metrics on a port of its own if withMetrics, else none.
// The certificate also names localhost, which pointWebhooksAt calls, and
// its Secret is in the install namespace, as in a pod there. Its output goes
// to a file, shown if a spec fails.
func startManager(name, kubeconfig string, withMetrics bool, args ...string) *manager {
	m := &manager{name: name, probe: freeAddress(), webhook: freeAddress(), logPath: filepath.Join(workDir, name+".log"), done: make(chan struct{})}
	_, webhookPort, err := net.SplitHostPort(m.webhook)
	Expect(err).NotTo(HaveOccurred())
	args = append(append([]string{"--kubeconfig=" + kubeconfig}, args...),
		"--health-probe-bind-address="+m.probe,
		"--webhook-port="+webhookPort, "--webhook-cert-dir="+filepath.Join(workDir, name+"-certs"),
		"--webhook-extra-dns-names=localhost", "--webhook-namespace="+installNamespace)
	if withMetrics {
		m.metrics = freeAddress()
		args = append(args, "--metrics-bind-address="+m.metrics, "--metrics-secure=true")
	} else {
		args = append(args, "--metrics-bind-address=0")
	}
	logFile, err := os.Create(m.logPath)
	Expect(err).NotTo(HaveOccurred())
	m.cmd = exec.Command(managerBin, args...)
	m.cmd.Stdout, m.cmd.Stderr = logFile, logFile
	Expect(m.cmd.Start()).To(Succeed())
	go func() {
		_ = m.cmd.Wait()
		_ = logFile.Close()
		close(m.done)
	}()
	processMu.Lock()
	managers = append(managers, m)
	processMu.Unlock()
	m.waitReady()
	return m
}

// waitReady waits until the process reports ready, failing the spec if it
// exits first.
func (m *manager) waitReady() {
	GinkgoHelper()
	Eventually(func() (int, error) {
		select {
		case <-m.done:
			StopTrying("the manager exited:\n" + m.log()).Now()
		default:
		}
		resp, err := http.Get("http://" + m.probe + "/readyz")
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return resp.StatusCode, nil
	}, 60*time.Second, 200*time.Millisecond).Should(Equal(http.StatusOK), "%s never got ready", m.name)
}

// exe is the binary the process runs now, which an exec would change.
func (m *manager) exe() (string, error) {
	return os.Readlink(fmt.Sprintf("/proc/%d/exe", m.cmd.Process.Pid))
}

// log is everything the process wrote so far.
func (m *manager) log() string {
	b, err := os.ReadFile(m.logPath)
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

// leads says whether the process has acquired the leader election lease.
func (m *manager) leads() bool {
	// client-go's leader election logs it, capitalised or not by version.
	return strings.Contains(strings.ToLower(m.log()), "successfully acquired lease")
}

// kill ends the process with SIGKILL, as a node failure or an OOM kill
// would: it neither releases its lease nor finishes anything.
func (m *manager) kill() {
	select {
	case <-m.done:
		return
	default:
	}
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	Eventually(m.done, 10*time.Second).Should(BeClosed())
}

// stop ends the process with SIGTERM, as a rolling update would, and waits
// until it has exited.
func (m *manager) stop() {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	Eventually(m.done, 30*time.Second).Should(BeClosed(), "%s did not stop on SIGTERM", m.name)
}

// serviceAccountToken gets a token for a ServiceAccount from the TokenRequest
// API, as the kubelet does for a Pod's projected token.
func serviceAccountToken(ctx context.Context, namespace, name string) string {
	clientset, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	tr, err := clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	Expect(tr.Status.Token).NotTo(BeEmpty())
	return tr.Status.Token
}

// tokenConfig is a REST config that authenticates with the token only.
func tokenConfig(token string) *rest.Config {
	return &rest.Config{Host: cfg.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: cfg.CAData}}
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the
// ServiceAccount with a fresh token, and checks the API server sees it so.
func serviceAccountKubeconfig(ctx context.Context, namespace, name string) string {
	token := serviceAccountToken(ctx, namespace, name)
	clientset, err := kubernetes.NewForConfig(tokenConfig(token))
	Expect(err).NotTo(HaveOccurred())
	review, err := clientset.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	Expect(review.Status.UserInfo.Username).To(Equal(fmt.Sprintf("system:serviceaccount:%s:%s", namespace, name)))

	server := cfg.Host
	if !strings.Contains(server, "://") {
		server = "https://" + server
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: name, Namespace: namespace}
	kc.CurrentContext = name
	path := filepath.Join(workDir, name+".kubeconfig")
	Expect(clientcmd.WriteToFile(*kc, path)).To(Succeed())
	return path
}
