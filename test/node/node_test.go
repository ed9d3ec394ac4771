package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/nodecluster"
)

// seedSpec is the seed's per-index example: four indexes, one retry each,
// indexes 1 and 2 exiting with 1 every time.
var seedSpec = `    completions: 4
    parallelism: 4
    backoffLimitPerIndex: 1
` + workerTemplate("--duration=2s", "--fail-indexes=1,2", "--exit-code=1")

// jobTimeout bounds a job's run on the node: seconds of work, the
// controllers' backoffs and the kubelet's container starts.
const jobTimeout = 3 * time.Minute

var _ = Describe("IndexedBatchJob on a real node", Label("node"), func() {
	It("runs the seed's per-index example as the built-in Job does: indexes 1 and 2 fail twice with exit code 1", func(ctx SpecContext) {
		ns := recordedNamespace(ctx)
		createBoth(ns, "seed", seedSpec)
		ibj, job := waitBoth(ctx, ns, "seed", jobTimeout)
		report(ns, "seed", ibj, job)

		want := outcome{Succeeded: 2, Failed: 4, CompletedIndexes: "0,3", FailedIndexes: "1,2",
			Conditions: failedConditions("FailedIndexes")}
		Expect(ibj).To(Equal(want))
		Expect(job).To(Equal(ibj), "the built-in Job controller's status on the same node")
		codes := map[int][]int32{0: {0}, 1: {1, 1}, 2: {1, 1}, 3: {0}}
		Expect(exitCodes(podsOf(ibjKind, ns, "seed"))).To(Equal(codes))
		Expect(exitCodes(podsOf(jobKind, ns, "seed"))).To(Equal(codes))

		By("kubectl logs of an index's pods")
		for _, p := range podsOf(ibjKind, ns, "seed") {
			logs := kc.Must("-n", ns, "logs", p.Name)
			Expect(logs).To(ContainSubstring(fmt.Sprintf("index %d: exiting with %d", p.Index, p.ExitCode)), "kubectl logs %s", p.Name)
		}
	})

	It("fails the job at once on exit code 42 by a FailJob rule, and the kubelet kills the other indexes", func(ctx SpecContext) {
		ns := recordedNamespace(ctx)
		createBoth(ns, "failjob", `    completions: 3
    parallelism: 3
    backoffLimit: 6
    podFailurePolicy:
      rules:
      - action: FailJob
        onExitCodes:
          containerName: main
          operator: In
          values: [42]
`+workerTemplate("--duration=10m", "--fail-indexes=1", "--exit-code=42", "--fail-after=3s"))
		ibj, job := waitBoth(ctx, ns, "failjob", jobTimeout)
		report(ns, "failjob", ibj, job)

		Expect(ibj).To(Equal(outcome{Failed: 3, Conditions: failedConditions("PodFailurePolicy")}))
		Expect(job).To(Equal(ibj), "the built-in Job controller's status on the same node")
		// Index 1 exited with 42; the others were running and ended on
		// the SIGTERM of their deletion.
		codes := map[int][]int32{0: {143}, 1: {42}, 2: {143}}
		Expect(exitCodes(podsOf(ibjKind, ns, "failjob"))).To(Equal(codes))
		Expect(exitCodes(podsOf(jobKind, ns, "failjob"))).To(Equal(codes))
	})

	It("with podReplacementPolicy Failed, counts a pod terminating for 10s after SIGTERM and replaces it only once the kubelet has it Failed", func(ctx SpecContext) {
		ns := recordedNamespace(ctx)
		createBoth(ns, "replace", `    completions: 1
    parallelism: 1
    backoffLimit: 3
    podReplacementPolicy: Failed
`+workerTemplate("--duration=1h", "--term-delay=10s"))
		// The pods by UID: the operator names an index's next pod after
		// its attempt, which starts again at 0 once the deleted pod is
		// gone.
		first := map[string]types.UID{}
		names := map[string]string{}
		for _, kind := range []string{ibjKind, jobKind} {
			names[kind] = runningPod(ctx, kind, ns, "replace")
			pod, err := clientset.CoreV1().Pods(ns).Get(ctx, names[kind], metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			first[kind] = pod.UID
		}
		deleted := time.Now()
		for _, kind := range []string{ibjKind, jobKind} {
			uid := first[kind]
			Expect(clientset.CoreV1().Pods(ns).Delete(ctx, names[kind], metav1.DeleteOptions{
				Preconditions: &metav1.Preconditions{UID: &uid},
			})).To(Succeed())
		}

		By("the deleted pods are counted as terminating, and nothing replaces them while the kubelet runs them")
		failedAt := map[string]time.Duration{}
		replacedAt := map[string]time.Duration{}
		sawTerminating := map[string]bool{}
		Eventually(func(g Gomega) {
			for _, kind := range []string{ibjKind, jobKind} {
				if _, done := replacedAt[kind]; done {
					continue
				}
				o, err := getOutcome(ctx, kind, ns, "replace")
				g.Expect(err).NotTo(HaveOccurred())
				pods, err := clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: jobNameLabel[kind] + "=replace"})
				g.Expect(err).NotTo(HaveOccurred())
				var old *corev1.Pod
				others := 0
				for i := range pods.Items {
					if pods.Items[i].UID == first[kind] {
						old = &pods.Items[i]
					} else {
						others++
					}
				}
				oldFailed := old == nil || old.Status.Phase == corev1.PodFailed
				if oldFailed {
					if _, seen := failedAt[kind]; !seen {
						failedAt[kind] = time.Since(deleted)
					}
				} else if o.Terminating == 1 {
					sawTerminating[kind] = true
				}
				if others > 0 {
					// The replacement may exist only once the
					// kubelet has reported the old pod Failed.
					Expect(oldFailed).To(BeTrue(), "%s: a second pod for index 0 while %s has not failed", kind, names[kind])
					replacedAt[kind] = time.Since(deleted)
				}
			}
			g.Expect(replacedAt).To(HaveLen(2))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
		for _, kind := range []string{ibjKind, jobKind} {
			AddReportEntry(kind+" replacement", fmt.Sprintf("old pod Failed %.1fs after its delete, replaced %.1fs after", failedAt[kind].Seconds(), replacedAt[kind].Seconds()))
			Expect(sawTerminating[kind]).To(BeTrue(), "%s: status.terminating was never 1 while the pod ran after SIGTERM", kind)
			// The worker waits 10s after SIGTERM: the kubelet keeps the
			// pod running that long.
			Expect(failedAt[kind]).To(BeNumerically(">=", 9*time.Second), kind)
			// The replacement waits out the job-wide backoff (10s from
			// the pod's end), although the failed pod is gone from the
			// API server by then.
			Expect(replacedAt[kind]-failedAt[kind]).To(BeNumerically(">=", 8*time.Second), kind)
		}
		By("the replacement is the index's next attempt, named past the gone pod")
		Expect(podsOf(ibjKind, ns, "replace")).To(ContainElement(HaveField("Name", "replace-0-1")))
		for _, kind := range []string{ibjKind, jobKind} {
			pods := podsOf(kind, ns, "replace")
			Expect(pods[0].ExitCode).To(Equal(int32(143)), "%s: %v", kind, pods)
		}

		By("both count one failure and one active pod")
		Eventually(func(g Gomega) {
			ibj, err := getOutcome(ctx, ibjKind, ns, "replace")
			g.Expect(err).NotTo(HaveOccurred())
			job, err := getOutcome(ctx, jobKind, ns, "replace")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ibj).To(Equal(outcome{Active: 1, Ready: 1, Failed: 1}))
			g.Expect(job).To(Equal(ibj))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	})

	It("ignores a pod evicted through the Eviction API by an Ignore rule on DisruptionTarget, with backoffLimit 0", func(ctx SpecContext) {
		ns := recordedNamespace(ctx)
		createBoth(ns, "evict", `    completions: 2
    parallelism: 2
    backoffLimit: 0
    podFailurePolicy:
      rules:
      - action: Ignore
        onPodConditions:
        - type: DisruptionTarget
`+workerTemplate("--duration=20s"))
		for _, kind := range []string{ibjKind, jobKind} {
			pod := runningPod(ctx, kind, ns, "evict")
			Expect(clientset.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{
				ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns},
			})).To(Succeed())
		}
		ibj, job := waitBoth(ctx, ns, "evict", jobTimeout)
		report(ns, "evict", ibj, job)

		Expect(ibj.Succeeded).To(Equal(int64(2)))
		Expect(ibj.Failed).To(BeZero(), "an ignored failure is not counted")
		Expect(ibj.Conditions).To(ContainElement("Complete/CompletionsReached"))
		Expect(job).To(Equal(ibj), "the built-in Job controller's status on the same node")
		for _, kind := range []string{ibjKind, jobKind} {
			evicted := 0
			for _, p := range podsOf(kind, ns, "evict") {
				if p.Disruption != "" {
					evicted++
					Expect(p.Disruption).To(Equal("EvictionByEvictionAPI"), kind)
					Expect(p.Phase).To(Equal(corev1.PodFailed), kind)
					Expect(p.ExitCode).To(Equal(int32(143)), kind)
				}
			}
			Expect(evicted).To(Equal(1), kind)
		}
	})

	It("fails an index whose container the kernel killed for memory (OOMKilled, exit code 137) by a FailIndex rule", func(ctx SpecContext) {
		ns := recordedNamespace(ctx)
		createBoth(ns, "oom", `    completions: 2
    parallelism: 2
    backoffLimitPerIndex: 2
    podFailurePolicy:
      rules:
      - action: FailIndex
        onExitCodes:
          containerName: main
          operator: In
          values: [137]
`+workerTemplateWith(`          resources:
            limits:
              memory: 64Mi
`, "--duration=3s", "--alloc-mib=256", "--alloc-indexes=1"))
		ibj, job := waitBoth(ctx, ns, "oom", jobTimeout)
		report(ns, "oom", ibj, job)

		Expect(ibj).To(Equal(outcome{Succeeded: 1, Failed: 1, CompletedIndexes: "0", FailedIndexes: "1",
			Conditions: failedConditions("FailedIndexes")}))
		Expect(job).To(Equal(ibj), "the built-in Job controller's status on the same node")
		for _, kind := range []string{ibjKind, jobKind} {
			pods := podsOf(kind, ns, "oom")
			Expect(pods).To(HaveLen(2), kind)
			Expect(pods[1].ExitCode).To(Equal(int32(137)), "%s: %v", kind, pods)
			Expect(pods[1].Reason).To(Equal("OOMKilled"), "%s: %v", kind, pods)
		}
	})

	It("kills running containers at activeDeadlineSeconds", func(ctx SpecContext) {
		ns := recordedNamespace(ctx)
		createBoth(ns, "deadline", `    completions: 2
    parallelism: 2
    activeDeadlineSeconds: 10
`+workerTemplate("--duration=1h"))
		ibj, job := waitBoth(ctx, ns, "deadline", jobTimeout)
		report(ns, "deadline", ibj, job)

		Expect(ibj).To(Equal(outcome{Failed: 2, Conditions: failedConditions("DeadlineExceeded")}))
		Expect(job).To(Equal(ibj), "the built-in Job controller's status on the same node")
		codes := map[int][]int32{0: {143}, 1: {143}}
		Expect(exitCodes(podsOf(ibjKind, ns, "deadline"))).To(Equal(codes))
		Expect(exitCodes(podsOf(jobKind, ns, "deadline"))).To(Equal(codes))
	})

	It("is installed as users install it: a nonroot pod of its own image under restricted Pod Security, its webhook called through its Service, its metrics scraped through theirs with a token", func(ctx SpecContext) {
		By("the manager runs from the imported image, as nonroot, in a namespace enforcing restricted")
		pods, err := clientset.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "control-plane=controller-manager"})
		Expect(err).NotTo(HaveOccurred())
		Expect(pods.Items).To(HaveLen(1))
		manager := pods.Items[0]
		Expect(manager.Status.Phase).To(Equal(corev1.PodRunning))
		Expect(manager.Spec.Containers[0].Image).To(Equal("indexed-batch-job:" + nodecluster.ManagerVersion))
		Expect(manager.Status.ContainerStatuses[0].ImageID).NotTo(BeEmpty())
		Expect(manager.Spec.ServiceAccountName).To(Equal("indexed-batch-job-controller-manager"))
		operatorNS, err := clientset.CoreV1().Namespaces().Get(ctx, operatorNamespace, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(operatorNS.Labels).To(HaveKeyWithValue("pod-security.kubernetes.io/enforce", "restricted"))
		out, err := kc.RunWithStdin(`apiVersion: v1
kind: Pod
metadata:
  name: privileged
spec:
  containers:
  - name: main
    image: `+nodecluster.WorkerImage+`
    securityContext:
      privileged: true
`, "-n", operatorNamespace, "create", "-f", "-")
		Expect(err).To(HaveOccurred(), "restricted Pod Security admitted a privileged pod: %s", out)
		Expect(out).To(ContainSubstring("violates PodSecurity"))

		By("the API server calls the webhook through its Service, which refuses a reserved label in the template")
		ns := recordedNamespace(ctx)
		rejectedBefore := webhookRejections(ctx)
		out, err = kc.RunWithStdin(jobManifest(ibjKind, "reserved", ns, `    completions: 1
    template:
      metadata:
        labels:
          batch.indexedjob.dev/completion-index: "7"
      spec:
        restartPolicy: Never
        containers:
        - name: main
          image: `+nodecluster.WorkerImage+`
`), "create", "-f", "-")
		Expect(err).To(HaveOccurred(), "a reserved label was admitted: %s", out)
		Expect(out).To(ContainSubstring("spec.template.metadata.labels[batch.indexedjob.dev/completion-index]: Forbidden: is reserved"))
		Expect(webhookRejections(ctx)).To(Equal(rejectedBefore+1), "kube-apiserver counts the refusal as the validating webhook's")

		By("a pod scrapes the metrics Service with its service account token, from another node than the manager's")
		svc, err := clientset.CoreV1().Services(operatorNamespace).Get(ctx, "indexed-batch-job-controller-manager-metrics-service", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		url := fmt.Sprintf("https://%s:8443/metrics", svc.Spec.ClusterIP)
		// Across nodes: the Service's endpoint is the manager's pod, on
		// another node's pod range, routed between the nodes.
		override := `{"spec":{"serviceAccountName":%q}}`
		if len(cluster.Nodes) > 1 {
			other := cluster.Nodes[nodeWithoutOperator(ctx)]
			Expect(other).NotTo(Equal(manager.Spec.NodeName))
			override = `{"spec":{"serviceAccountName":%q,"nodeName":"` + other + `"}}`
		}
		kc.Must("-n", ns, "create", "serviceaccount", "scraper")
		kc.Must("create", "clusterrolebinding", ns+"-scraper", "--clusterrole=indexed-batch-job-metrics-reader", "--serviceaccount="+ns+":scraper")
		DeferCleanup(func() { _, _ = kc.Run("delete", "clusterrolebinding", ns+"-scraper") })
		scrape := func(name, account string) (corev1.PodPhase, string) {
			GinkgoHelper()
			kc.Must("-n", ns, "run", name, "--image="+nodecluster.WorkerImage, "--restart=Never",
				"--overrides", fmt.Sprintf(override, account), "--", "scrape", url)
			var phase corev1.PodPhase
			Eventually(func() bool {
				pod, err := clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false
				}
				phase = pod.Status.Phase
				return phase == corev1.PodSucceeded || phase == corev1.PodFailed
			}).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue())
			return phase, kc.Must("-n", ns, "logs", name)
		}
		phase, logs := scrape("scrape", "scraper")
		Expect(phase).To(Equal(corev1.PodSucceeded), logs)
		Expect(logs).To(HavePrefix("status 200"))
		Expect(logs).To(ContainSubstring("indexedbatchjob_"))
		AddReportEntry("metrics scrape", strings.Join(strings.SplitN(logs, "\n", 3)[:2], "\n"))

		phase, logs = scrape("scrape-unbound", "default")
		Expect(phase).To(Equal(corev1.PodFailed), logs)
		Expect(logs).To(HavePrefix("status 403"))
	})

	// Last, as it replaces the kubectl install: specs run in the order
	// written within this container.
	It("is installed with helm install of the chart, and runs the seed example the same", func(ctx SpecContext) {
		helm := os.Getenv("IBJ_HELM")
		if helm == "" {
			Fail("IBJ_HELM names no helm binary: `make test-node` builds it")
		}
		By("removing the kubectl install (and with its CRD, every IndexedBatchJob)")
		kc.Must("delete", "-f", filepath.Join(imagesDir, "install.yaml"), "--wait=true", "--timeout=3m")

		By("helm install of charts/indexed-batch-job with the imported image")
		kc.Must("create", "namespace", "ibj-helm")
		kc.Must("label", "namespace", "ibj-helm", "pod-security.kubernetes.io/enforce=restricted")
		install := exec.CommandContext(ctx, helm, "install", "ibj", filepath.Join(root, "charts", "indexed-batch-job"),
			"--kubeconfig", cluster.Kubeconfig, "--namespace", "ibj-helm",
			"--set", "image.tag="+nodecluster.ManagerVersion, "--wait", "--timeout", "3m")
		out, err := install.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "helm install:\n%s", out)
		ns := recordedNamespace(ctx)
		// The webhook serves once the operator has issued its certificate.
		Eventually(func() error {
			out, err := kc.RunWithStdin(jobManifest(ibjKind, "seed", ns, seedSpec), "create", "-f", "-")
			if err != nil {
				return fmt.Errorf("%w: %s", err, out)
			}
			return nil
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		Eventually(func(g Gomega) {
			o, err := getOutcome(ctx, ibjKind, ns, "seed")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(o).To(Equal(outcome{Succeeded: 2, Failed: 4, CompletedIndexes: "0,3", FailedIndexes: "1,2",
				Conditions: failedConditions("FailedIndexes")}))
		}).WithContext(ctx).WithTimeout(jobTimeout).WithPolling(time.Second).Should(Succeed())
		pods, err := clientset.CoreV1().Pods("ibj-helm").List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(pods.Items).To(HaveLen(1))
		Expect(pods.Items[0].Spec.Containers[0].Image).To(Equal("indexed-batch-job:" + nodecluster.ManagerVersion))
	})
})

// webhookRejections is how many requests kube-apiserver says the
// operator's validating webhook refused.
func webhookRejections(ctx context.Context) float64 {
	GinkgoHelper()
	body, err := clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred())
	n, err := harness.SumSeries(bytes.NewReader(body), "apiserver_admission_webhook_rejection_count", `name="vindexedbatchjob-v1alpha1.kb.io"`)
	Expect(err).NotTo(HaveOccurred())
	return n
}

// runningPod waits for the job's one pod, or its index 0's, to run, and
// returns its name.
func runningPod(ctx context.Context, kind, namespace, name string) string {
	GinkgoHelper()
	var pod string
	Eventually(func(g Gomega) {
		list, err := clientset.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
			LabelSelector: jobNameLabel[kind] + "=" + name + "," + indexLabel[kind] + "=0",
		})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(list.Items).To(HaveLen(1))
		p := list.Items[0]
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(p.Status.ContainerStatuses).NotTo(BeEmpty())
		g.Expect(p.Status.ContainerStatuses[0].State.Running).NotTo(BeNil())
		pod = p.Name
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
	return pod
}
