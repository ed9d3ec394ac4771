package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
)

var _ = Describe("IndexedBatchJob on a cluster", func() {
	var (
		ctx context.Context
		ns  string
	)
	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace(ctx)
	})

	It("runs the seed's per-index example from config/samples to its exact final status", Label("seed"), func() {
		const job = "per-index"
		w := watchPods(ns, job)
		kc.Must("apply", "-n", ns, "-f", "config/samples/batch_v1alpha1_indexedbatchjob.yaml")

		By("waiting with kubectl wait, as a user would")
		out := kc.Must("wait", "-n", ns, "--for=condition=Failed", "ibj/"+job, "--timeout=120s")
		Expect(out).To(ContainSubstring("condition met"))

		j := getJob(ctx, ns, job)
		Expect(harness.ConditionReason(j, ibjv1.ConditionFailureTarget)).To(Equal(ibjv1.ReasonFailedIndexes))
		Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonFailedIndexes))
		Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).To(BeEmpty())
		Expect(j.Status.Phase).To(Equal(ibjv1.PhaseFailed))
		Expect(j.Status.CompletedIndexes).To(Equal("0,3-7"))
		Expect(j.Status.FailedIndexes).To(Equal(ptr.To("1,2")))
		Expect(j.Status.Succeeded).To(Equal(int32(6)))
		Expect(j.Status.Failed).To(Equal(int32(4)))
		Expect(j.Status.Active).To(BeZero())
		Expect(deref(j.Status.Terminating)).To(BeZero())
		Expect(j.Status.UncountedTerminatedPods).To(BeNil())

		By("running each failing index exactly twice and every other index once")
		for ix := range 8 {
			want := 1
			if ix == 1 || ix == 2 {
				want = 2
			}
			Expect(w.RunsOf(ix)).To(Equal(want), "pods of index %d", ix)
			Expect(podsOfIndex(ctx, ns, job, ix)).To(HaveLen(want), "pods of index %d left", ix)
		}
		Eventually(func() []string {
			var held []string
			for _, p := range jobPods(ctx, ns, job) {
				if hasTrackingFinalizer(&p) {
					held = append(held, p.Name)
				}
			}
			return held
		}, 20*time.Second, poll).Should(BeEmpty(), "tracking finalizers left")

		By("showing it in kubectl get indexedbatchjobs")
		for _, resource := range []string{"indexedbatchjobs", "ibj"} {
			lines := strings.Split(strings.TrimSpace(kc.Must("get", resource, "-n", ns)), "\n")
			Expect(lines).To(HaveLen(2))
			Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "STATUS", "REASON", "SUCCEEDED", "COMPLETIONS", "ACTIVE", "FAILED-INDEXES", "STARTED", "AGE"}))
			Expect(strings.Fields(lines[1])[:7]).To(Equal([]string{job, string(ibjv1.PhaseFailed), ibjv1.ReasonFailedIndexes, "6", "8", "0", "1,2"}))
		}
		wide := strings.Split(strings.TrimSpace(kc.Must("get", "ibj", job, "-n", ns, "-o", "wide")), "\n")
		Expect(strings.Fields(wide[0])).To(ContainElements("FINISHED", "COMPLETED-INDEXES"))
		Expect(strings.Fields(wide[1])).To(ContainElement("0,3-7"))

		By("telling the story in kubectl describe's events")
		Eventually(func() string {
			out, _ := kc.Run("describe", "ibj", job, "-n", ns)
			return out
		}, 20*time.Second, time.Second).Should(SatisfyAll(
			ContainSubstring("Events:"),
			MatchRegexp(`Normal\s+SuccessfulCreate\s+.*indexedbatchjob-controller\s+Created \d+ pod\(s\)`),
			MatchRegexp(`Warning\s+FailedIndexes\s+`),
		))
	})

	It("reruns only the failed indexes of the seed example with spec.indexes, as docs/api.md shows", func() {
		kc.Must("apply", "-n", ns, "-f", "config/samples/batch_v1alpha1_indexedbatchjob.yaml")
		kc.Must("wait", "-n", ns, "--for=condition=Failed", "ibj/per-index", "--timeout=120s")

		By("creating the rerun with the kubectl | jq | kubectl pipeline of docs/api.md")
		w := watchPods(ns, "per-index-rerun")
		script := `kubectl() { "$KUBECTL" --kubeconfig "$KUBECONFIG" -n "$NS" "$@"; }
kubectl get ibj per-index -o json \
  | jq '{apiVersion, kind, metadata: {name: (.metadata.name + "-rerun")},
         spec: (.spec + {indexes: .status.failedIndexes})}' \
  | kubectl create -f -`
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = append(os.Environ(), "KUBECTL="+filepath.Join(controlplane.BinDir(root), "kubectl"),
			"KUBECONFIG="+cluster.Kubeconfig, "NS="+ns)
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "%s", out)

		// The sample's fake-kubelet annotations still fail indexes 1 and 2:
		// the rerun fails them again, and runs nothing else.
		kc.Must("wait", "-n", ns, "--for=condition=Failed", "ibj/per-index-rerun", "--timeout=120s")
		j := getJob(ctx, ns, "per-index-rerun")
		Expect(j.Spec.Indexes).To(Equal(ptr.To("1,2")))
		Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonFailedIndexes))
		Expect(j.Status.FailedIndexes).To(Equal(ptr.To("1,2")))
		Expect(j.Status.CompletedIndexes).To(BeEmpty())
		Expect(j.Status.Failed).To(Equal(int32(4)))
		for ix := range 8 {
			want := 0
			if ix == 1 || ix == 2 {
				want = 2
			}
			Expect(w.RunsOf(ix)).To(Equal(want), "pods of index %d", ix)
		}
		for _, p := range jobPods(ctx, ns, "per-index-rerun") {
			Expect(p.Spec.Hostname).To(Equal("per-index-rerun-" + p.Labels[ibjv1.CompletionIndexLabel]))
		}
	})

	It("completes a job that kubectl wait --for=condition=Complete waits for", func() {
		job := harness.MakeIndexedBatchJob("all-succeed", ns).Completions(4).Parallelism(2).
			PodAnnotation(kwokcluster.DurationAnnotation, "1s").Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		out := kc.Must("wait", "-n", ns, "--for=condition=Complete", "ibj/"+job.Name, "--timeout=60s")
		Expect(out).To(ContainSubstring("condition met"))
		j := getJob(ctx, ns, job.Name)
		Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).To(Equal(ibjv1.ReasonCompletionsReached))
		Expect(j.Status.CompletedIndexes).To(Equal("0-3"))
		Expect(j.Status.Succeeded).To(Equal(int32(4)))
		Expect(j.Status.Failed).To(BeZero())
		Expect(j.Status.Phase).To(Equal(ibjv1.PhaseComplete))
	})

	Context("with podReplacementPolicy", func() {
		runningPodOfIndex0 := func(job string) corev1.Pod {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				j := getJob(ctx, ns, job)
				g.Expect(j.Status.Active).To(Equal(int32(2)))
				g.Expect(deref(j.Status.Ready)).To(Equal(int32(2)))
			}, timeout, poll).Should(Succeed())
			pods := podsOfIndex(ctx, ns, job, 0)
			Expect(pods).To(HaveLen(1))
			return pods[0]
		}

		It("Failed: runs the seed's example from config/samples, replacing a deleted pod only once it has failed", func() {
			// Two workers that run 60s; a deleted one takes 10s to stop.
			const job = "replacement-failed"
			w := watchPods(ns, job)
			kc.Must("apply", "-n", ns, "-f", "config/samples/batch_v1alpha1_indexedbatchjob_replacement_failed.yaml")
			victim := runningPodOfIndex0(job)

			kc.Must("delete", "pod", victim.Name, "-n", ns, "--wait=false")
			Eventually(func() int32 { return deref(getJob(ctx, ns, job).Status.Terminating) }, 10*time.Second, poll).
				Should(Equal(int32(1)))
			By("not replacing it while it terminates")
			Consistently(func(g Gomega) {
				pods := podsOfIndex(ctx, ns, job, 0)
				g.Expect(pods).To(HaveLen(1))
				g.Expect(pods[0].UID).To(Equal(victim.UID))
				if !finished(&pods[0]) {
					g.Expect(deref(getJob(ctx, ns, job).Status.Terminating)).To(Equal(int32(1)))
				}
			}, 4*time.Second, poll).Should(Succeed())

			By("replacing it once it has failed")
			Eventually(func(g Gomega) {
				pods := podsOfIndex(ctx, ns, job, 0)
				g.Expect(pods).To(HaveLen(1))
				g.Expect(pods[0].UID).NotTo(Equal(victim.UID), "the deleted pod is gone and replaced")
				g.Expect(pods[0].Status.Phase).To(Equal(corev1.PodRunning))
				j := getJob(ctx, ns, job)
				g.Expect(deref(j.Status.Terminating)).To(BeZero())
				g.Expect(j.Status.Active).To(Equal(int32(2)))
				g.Expect(j.Status.Failed).To(Equal(int32(1)))
			}, timeout, poll).Should(Succeed())
			Expect(w.Doubles()).To(BeEmpty(), "two pods of one index ran at once")
		})

		It("TerminatingOrFailed: replaces a deleted pod at once, while it still terminates", func() {
			// Two pods that run until deleted and take 10s to stop.
			job := harness.MakeIndexedBatchJob("replace-terminating", ns).Completions(2).Parallelism(2).
				PodReplacementPolicy(batchv1.TerminatingOrFailed).
				PodAnnotation(kwokcluster.DurationAnnotation, kwokcluster.Forever).
				PodAnnotation(kwokcluster.ShutdownDurationAnnotation, "10s").Obj()
			Expect(k8sClient.Create(ctx, job)).To(Succeed())
			victim := runningPodOfIndex0(job.Name)

			kc.Must("delete", "pod", victim.Name, "-n", ns, "--wait=false")
			// The deleted pod counts as failed at once, so its replacement waits
			// the 1s backoff, counted from the deletion: not from the pod's
			// deletionTimestamp, which is the deletion plus the 30s grace period.
			Eventually(func(g Gomega) {
				pods := podsOfIndex(ctx, ns, job.Name, 0)
				g.Expect(pods).To(HaveLen(2))
				var old, replacement corev1.Pod
				for _, p := range pods {
					if p.UID == victim.UID {
						old = p
					} else {
						replacement = p
					}
				}
				g.Expect(old.DeletionTimestamp).NotTo(BeNil())
				g.Expect(old.Status.Phase).To(Equal(corev1.PodRunning), "the old pod still shuts down")
				g.Expect(replacement.Status.Phase).To(Equal(corev1.PodRunning))
				j := getJob(ctx, ns, job.Name)
				g.Expect(deref(j.Status.Terminating)).To(Equal(int32(1)))
				g.Expect(j.Status.Active).To(Equal(int32(2)))
			}, 8*time.Second, poll).Should(Succeed())
		})
	})

	Context("with a pod failure policy", func() {
		policy := func(w *harness.JobWrapper) *harness.JobWrapper {
			return w.PodFailurePolicy(
				harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "main", batchv1.PodFailurePolicyOnExitCodesOpIn, 42),
				harness.OnPodCondition(batchv1.PodFailurePolicyActionIgnore, corev1.DisruptionTarget, corev1.ConditionTrue),
			)
		}

		It("runs the sample from config/samples: exit code 42 fails the job at once and stops the other pods", func() {
			// Eight indexes two at a time, pods run 5s; index 3 exits 42 at once.
			const job = "pod-failure-policy"
			kc.Must("apply", "-n", ns, "-f", "config/samples/batch_v1alpha1_indexedbatchjob_pod_failure_policy.yaml")
			kc.Must("wait", "-n", ns, "--for=condition=Failed", "ibj/"+job, "--timeout=60s")
			j := getJob(ctx, ns, job)
			Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonPodFailurePolicy))
			Expect(j.Status.Active).To(BeZero())
			Expect(j.Status.CompletedIndexes).To(Equal("0,1"))
			Expect(j.Status.Succeeded).To(Equal(int32(2)))
			Expect(j.Status.Failed).To(Equal(int32(2)), "index 3, which exited 42, and index 2, which it stopped")
			Expect(podsOfIndex(ctx, ns, job, 3)).To(HaveLen(1), "index 3 is not retried")
			for ix := 4; ix < 8; ix++ {
				Expect(podsOfIndex(ctx, ns, job, ix)).To(BeEmpty(), "index %d never starts", ix)
			}
		})

		It("ignores a pod evicted by a node drain (DisruptionTarget) and runs its index again", func() {
			job := policy(harness.MakeIndexedBatchJob("ignore-eviction", ns).Completions(2).Parallelism(2).BackoffLimit(0)).
				PodAnnotation(kwokcluster.DurationAnnotation, "8s").Obj()
			Expect(k8sClient.Create(ctx, job)).To(Succeed())
			w := watchPods(ns, job.Name)
			var victim corev1.Pod
			Eventually(func(g Gomega) {
				pods := podsOfIndex(ctx, ns, job.Name, 0)
				g.Expect(pods).To(HaveLen(1))
				g.Expect(pods[0].Status.Phase).To(Equal(corev1.PodRunning))
				victim = pods[0]
			}, timeout, poll).Should(Succeed())

			By("draining the node of index 0's pod with kubectl drain")
			node := victim.Spec.NodeName
			DeferCleanup(func() { kc.Must("uncordon", node) })
			out := kc.Must("drain", node, "--pod-selector", ibjv1.JobNameLabel+"="+job.Name+","+ibjv1.CompletionIndexLabel+"=0",
				"--timeout=60s")
			GinkgoWriter.Println(out)

			kc.Must("wait", "-n", ns, "--for=condition=Complete", "ibj/"+job.Name, "--timeout=60s")
			j := getJob(ctx, ns, job.Name)
			Expect(j.Status.Failed).To(BeZero(), "an ignored failure is not counted, even with backoffLimit 0")
			Expect(j.Status.Succeeded).To(Equal(int32(2)))
			Expect(w.RunsOf(0)).To(Equal(2))
			Expect(w.RunsOf(1)).To(Equal(1))
			replacement := podsOfIndex(ctx, ns, job.Name, 0)
			Expect(replacement).To(HaveLen(1))
			Expect(replacement[0].Spec.NodeName).NotTo(Equal(node), "the drained node is cordoned")
		})
	})

	Context("suspended", func() {
		It("starts no pod until resumed, and lets the node selector change meanwhile", func() {
			job := harness.MakeIndexedBatchJob("suspended", ns).Completions(3).Parallelism(3).Suspend(true).
				NodeSelector(kwokcluster.ZoneLabel, "zone-a").
				PodAnnotation(kwokcluster.DurationAnnotation, "1s").Obj()
			Expect(k8sClient.Create(ctx, job)).To(Succeed())
			Eventually(func(g Gomega) {
				j := getJob(ctx, ns, job.Name)
				g.Expect(harness.ConditionReason(j, ibjv1.ConditionSuspended)).NotTo(BeEmpty())
				g.Expect(j.Status.Phase).To(Equal(ibjv1.PhaseSuspended))
			}, timeout, poll).Should(Succeed())
			Consistently(func() []corev1.Pod { return jobPods(ctx, ns, job.Name) }, 2*time.Second, poll).Should(BeEmpty())
			Expect(getJob(ctx, ns, job.Name).Status.StartTime).To(BeNil())

			By("moving it to zone-b while suspended, then resuming with kubectl patch")
			kc.Must("patch", "ibj", job.Name, "-n", ns, "--type=merge",
				"-p", `{"spec":{"template":{"spec":{"nodeSelector":{"`+kwokcluster.ZoneLabel+`":"zone-b"}}}}}`)
			kc.Must("patch", "ibj", job.Name, "-n", ns, "--type=merge", "-p", `{"spec":{"suspend":false}}`)
			kc.Must("wait", "-n", ns, "--for=condition=Complete", "ibj/"+job.Name, "--timeout=60s")
			j := getJob(ctx, ns, job.Name)
			Expect(j.Status.StartTime).NotTo(BeNil())
			Expect(j.Status.Succeeded).To(Equal(int32(3)))
			for _, p := range jobPods(ctx, ns, job.Name) {
				Expect(p.Spec.NodeName).To(Equal("kwok-node-1"), "pod %s runs in zone-b", p.Name)
			}
		})

		It("stops a running job's pods without counting failures, and finishes it once resumed", func() {
			job := harness.MakeIndexedBatchJob("suspend-running", ns).Completions(4).Parallelism(2).BackoffLimit(0).
				PodAnnotation(kwokcluster.DurationAnnotation, "5s").Obj()
			Expect(k8sClient.Create(ctx, job)).To(Succeed())
			Eventually(func() int32 { return deref(getJob(ctx, ns, job.Name).Status.Ready) }, timeout, poll).Should(Equal(int32(2)))

			kc.Must("patch", "ibj", job.Name, "-n", ns, "--type=merge", "-p", `{"spec":{"suspend":true}}`)
			Eventually(func(g Gomega) {
				j := getJob(ctx, ns, job.Name)
				g.Expect(harness.ConditionReason(j, ibjv1.ConditionSuspended)).NotTo(BeEmpty())
				g.Expect(j.Status.Active).To(BeZero())
				g.Expect(deref(j.Status.Terminating)).To(BeZero())
				g.Expect(j.Status.Failed).To(BeZero())
				g.Expect(j.Status.Phase).To(Equal(ibjv1.PhaseSuspended))
			}, timeout, poll).Should(Succeed())

			kc.Must("patch", "ibj", job.Name, "-n", ns, "--type=merge", "-p", `{"spec":{"suspend":false}}`)
			kc.Must("wait", "-n", ns, "--for=condition=Complete", "ibj/"+job.Name, "--timeout=90s")
			j := getJob(ctx, ns, job.Name)
			Expect(j.Status.Succeeded).To(Equal(int32(4)))
			Expect(j.Status.Failed).To(BeZero())
			Expect(j.Status.CompletedIndexes).To(Equal("0-3"))
		})
	})

	It("fails with DeadlineExceeded once activeDeadlineSeconds pass, and stops its pods", func() {
		job := harness.MakeIndexedBatchJob("deadline", ns).Completions(2).Parallelism(2).ActiveDeadlineSeconds(3).
			PodAnnotation(kwokcluster.DurationAnnotation, kwokcluster.Forever).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		kc.Must("wait", "-n", ns, "--for=condition=Failed", "ibj/"+job.Name, "--timeout=60s")
		j := getJob(ctx, ns, job.Name)
		Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonDeadlineExceeded))
		Expect(j.Status.Active).To(BeZero())
		Expect(deref(j.Status.Terminating)).To(BeZero())
		for _, c := range j.Status.Conditions {
			if c.Type == ibjv1.ConditionFailureTarget {
				Expect(c.LastTransitionTime.Sub(j.Status.StartTime.Time)).To(BeNumerically(">=", 3*time.Second))
			}
		}
		for _, p := range jobPods(ctx, ns, job.Name) {
			Expect(finished(&p)).To(BeTrue(), "pod %s was stopped", p.Name)
		}
	})

	It("deletes the job and its pods ttlSecondsAfterFinished after it finished", func() {
		job := harness.MakeIndexedBatchJob("ttl", ns).Completions(2).Parallelism(2).TTLSecondsAfterFinished(3).
			PodAnnotation(kwokcluster.DurationAnnotation, "500ms").Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		kc.Must("wait", "-n", ns, "--for=condition=Complete", "ibj/"+job.Name, "--timeout=60s")
		finishedAt := time.Now()
		Expect(jobPods(ctx, ns, job.Name)).To(HaveLen(2))
		Eventually(func() bool {
			err := k8sClient.Get(ctx, client.ObjectKeyFromObject(job), &ibjv1.IndexedBatchJob{})
			return apierrors.IsNotFound(err)
		}, 30*time.Second, poll).Should(BeTrue(), "the job is deleted")
		Expect(time.Since(finishedAt)).To(BeNumerically(">=", 2*time.Second), "not before the TTL")
		Eventually(func() []corev1.Pod { return jobPods(ctx, ns, job.Name) }, 30*time.Second, poll).Should(BeEmpty())
	})

	It("keeps exact counts across an operator crash in the middle of a run", func() {
		job := harness.MakeIndexedBatchJob("restart", ns).Completions(6).Parallelism(2).BackoffLimitPerIndex(1).
			PodAnnotation(kwokcluster.DurationAnnotation, "3s").
			PodAnnotation(kwokcluster.FailIndexesAnnotation, "1").Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		w := watchPods(ns, job.Name)
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(j.Status.Succeeded + j.Status.Failed).To(BeNumerically(">=", 1))
			g.Expect(deref(j.Status.Ready)).To(Equal(int32(2)))
		}, timeout, poll).Should(Succeed())

		By("killing the operator while two pods run")
		op.crash()
		By("letting those pods finish while no operator runs: their results wait behind the tracking finalizer")
		Eventually(func(g Gomega) {
			var done int
			for _, p := range jobPods(ctx, ns, job.Name) {
				if finished(&p) && hasTrackingFinalizer(&p) {
					done++
				}
			}
			g.Expect(done).To(BeNumerically(">=", 2))
		}, 20*time.Second, poll).Should(Succeed())

		By("starting the operator again")
		op = startOperator()
		kc.Must("wait", "-n", ns, "--for=condition=Failed", "ibj/"+job.Name, "--timeout=120s")
		j := getJob(ctx, ns, job.Name)
		Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonFailedIndexes))
		Expect(j.Status.CompletedIndexes).To(Equal("0,2-5"))
		Expect(j.Status.FailedIndexes).To(Equal(ptr.To("1")))
		Expect(j.Status.Succeeded).To(Equal(int32(5)))
		Expect(j.Status.Failed).To(Equal(int32(2)))
		for ix := range 6 {
			want := 1
			if ix == 1 {
				want = 2
			}
			Expect(w.RunsOf(ix)).To(Equal(want), fmt.Sprintf("pods of index %d", ix))
		}
	})
})
