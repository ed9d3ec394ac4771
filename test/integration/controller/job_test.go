package controller_test

import (
	"context"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

const timeout = 60 * time.Second

func succeedAll(int, int) podsim.Plan { return podsim.Plan{} }

// expectCompleted waits until the job is Complete with exactly succeeded
// pods counted and completedIndexes as given.
func expectCompleted(ctx context.Context, ns, name string, succeeded int32, completedIndexes string, within time.Duration) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		j := getJob(ctx, ns, name)
		g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).To(Equal(ibjv1.ReasonCompletionsReached))
		g.Expect(j.Status.Succeeded).To(Equal(succeeded))
		g.Expect(j.Status.CompletedIndexes).To(Equal(completedIndexes))
	}, within, 100*time.Millisecond).Should(Succeed())
}

var _ = Describe("IndexedBatchJob controller", func() {

	It("runs each index once and completes with exact counts", func() {
		job := harness.MakeIndexedBatchJob("all-succeed", ns).Completions(5).Parallelism(2).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, succeedAll)
		defer k.Stop()

		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).To(Equal(ibjv1.ReasonCompletionsReached))
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionSuccessCriteriaMet)).To(Equal(ibjv1.ReasonCompletionsReached))
			g.Expect(j.Status.Succeeded).To(Equal(int32(5)))
			g.Expect(j.Status.Failed).To(BeZero())
			g.Expect(j.Status.CompletedIndexes).To(Equal("0-4"))
			g.Expect(j.Status.CompletionTime).NotTo(BeNil())
			g.Expect(j.Status.StartTime).NotTo(BeNil())
			g.Expect(j.Status.Active).To(BeZero())
			g.Expect(j.Status.UncountedTerminatedPods).To(BeNil())
			g.Expect(j.Status.Phase).To(Equal(ibjv1.PhaseComplete))
			g.Expect(j.Status.ObservedGeneration).To(Equal(j.Generation))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		Expect(k.PeakUnfinished()).To(BeNumerically("<=", 2), "parallelism 2 was exceeded")
		for ix := range 5 {
			Expect(k.RunsOf(ix)).To(Equal(1), "index %d", ix)
		}
		Expect(k.Doubles()).To(BeEmpty())
		expectNoFinalizers(ctx, ns, job.Name)

		By("building pods with the fixed labels, env var and hostname")
		for _, p := range jobPods(ctx, ns, job.Name) {
			ix := p.Labels[ibjv1.CompletionIndexLabel]
			Expect(p.Annotations[ibjv1.CompletionIndexLabel]).To(Equal(ix))
			Expect(p.Labels[ibjv1.JobNameLabel]).To(Equal(job.Name))
			Expect(p.Labels[ibjv1.ControllerUIDLabel]).To(Equal(string(getJob(ctx, ns, job.Name).UID)))
			Expect(p.Spec.Hostname).To(Equal(job.Name + "-" + ix))
			Expect(p.Spec.Containers[0].Env).To(ContainElement(corev1.EnvVar{Name: ibjv1.CompletionIndexEnvName, Value: ix}))
			Expect(metav1IsControlledBy(&p, getJob(ctx, ns, job.Name))).To(BeTrue())
		}

		By("recording events for creates and completion")
		Eventually(func() []string { return eventReasons(ctx, ns, job.Name) }, 10*time.Second).
			Should(ContainElements("SuccessfulCreate", "Completed"))
	})

	It("runs the seed's per-index example: indexes 1 and 2 fail twice, the rest succeed", func() {
		job := harness.MakeIndexedBatchJob("per-index", ns).Completions(8).Parallelism(2).BackoffLimitPerIndex(1).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, failingIndexes(1, 2))
		defer k.Stop()

		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonFailedIndexes))
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionFailureTarget)).To(Equal(ibjv1.ReasonFailedIndexes))
			g.Expect(j.Status.CompletedIndexes).To(Equal("0,3-7"))
			g.Expect(j.Status.FailedIndexes).To(Equal(ptr.To("1,2")))
			g.Expect(j.Status.Succeeded).To(Equal(int32(6)))
			g.Expect(j.Status.Failed).To(Equal(int32(4)))
			g.Expect(j.Status.Phase).To(Equal(ibjv1.PhaseFailed))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		Expect(k.RunsOf(1)).To(Equal(2))
		Expect(k.RunsOf(2)).To(Equal(2))
		Expect(k.PeakUnfinished()).To(BeNumerically("<=", 2))
		Expect(k.Doubles()).To(BeEmpty())
		expectNoFinalizers(ctx, ns, job.Name)
	})

	It("fails with BackoffLimitExceeded, replacing failed pods only after the backoff delay", func() {
		job := harness.MakeIndexedBatchJob("backoff", ns).Completions(1).BackoffLimit(2).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, func(int, int) podsim.Plan { return podsim.Plan{ExitCode: 3} })
		defer k.Stop()

		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonBackoffLimitExceeded))
			g.Expect(j.Status.Failed).To(Equal(int32(3)))
			g.Expect(j.Status.Succeeded).To(BeZero())
		}, timeout, 100*time.Millisecond).Should(Succeed())
		Expect(k.RunsOf(0)).To(Equal(3))

		By("waiting 200ms, then 400ms, after the first and second failures")
		pods := jobPods(ctx, ns, job.Name)
		Expect(pods).To(HaveLen(3))
		for i := 1; i < 3; i++ {
			failedAt := pods[i-1].Status.ContainerStatuses[0].State.Terminated.FinishedAt.Time
			gap := pods[i].CreationTimestamp.Sub(failedAt)
			// Timestamps have one-second resolution: allow for truncation.
			Expect(gap).To(BeNumerically(">=", testBackoff.Delay(int32(i))-time.Second), "pod %d created %v after the failure", i, gap)
		}
		expectNoFinalizers(ctx, ns, job.Name)
	})

	It("fails with DeadlineExceeded and terminates its pods", func() {
		job := harness.MakeIndexedBatchJob("deadline", ns).Completions(3).Parallelism(3).ActiveDeadlineSeconds(2).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, func(int, int) podsim.Plan { return podsim.Plan{Hold: true} })
		defer k.Stop()

		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonDeadlineExceeded))
			g.Expect(j.Status.Active).To(BeZero())
			g.Expect(*j.Status.Terminating).To(BeZero())
			// As upstream: pods still running when the job fails count as failed.
			g.Expect(j.Status.Failed).To(Equal(int32(3)))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		Eventually(func() []corev1.Pod { return jobPods(ctx, ns, job.Name) }, 20*time.Second).Should(BeEmpty())
	})

	It("suspends and resumes: active pods deleted without counting as failures, startTime reset", func() {
		job := harness.MakeIndexedBatchJob("suspend", ns).Completions(2).Parallelism(2).Suspend(true).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		stay := true
		k := startKubelet(ns, job.Name, func(int, int) podsim.Plan { return podsim.Plan{Hold: stay} })
		defer k.Stop()

		By("creating no pod while suspended")
		Eventually(func() string { return harness.ConditionReason(getJob(ctx, ns, job.Name), ibjv1.ConditionSuspended) }, timeout).
			Should(Equal(ibjv1.ReasonJobSuspended))
		Consistently(func() []corev1.Pod { return jobPods(ctx, ns, job.Name) }, time.Second).Should(BeEmpty())
		Expect(getJob(ctx, ns, job.Name).Status.Phase).To(Equal(ibjv1.PhaseSuspended))

		By("accepting a new node selector while suspended")
		j := getJob(ctx, ns, job.Name)
		j.Spec.Template.Spec.NodeSelector = map[string]string{"pool": "gpu"}
		Expect(k8sClient.Update(ctx, j)).To(Succeed())

		By("resuming")
		setSuspend(ctx, ns, job.Name, false)
		var firstStart time.Time
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(j.Status.Active).To(Equal(int32(2)))
			g.Expect(j.Status.StartTime).NotTo(BeNil())
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionSuspended)).To(BeEmpty())
			firstStart = j.Status.StartTime.Time
		}, timeout, 100*time.Millisecond).Should(Succeed())
		for _, p := range jobPods(ctx, ns, job.Name) {
			Expect(p.Spec.NodeSelector).To(HaveKeyWithValue("pool", "gpu"))
		}

		By("suspending while running")
		time.Sleep(1100 * time.Millisecond) // so the next startTime differs at second resolution
		setSuspend(ctx, ns, job.Name, true)
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionSuspended)).To(Equal(ibjv1.ReasonJobSuspended))
			g.Expect(j.Status.Active).To(BeZero())
			g.Expect(j.Status.Failed).To(BeZero())
			g.Expect(j.Status.StartTime).To(BeNil())
			g.Expect(jobPods(ctx, ns, job.Name)).To(BeEmpty())
		}, timeout, 100*time.Millisecond).Should(Succeed())

		By("resuming again and completing")
		stay = false
		setSuspend(ctx, ns, job.Name, false)
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).To(Equal(ibjv1.ReasonCompletionsReached))
			g.Expect(j.Status.Succeeded).To(Equal(int32(2)))
			g.Expect(j.Status.Failed).To(BeZero())
			g.Expect(j.Status.StartTime.Time).To(BeTemporally(">", firstStart))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		Expect(eventReasons(ctx, ns, job.Name)).To(ContainElements("Suspended", "Resumed"))
	})

	It("deletes the job and its pods ttlSecondsAfterFinished after it finished", func() {
		job := harness.MakeIndexedBatchJob("ttl", ns).Completions(2).Parallelism(2).TTLSecondsAfterFinished(1).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, succeedAll)
		defer k.Stop()
		Eventually(func() bool {
			err := k8sClient.Get(ctx, client.ObjectKeyFromObject(job), &ibjv1.IndexedBatchJob{})
			return apierrors.IsNotFound(err)
		}, timeout, 100*time.Millisecond).Should(BeTrue())
		Eventually(func() []corev1.Pod { return jobPods(ctx, ns, job.Name) }, 20*time.Second).Should(BeEmpty())
	})

	It("leaves no tracking finalizer behind when the job is deleted mid-run", func() {
		job := harness.MakeIndexedBatchJob("deleted", ns).Completions(3).Parallelism(3).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, func(int, int) podsim.Plan { return podsim.Plan{Hold: true} })
		defer k.Stop()
		Eventually(func() int32 { return getJob(ctx, ns, job.Name).Status.Active }, timeout).Should(Equal(int32(3)))
		Expect(k8sClient.Delete(ctx, getJob(ctx, ns, job.Name))).To(Succeed())
		expectNoFinalizers(ctx, ns, job.Name)
		Expect(jobPods(ctx, ns, job.Name)).To(HaveLen(3), "envtest has no garbage collector: the pods remain, released")
	})

	It("releases every pod of a finished job at once when the job is deleted, finalizers still held included", func() {
		job := harness.MakeIndexedBatchJob("deleted-finished", ns).Completions(3).Parallelism(3).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, succeedAll)
		defer k.Stop()
		expectCompleted(ctx, ns, job.Name, 3, "0-2", timeout)

		By("stopping the operator and giving every pod its tracking finalizer back, as if its background removal had not run yet")
		op.stop()
		for _, p := range jobPods(ctx, ns, job.Name) {
			if slices.Contains(p.Finalizers, ibjv1.TrackingFinalizer) {
				continue
			}
			patch := client.MergeFrom(p.DeepCopy())
			p.Finalizers = append(p.Finalizers, ibjv1.TrackingFinalizer)
			Expect(k8sClient.Patch(ctx, &p, patch)).To(Succeed())
		}
		Expect(k8sClient.Delete(ctx, getJob(ctx, ns, job.Name))).To(Succeed())
		op = startOperator()
		expectNoFinalizers(ctx, ns, job.Name)
	})

	It("leaves a job managed by another controller alone", func() {
		job := harness.MakeIndexedBatchJob("managed-elsewhere", ns).Completions(2).ManagedBy("kueue.x-k8s.io/multikueue").Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(jobPods(ctx, ns, job.Name)).To(BeEmpty())
			g.Expect(getJob(ctx, ns, job.Name).Status.StartTime).To(BeNil())
		}, 2*time.Second, 200*time.Millisecond).Should(Succeed())
	})

	It("completes a 1,000-index job with succeeded 1000 and completedIndexes 0-999", func() {
		job := harness.MakeIndexedBatchJob("thousand", ns).Completions(1000).Parallelism(100).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, succeedAll)
		defer k.Stop()
		expectCompleted(ctx, ns, job.Name, 1000, "0-999", 5*time.Minute)
		Expect(k.PeakUnfinished()).To(BeNumerically("<=", 100))
		Expect(k.Doubles()).To(BeEmpty())
		Expect(jobPods(ctx, ns, job.Name)).To(HaveLen(1000), "one pod per index, never a second")
		expectNoFinalizers(ctx, ns, job.Name)
	})

	It("keeps counts exact across an operator restart mid-run", func() {
		job := harness.MakeIndexedBatchJob("restart", ns).Completions(20).Parallelism(4).BackoffLimitPerIndex(1).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, func(ix, _ int) podsim.Plan {
			if ix%5 == 0 {
				return podsim.Plan{ExitCode: 2}
			}
			return podsim.Plan{}
		})
		defer k.Stop()
		Eventually(func() int32 { return getJob(ctx, ns, job.Name).Status.Succeeded }, timeout, 50*time.Millisecond).
			Should(BeNumerically(">=", 3))

		By("stopping the operator while pods go on finishing, then starting a new one")
		op.stop()
		time.Sleep(time.Second)
		op = startOperator()

		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonFailedIndexes))
			g.Expect(j.Status.Succeeded).To(Equal(int32(16)))
			g.Expect(j.Status.Failed).To(Equal(int32(8)))
			g.Expect(j.Status.FailedIndexes).To(Equal(ptr.To("0,5,10,15")))
			g.Expect(j.Status.CompletedIndexes).To(Equal("1-4,6-9,11-14,16-19"))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		for _, ix := range []int{0, 5, 10, 15} {
			Expect(k.RunsOf(ix)).To(Equal(2), "index %d", ix)
		}
		Expect(k.Doubles()).To(BeEmpty())
		expectNoFinalizers(ctx, ns, job.Name)
	})

	It("with --namespaces, runs the jobs of its namespaces and leaves the others alone", func() {
		other := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
		op.stop()
		op = startOperator(ns)
		defer func() {
			op.stop()
			op = startOperator()
		}()
		job := harness.MakeIndexedBatchJob("watched", ns).Completions(12).Parallelism(4).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		elsewhere := harness.MakeIndexedBatchJob("unwatched", other).Completions(2).Obj()
		Expect(k8sClient.Create(ctx, elsewhere)).To(Succeed())
		k := startKubelet(ns, job.Name, succeedAll)
		defer k.Stop()
		expectCompleted(ctx, ns, job.Name, 12, "0-11", timeout)
		Expect(k.Doubles()).To(BeEmpty())
		expectNoFinalizers(ctx, ns, job.Name)
		Consistently(func() []corev1.Pod { return jobPods(ctx, other, elsewhere.Name) }, time.Second, 100*time.Millisecond).Should(BeEmpty())
		Expect(getJob(ctx, other, elsewhere.Name).Status.StartTime).To(BeNil(), "a job outside --namespaces was synced")
	})

	It("keeps one pod per index and exact counts with two operators reconciling at once", func() {
		second := startOperator()
		defer second.stop()
		job := harness.MakeIndexedBatchJob("two-operators", ns).Completions(30).Parallelism(10).BackoffLimitPerIndex(2).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, func(ix, attempt int) podsim.Plan {
			if ix%3 == 0 && attempt == 0 {
				return podsim.Plan{ExitCode: 1} // a third of the indexes fail once, then succeed
			}
			return podsim.Plan{}
		})
		defer k.Stop()
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).To(Equal(ibjv1.ReasonCompletionsReached))
			g.Expect(j.Status.Succeeded).To(Equal(int32(30)))
			g.Expect(j.Status.Failed).To(Equal(int32(10)))
			g.Expect(j.Status.CompletedIndexes).To(Equal("0-29"))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		Expect(k.Doubles()).To(BeEmpty())
		// Each operator keeps parallelism by what its own cache shows, so
		// together they may overshoot it for a moment (two creates for two
		// indexes, one each, before either cache shows the other's); never
		// by more than the other's share.
		Expect(k.PeakUnfinished()).To(BeNumerically("<=", 20))
		Expect(jobPods(ctx, ns, job.Name)).To(HaveLen(40))
		expectNoFinalizers(ctx, ns, job.Name)
	})
})

func setSuspend(ctx context.Context, ns, name string, suspend bool) {
	Eventually(func() error {
		j := getJob(ctx, ns, name)
		j.Spec.Suspend = ptr.To(suspend)
		return k8sClient.Update(ctx, j)
	}, 10*time.Second).Should(Succeed())
}

func eventReasons(ctx context.Context, ns, job string) []string {
	events := jobEvents(ctx, ns, job)
	out := make([]string, 0, len(events))
	for _, e := range events {
		out = append(out, e.Reason)
	}
	return out
}

// eventNotes are the "reason: note" of the job's events.
func eventNotes(ctx context.Context, ns, job string) []string {
	events := jobEvents(ctx, ns, job)
	out := make([]string, 0, len(events))
	for _, e := range events {
		out = append(out, e.Reason+": "+e.Note)
	}
	return out
}

func jobEvents(ctx context.Context, ns, job string) []eventsv1.Event {
	var list eventsv1.EventList
	Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == job && e.Regarding.Kind == "IndexedBatchJob" {
			out = append(out, e)
		}
	}
	return out
}

func metav1IsControlledBy(p *corev1.Pod, job *ibjv1.IndexedBatchJob) bool {
	for _, ref := range p.OwnerReferences {
		if ref.UID == job.UID && ptr.Deref(ref.Controller, false) {
			return true
		}
	}
	return false
}

// dumpNamespace prints the jobs and pods of a failed test, to see why.
func dumpNamespace(ctx context.Context, ns string) {
	var jobs ibjv1.IndexedBatchJobList
	_ = k8sClient.List(ctx, &jobs, client.InNamespace(ns))
	for _, j := range jobs.Items {
		GinkgoWriter.Printf("job %s spec=%+v\nstatus=%+v\n", j.Name, j.Spec.Completions, j.Status)
	}
	var pods corev1.PodList
	_ = k8sClient.List(ctx, &pods, client.InNamespace(ns))
	for _, p := range pods.Items {
		GinkgoWriter.Printf("pod %s phase=%s node=%q deleting=%v finalizers=%v labels=%v annotations=%v owners=%d\n", p.Name, p.Status.Phase, p.Spec.NodeName, p.DeletionTimestamp != nil, p.Finalizers, p.Labels, p.Annotations, len(p.OwnerReferences))
	}
}
