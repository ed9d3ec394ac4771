package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kueuecluster"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

// queueNameLabel is the label naming a job's LocalQueue.
const queueNameLabel = "kueue.x-k8s.io/queue-name"

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
		createQueue(ctx, ns, "2")

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

// createQueue creates a ResourceFlavor and a ClusterQueue named ns, with
// cpu of nominal quota, and ns's LocalQueue "queue" for it, and waits for
// the ClusterQueue to be Active.
func createQueue(ctx context.Context, ns, cpu string) {
	GinkgoHelper()
	testutil.CreateQueue(ctx, kueueClient, testutil.Queue{
		Name: ns, CPU: resource.MustParse(cpu),
		LocalQueue: &client.ObjectKey{Namespace: ns, Name: "queue"},
	}, timeout)
}

// expectCompleted waits until the job is Complete with each of its two
// indexes run once, and its Workload Finished.
func expectCompleted(ctx context.Context, ns, name string) {
	GinkgoHelper()
	testutil.WaitForJobCondition(ctx, k8sClient, ns, name, ibjv1.ConditionComplete, timeout)
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
	*kueuecluster.Manager
}

// log is Kueue's log so far.
func (k *kueueManager) log() string { return k.Log() }

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
// running operator and starts Kueue's manager (kueuecluster.Install), with
// config added to its Configuration, and checks that the operator
// (--kueue=auto) started its Kueue integration in the same process: no
// restart, no exec. On cleanup it stops Kueue and removes its webhook
// configurations; its CRDs and RBAC stay.
func startKueue(ctx context.Context, config ...string) *kueueManager {
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
		Skip("running Kueue's manager chrooted takes root (see kueuecluster.Install)")
	}
	if kueueClient == nil {
		s := runtime.NewScheme()
		Expect(clientgoscheme.AddToScheme(s)).To(Succeed())
		Expect(ibjv1.AddToScheme(s)).To(Succeed())
		Expect(kueuev1beta2.AddToScheme(s)).To(Succeed())
		kueueClient, err = client.New(cluster.Config, client.Options{Scheme: s})
		Expect(err).NotTo(HaveOccurred())
	}

	By("installing Kueue " + strings.TrimSpace(string(version)) + " under the running operator: its CRDs, its own RBAC, its webhooks, its manager as " + kueuecluster.ServiceAccount)
	pid := op.proc.Pid()
	m, err := kueuecluster.Install(ctx, cluster, kueuecluster.Options{Binary: bin, Config: strings.Join(config, "")})
	Expect(err).NotTo(HaveOccurred())
	k := &kueueManager{m}
	DeferCleanup(func(ctx SpecContext) {
		if CurrentSpecReport().Failed() {
			AddReportEntry("Kueue's log", tail(k.log(), 200))
		}
		Expect(m.Stop(ctx)).To(Succeed())
	})
	expectKueueIdentity(ctx, m.Kubeconfig)

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
	Expect(review.Status.UserInfo.Username).To(Equal("system:serviceaccount:" + kueuecluster.Namespace + ":" + kueuecluster.ServiceAccount))
	Expect(review.Status.UserInfo.Groups).NotTo(ContainElement("system:masters"))
	access, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: "get", Group: ibjv1.GroupVersion.Group, Resource: "indexedbatchjobs",
		}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	Expect(access.Status.Allowed).To(BeFalse(), "Kueue's ServiceAccount may read IndexedBatchJobs")
}
