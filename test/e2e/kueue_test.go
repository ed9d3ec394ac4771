package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/yaml"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	ibjkueue "github.com/indexed-batch-job/indexed-batch-job/internal/kueue"
	"github.com/indexed-batch-job/indexed-batch-job/internal/kueue/inprocess"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
)

// What Kueue's kustomization makes of the names in the manifests of its
// module: every object prefixed, the namespaced ones in its namespace.
const (
	kueueNamespace      = "kueue-system"
	kueueNamePrefix     = "kueue-"
	kueueServiceAccount = kueueNamePrefix + "controller-manager"
	queueNameLabel      = "kueue.x-k8s.io/queue-name"
	// kueueNonroot is the user and group Kueue's image runs as.
	kueueNonroot = 65532
)

// The Kueue spec runs Kueue's released manager (at the version go.mod
// requires; `make kueue-manager` builds it) as its own process beside
// the operator, the way a deployed Kueue runs: its CRDs, its own RBAC and
// nothing more (the API server authorizes each of its requests as its
// ServiceAccount), its webhooks called by the API server, and a
// configuration naming IndexedBatchJob as an external framework. The
// in-process Kueue of test/integration/kueue has every permission and so
// cannot tell whether Kueue's install lacks any for the external kind.
var _ = Describe("Kueue's own manager", Label("kueue"), func() {
	var (
		ctx context.Context
		ns  string
	)
	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace(ctx)
	})

	It("admits two queued jobs one after the other within its ClusterQueue's quota, with its RBAC alone", func() {
		k := startKueue(ctx)

		By("creating a ResourceFlavor, a ClusterQueue with quota for one job and a LocalQueue")
		// Cluster-scoped names: the namespace's, which is unique.
		Expect(kueueClient.Create(ctx, &kueuev1beta2.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		Expect(kueueClient.Create(ctx, &kueuev1beta2.ClusterQueue{
			ObjectMeta: metav1.ObjectMeta{Name: ns},
			Spec: kueuev1beta2.ClusterQueueSpec{
				NamespaceSelector: &metav1.LabelSelector{},
				ResourceGroups: []kueuev1beta2.ResourceGroup{{
					CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
					Flavors: []kueuev1beta2.FlavorQuotas{{
						Name: kueuev1beta2.ResourceFlavorReference(ns),
						Resources: []kueuev1beta2.ResourceQuota{{
							Name: corev1.ResourceCPU, NominalQuota: resource.MustParse("2"),
						}},
					}},
				}},
			},
		})).To(Succeed())
		Expect(kueueClient.Create(ctx, &kueuev1beta2.LocalQueue{
			ObjectMeta: metav1.ObjectMeta{Name: "queue", Namespace: ns},
			Spec:       kueuev1beta2.LocalQueueSpec{ClusterQueue: kueuev1beta2.ClusterQueueReference(ns)},
		})).To(Succeed())
		Eventually(func(g Gomega) {
			cq := &kueuev1beta2.ClusterQueue{}
			g.Expect(kueueClient.Get(ctx, client.ObjectKey{Name: ns}, cq)).To(Succeed())
			g.Expect(apimeta.IsStatusConditionTrue(cq.Status.Conditions, kueuev1beta2.ClusterQueueActive)).To(BeTrue(), "ClusterQueue active")
		}, timeout, poll).Should(Succeed())

		// Two pods of one cpu each, at once: the quota (two cpus) holds one
		// job. The first job's pods run long enough to see the second wait.
		queued := func(name, duration string) *ibjv1.IndexedBatchJob {
			return harness.MakeIndexedBatchJob(name, ns).Completions(2).Parallelism(2).
				Label(queueNameLabel, "queue").
				Requests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}).
				PodAnnotation(kwokcluster.DurationAnnotation, duration).Obj()
		}

		By("creating the first job: created suspended, admitted by Kueue, started")
		first := queued("first", "6s")
		Expect(k8sClient.Create(ctx, first)).To(Succeed())
		Expect(ptr.Deref(first.Spec.Suspend, false)).To(BeTrue(), "the operator's webhook creates a queued job suspended")
		Eventually(func(g Gomega) {
			wl := workloadOfJob(g, ctx, ns, "first")
			g.Expect(wl).NotTo(BeNil(), "the first job's Workload")
			g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueuev1beta2.WorkloadQuotaReserved)).To(BeTrue(), "QuotaReserved")
			g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueuev1beta2.WorkloadAdmitted)).To(BeTrue(), "Admitted")
			g.Expect(wl.Status.Admission.ClusterQueue).To(Equal(kueuev1beta2.ClusterQueueReference(ns)))
			g.Expect(ptr.Deref(getJob(ctx, ns, "first").Spec.Suspend, true)).To(BeFalse(), "the first job unsuspended")
		}, timeout, poll).Should(Succeed())

		By("creating the second job: it waits, suspended, while the first holds the quota")
		second := queued("second", "1s")
		Expect(k8sClient.Create(ctx, second)).To(Succeed())
		Eventually(func(g Gomega) {
			wl := workloadOfJob(g, ctx, ns, "second")
			g.Expect(wl).NotTo(BeNil(), "the second job's Workload")
			reserved := apimeta.FindStatusCondition(wl.Status.Conditions, kueuev1beta2.WorkloadQuotaReserved)
			g.Expect(reserved).NotTo(BeNil(), "the scheduler tried the second Workload")
			g.Expect(reserved.Status).To(Equal(metav1.ConditionFalse))
			// The reason while the UnadmittedWorkloadsObservability gate is off,
			// as by default (the constant is deprecated for the gate's own).
			g.Expect(reserved.Reason).To(Equal("Pending"))
		}, timeout, poll).Should(Succeed())
		Expect(apimeta.IsStatusConditionTrue(getJob(ctx, ns, "first").Status.Conditions, ibjv1.ConditionComplete)).
			To(BeFalse(), "the first job still runs (else the pending state above proves nothing)")
		Expect(ptr.Deref(getJob(ctx, ns, "second").Spec.Suspend, false)).To(BeTrue())
		Expect(jobPods(ctx, ns, "second")).To(BeEmpty())

		By("the first job completes and its Workload finishes")
		expectCompleted(ctx, ns, "first")

		By("the second job is admitted once the quota is free, and completes")
		Eventually(func(g Gomega) {
			wl := workloadOfJob(g, ctx, ns, "second")
			g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueuev1beta2.WorkloadAdmitted)).To(BeTrue(), "Admitted")
		}, timeout, poll).Should(Succeed())
		expectCompleted(ctx, ns, "second")

		By("Kueue was never refused a request")
		Expect(k.log()).NotTo(ContainSubstring("forbidden"))
	})
})

// expectCompleted waits until the job is Complete with each of its two
// indexes run once, and its Workload Finished.
func expectCompleted(ctx context.Context, ns, name string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		j := getJob(ctx, ns, name)
		g.Expect(apimeta.IsStatusConditionTrue(j.Status.Conditions, ibjv1.ConditionComplete)).To(BeTrue(), "Complete")
	}, timeout, poll).Should(Succeed())
	j := getJob(ctx, ns, name)
	Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).To(Equal(ibjv1.ReasonCompletionsReached))
	Expect(j.Status.Phase).To(Equal(ibjv1.PhaseComplete))
	Expect(j.Status.Succeeded).To(Equal(int32(2)))
	Expect(j.Status.CompletedIndexes).To(Equal("0,1"))
	Expect(j.Status.Failed).To(BeZero())
	Expect(j.Status.Active).To(BeZero())
	Expect(j.Status.FailedIndexes).To(BeNil())
	Expect(jobPods(ctx, ns, name)).To(HaveLen(2))
	Eventually(func(g Gomega) {
		wl := workloadOfJob(g, ctx, ns, name)
		g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueuev1beta2.WorkloadFinished)).To(BeTrue(), "Workload Finished")
	}, timeout, poll).Should(Succeed())
}

// workloadOfJob is the Workload the operator's Kueue reconciler made for the
// job, or nil.
func workloadOfJob(g Gomega, ctx context.Context, ns, job string) *kueuev1beta2.Workload {
	j := &ibjv1.IndexedBatchJob{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: job}, j)).To(Succeed())
	var list kueuev1beta2.WorkloadList
	g.Expect(kueueClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	for i := range list.Items {
		for _, o := range list.Items[i].OwnerReferences {
			if o.UID == j.UID {
				return &list.Items[i]
			}
		}
	}
	return nil
}

// kueueClient is the admin's client with Kueue's API in its scheme, for the
// Kueue spec (the suite's scheme stays without it).
var kueueClient client.Client

// kueueManager is Kueue's manager running against the cluster.
type kueueManager struct {
	proc *kwokcluster.Process
}

// log is Kueue's log so far.
func (k *kueueManager) log() string {
	data, err := os.ReadFile(k.proc.LogPath)
	if err != nil {
		return err.Error()
	}
	return string(data)
}

// kueueManagerBinary is the manager `make kueue-manager` builds: the one
// IBJ_KUEUE_MANAGER names (make test-e2e sets it), else bin/'s for the
// version go.mod requires.
func kueueManagerBinary(version string) string {
	if bin := os.Getenv("IBJ_KUEUE_MANAGER"); bin != "" {
		return bin
	}
	return filepath.Join(root, "bin", "kueue-"+version, "kueue")
}

// startKueue installs Kueue (CRDs, RBAC, webhook configurations) under the
// running operator, starts Kueue's manager, and checks that the operator
// (--kueue=auto) started its Kueue integration in the same process: no
// restart, no exec. On cleanup it stops Kueue and removes its webhook
// configurations; its CRDs and RBAC stay.
func startKueue(ctx context.Context) *kueueManager {
	GinkgoHelper()
	version, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "sigs.k8s.io/kueue").Output()
	Expect(err).NotTo(HaveOccurred())
	bin := kueueManagerBinary(strings.TrimSpace(string(version)))
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("IBJ_E2E") == "" {
			Skip(fmt.Sprintf("Kueue's manager %s not built: `make kueue-manager` builds it", bin))
		}
		Fail(fmt.Sprintf("missing Kueue's manager %s: `make kueue-manager` builds it", bin))
	}
	if os.Geteuid() != 0 {
		Skip("running Kueue's manager chrooted takes root (see startKueue)")
	}
	module, err := inprocess.ModuleDir()
	Expect(err).NotTo(HaveOccurred())
	if kueueClient == nil {
		s := runtime.NewScheme()
		Expect(clientgoscheme.AddToScheme(s)).To(Succeed())
		Expect(ibjv1.AddToScheme(s)).To(Succeed())
		Expect(kueuev1beta2.AddToScheme(s)).To(Succeed())
		kueueClient, err = client.New(cluster.Config, client.Options{Scheme: s})
		Expect(err).NotTo(HaveOccurred())
	}

	By("installing Kueue's CRDs and its own RBAC under the running operator")
	pid := op.proc.Pid()
	_, err = envtest.InstallCRDs(cluster.Config, envtest.CRDInstallOptions{
		Paths: []string{inprocess.CRDDir(module)}, ErrorIfPathMissing: true,
	})
	Expect(err).NotTo(HaveOccurred())
	installKueueRBAC(ctx, filepath.Join(module, "config", "components", "rbac"))

	// Kueue's manager reads its metrics certificate from a fixed path,
	// /etc/kueue/metrics/certs, whenever its internal certificate management
	// is off, and exits without it. Rather than write into the host's /etc,
	// it runs as its image would: chrooted into a root of its own, holding
	// the (static) binary, that directory, its configuration, kubeconfig
	// and webhook certificate, as the image's nonroot user.
	kroot := filepath.Join(cluster.Dir, fmt.Sprintf("kueue-root-%d", time.Now().UnixNano()))
	for _, d := range []string{"etc/kueue/metrics/certs", "etc/kueue/webhook/certs", "tmp"} {
		Expect(os.MkdirAll(filepath.Join(kroot, d), 0o755)).To(Succeed())
	}
	Expect(os.Chmod(filepath.Join(kroot, "tmp"), 0o1777)).To(Succeed())
	Expect(copyFile(bin, filepath.Join(kroot, "kueue"), 0o755)).To(Succeed())
	caPEM, certPEM, keyPEM := kueueServingCert()
	for _, d := range []string{"etc/kueue/metrics/certs", "etc/kueue/webhook/certs"} {
		Expect(os.WriteFile(filepath.Join(kroot, d, "tls.crt"), certPEM, 0o644)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(kroot, d, "tls.key"), keyPEM, 0o600)).To(Succeed())
	}
	kubeconfig := filepath.Join(kroot, "etc", "kueue", "kubeconfig")
	Expect(writeKueueKubeconfig(kubeconfig)).To(Succeed())
	expectKueueIdentity(ctx, kubeconfig)
	health, err := cluster.FreePort()
	Expect(err).NotTo(HaveOccurred())
	webhook, err := cluster.FreePort()
	Expect(err).NotTo(HaveOccurred())
	config := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: %d
  certDir: /etc/kueue/webhook/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
integrations:
  # An empty list means Kueue's default, batch/job, which needs no CRD.
  frameworks: ["batch/job"]
  externalFrameworks: [%q]
`, kueueNamespace, health, webhook, ibjkueue.FrameworkName)
	Expect(os.WriteFile(filepath.Join(kroot, "etc", "kueue", "config.yaml"), []byte(config), 0o644)).To(Succeed())
	Expect(filepath.Walk(kroot, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, kueueNonroot, kueueNonroot)
	})).To(Succeed())

	By("starting Kueue's manager " + strings.TrimSpace(string(version)) + " as " + kueueServiceAccount)
	// VisibilityOnDemand would serve an aggregated API (an APIService and
	// a port of its own): not needed here.
	proc, err := kwokcluster.StartProcess("kueue", filepath.Join(cluster.Dir, "kueue.log"),
		[]string{"KUBECONFIG=/etc/kueue/kubeconfig"},
		"chroot", "--userspec="+strconv.Itoa(kueueNonroot)+":"+strconv.Itoa(kueueNonroot), "--groups=", kroot,
		"/kueue", "--config=/etc/kueue/config.yaml", "--feature-gates=VisibilityOnDemand=false")
	Expect(err).NotTo(HaveOccurred())
	k := &kueueManager{proc: proc}
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			AddReportEntry("Kueue's log", tail(k.log(), 200))
		}
		Expect(proc.Stop(30 * time.Second)).To(Succeed())
	})
	Eventually(func(g Gomega) {
		exited, err := proc.Exited()
		g.Expect(exited).To(BeFalse(), "Kueue's manager exited (%v):\n%s", err, tail(k.log(), 40))
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", health))
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	}, time.Minute, poll).Should(Succeed())

	By("installing Kueue's webhook configurations, calling https://127.0.0.1:" + strconv.Itoa(webhook))
	installKueueWebhooks(ctx, module, "https://127.0.0.1:"+strconv.Itoa(webhook), caPEM)

	By("the running operator starts its Kueue integration in the same process")
	Eventually(func() string { return op.logTail(400) }, timeout, poll).
		Should(ContainSubstring("Started the Kueue integration in this process"))
	exited, err := op.proc.Exited()
	Expect(exited).To(BeFalse(), "the operator exited (%v)", err)
	Expect(op.proc.Pid()).To(Equal(pid), "the same operator process")
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	Expect(err).NotTo(HaveOccurred())
	want, err := filepath.Abs(managerBin)
	Expect(err).NotTo(HaveOccurred())
	Expect(exe).To(Equal(want), "nothing was exec'd in its place")
	log, err := os.ReadFile(op.proc.LogPath)
	Expect(err).NotTo(HaveOccurred())
	Expect(strings.Count(string(log), "Starting manager")).To(Equal(1), "the operator's manager started once")
	return k
}

// kueueRBACFiles are the manager's RBAC among the RBAC manifests of Kueue's
// module, as its kustomization lists them: its ServiceAccount, the manager's
// ClusterRole, the Roles for leader election, its certificate Secret and
// MultiKueue's ClusterProfiles, the metrics endpoint's authorization, and
// their bindings. (The other roles there are for Kueue's users.)
var kueueRBACFiles = []string{
	"service_account.yaml",
	"role.yaml", "role_binding.yaml",
	"leader_election_role.yaml", "leader_election_role_binding.yaml",
	"manager_secrets_role.yaml", "manager_secrets_role_binding.yaml",
	"manager_clusterprofiles_role.yaml", "manager_clusterprofiles_role_binding.yaml",
	"metrics_auth_role.yaml", "metrics_auth_role_binding.yaml",
}

// installKueueRBAC creates what Kueue's kustomization makes of
// kueueRBACFiles in dir: every name prefixed, namespaced objects (and the
// bindings' ServiceAccount) in Kueue's namespace.
func installKueueRBAC(ctx context.Context, dir string) {
	GinkgoHelper()
	Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kueueNamespace}}))).To(Succeed())
	bind := func(ref *rbacv1.RoleRef, subjects []rbacv1.Subject) {
		ref.Name = kueueNamePrefix + ref.Name
		for i := range subjects {
			subjects[i].Name = kueueNamePrefix + subjects[i].Name
			subjects[i].Namespace = kueueNamespace
		}
	}
	for _, file := range kueueRBACFiles {
		raw, err := os.ReadFile(filepath.Join(dir, file))
		Expect(err).NotTo(HaveOccurred())
		var kind metav1.TypeMeta
		Expect(yaml.Unmarshal(raw, &kind)).To(Succeed(), file)
		var obj client.Object
		switch kind.Kind {
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "ClusterRole":
			obj = &rbacv1.ClusterRole{}
		case "Role":
			obj = &rbacv1.Role{}
		case "ClusterRoleBinding":
			obj = &rbacv1.ClusterRoleBinding{}
		case "RoleBinding":
			obj = &rbacv1.RoleBinding{}
		default:
			Fail(fmt.Sprintf("%s: unexpected kind %q", file, kind.Kind))
		}
		Expect(yaml.Unmarshal(raw, obj)).To(Succeed(), file)
		obj.SetName(kueueNamePrefix + obj.GetName())
		if obj.GetNamespace() != "" {
			obj.SetNamespace(kueueNamespace)
		}
		switch b := obj.(type) {
		case *rbacv1.ClusterRoleBinding:
			bind(&b.RoleRef, b.Subjects)
		case *rbacv1.RoleBinding:
			bind(&b.RoleRef, b.Subjects)
		}
		Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, obj))).To(Succeed(), file)
	}
}

// installKueueWebhooks creates Kueue's webhook configurations for its own
// API (inprocess.CoreWebhooks), calling base instead of Kueue's webhook
// Service, with the test's CA.
func installKueueWebhooks(ctx context.Context, module, base string, caPEM []byte) {
	GinkgoHelper()
	mutating, validating, err := inprocess.CoreWebhooks(module)
	Expect(err).NotTo(HaveOccurred())
	clientConfig := func(cc *admissionv1.WebhookClientConfig) {
		cc.URL = ptr.To(base + ptr.Deref(cc.Service.Path, "/"))
		cc.Service = nil
		cc.CABundle = caPEM
	}
	create := func(c client.Object) {
		c.SetName(kueueNamePrefix + c.GetName())
		Expect(k8sClient.Create(ctx, c)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, c))).To(Succeed()) })
	}
	for _, c := range mutating {
		for i := range c.Webhooks {
			clientConfig(&c.Webhooks[i].ClientConfig)
		}
		create(c)
	}
	for _, c := range validating {
		for i := range c.Webhooks {
			clientConfig(&c.Webhooks[i].ClientConfig)
		}
		create(c)
	}
}

// writeKueueKubeconfig writes a kubeconfig that reaches the cluster with the
// admin's token but impersonates Kueue's ServiceAccount (and the groups a
// ServiceAccount's token carries), so that the API server authorizes each
// of Kueue's requests with Kueue's RBAC alone.
func writeKueueKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kwok"] = &clientcmdapi.Cluster{Server: cluster.Config.Host, CertificateAuthorityData: cluster.Config.CAData}
	cfg.AuthInfos["kueue"] = &clientcmdapi.AuthInfo{
		Token:       cluster.Config.BearerToken,
		Impersonate: "system:serviceaccount:" + kueueNamespace + ":" + kueueServiceAccount,
		ImpersonateGroups: []string{
			"system:serviceaccounts", "system:serviceaccounts:" + kueueNamespace, "system:authenticated",
		},
	}
	cfg.Contexts["kwok"] = &clientcmdapi.Context{Cluster: "kwok", AuthInfo: "kueue"}
	cfg.CurrentContext = "kwok"
	return clientcmd.WriteToFile(*cfg, path)
}

// expectKueueIdentity checks what the API server makes of a request sent
// with Kueue's kubeconfig: Kueue's ServiceAccount, not the admin, with no
// right on IndexedBatchJobs (Kueue's ClusterRole grants none).
func expectKueueIdentity(ctx context.Context, kubeconfig string) {
	GinkgoHelper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	cs, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	Expect(review.Status.UserInfo.Username).To(Equal("system:serviceaccount:" + kueueNamespace + ":" + kueueServiceAccount))
	Expect(review.Status.UserInfo.Groups).NotTo(ContainElement("system:masters"))
	access, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: "get", Group: ibjv1.GroupVersion.Group, Resource: "indexedbatchjobs",
		}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	Expect(access.Status.Allowed).To(BeFalse(), "Kueue's ServiceAccount may read IndexedBatchJobs")
}

// kueueServingCert generates a throwaway CA and a serving certificate it
// signed for 127.0.0.1 and localhost, all PEM.
func kueueServingCert() (caPEM, certPEM, keyPEM []byte) {
	GinkgoHelper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kueue-e2e-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	Expect(err).NotTo(HaveOccurred())
	ca, err := x509.ParseCertificate(caDER)
	Expect(err).NotTo(HaveOccurred())
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kueue-webhook"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	Expect(err).NotTo(HaveOccurred())
	keyDER, err := x509.MarshalECPrivateKey(key)
	Expect(err).NotTo(HaveOccurred())
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// copyFile copies src to dst with mode.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
