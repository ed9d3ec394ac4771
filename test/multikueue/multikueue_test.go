package multikueue

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/multikueue"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

const (
	timeout = 2 * time.Minute
	poll    = 200 * time.Millisecond
	// prebuiltWorkload names, on a worker's copy, the Workload MultiKueue
	// created for it there (a label, or an annotation when Kueue's
	// WorkloadIdentifierAnnotations is on).
	prebuiltWorkload = "kueue.x-k8s.io/prebuilt-workload-name"
)

var _ = Describe("MultiKueue", func() {
	It("runs a job created on the manager on the worker Kueue picks, and mirrors its status, exact, as it goes and at its end", func(ctx SpecContext) {
		ns := newQueues(ctx, false)
		job := queuedJob(ns, "mirrored", 6, 3, "2s").BackoffLimitPerIndex(1).
			PodAnnotation(kwokcluster.FailIndexesAnnotation, "5").Obj()
		managerStatuses := recordStatuses(ctx, federation.Manager, ns, job.Name)
		workerStatuses := map[*multikueue.Member]func() []ibjv1.IndexedBatchJobStatus{}
		for _, w := range federation.Workers {
			workerStatuses[w] = recordStatuses(ctx, w, ns, job.Name)
		}
		Expect(federation.Manager.Client.Create(ctx, job)).To(Succeed())

		By("the manager's defaulting webhook hands the job to MultiKueue")
		Expect(job.Spec.ManagedBy).To(Equal(ptr.To(kueuev1beta2.MultiKueueControllerName)))

		By("one worker gets a copy: without managedBy, with the Workload MultiKueue made for it there")
		worker, copy := dispatched(ctx, ns, job.Name)
		Expect(copy.Spec.ManagedBy).To(BeNil())
		Expect(copy.Labels).To(HaveKeyWithValue(kueuev1beta2.MultiKueueOriginLabel, multikueue.Origin))
		Expect(copy.Labels[prebuiltWorkload]+copy.Annotations[prebuiltWorkload]).NotTo(BeEmpty(), "the Workload MultiKueue made, named in a label or an annotation")
		Expect(copy.Spec.Template).To(Equal(job.Spec.Template), "the template as created on the manager")

		By("each status the manager's copy shows is one the worker's copy had, up to the worker's final one")
		final := expectMirrored(ctx, ns, job.Name, managerStatuses, worker, workerStatuses)
		Expect(final.Status.CompletedIndexes).To(Equal("0-4"))
		Expect(final.Status.FailedIndexes).To(Equal(ptr.To("5")))
		Expect(final.Status.Succeeded).To(BeEquivalentTo(5))
		Expect(final.Status.Failed).To(BeEquivalentTo(2), "index 5's two attempts")
		failed := apimeta.FindStatusCondition(final.Status.Conditions, ibjv1.ConditionFailed)
		Expect(failed.Reason).To(Equal("FailedIndexes"))

		By("no pod ran on the manager, and the other worker has no copy")
		Expect(pods(ctx, federation.Manager, ns, job.Name)).To(BeEmpty())
		for _, w := range federation.Workers {
			if w != worker {
				Expect(exists(ctx, w, ns, job.Name)).To(BeFalse(), "a copy on %s", w.Name)
			}
		}
		Eventually(func(g Gomega) {
			wl := workloadOf(g, ctx, ns, job.Name)
			g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueuev1beta2.WorkloadFinished)).To(BeTrue(), "the manager's Workload Finished")
		}, timeout, poll).Should(Succeed())

		By("the job finished, MultiKueue deletes the worker's copy, and its pods go with it; the manager's copy stays")
		Eventually(func(g Gomega) {
			g.Expect(exists(ctx, worker, ns, job.Name)).To(BeFalse(), "the worker's copy")
			g.Expect(pods(ctx, worker, ns, job.Name)).To(BeEmpty(), "the worker's pods")
		}, timeout, poll).Should(Succeed())
		Expect(get(Default, ctx, federation.Manager.Client, ns, job.Name).Status).To(Equal(final.Status))
	})

	It("deletes the worker's copy and its pods when the job is deleted on the manager", func(ctx SpecContext) {
		ns := newQueues(ctx, false)
		job := queuedJob(ns, "deleted", 2, 2, kwokcluster.Forever).Obj()
		Expect(federation.Manager.Client.Create(ctx, job)).To(Succeed())
		worker, _ := dispatched(ctx, ns, job.Name)
		Eventually(func(g Gomega) {
			g.Expect(get(g, ctx, federation.Manager.Client, ns, job.Name).Status.Active).To(BeEquivalentTo(2), "the manager sees 2 pods running on %s", worker.Name)
		}, timeout, poll).Should(Succeed())
		Expect(pods(ctx, worker, ns, job.Name)).To(HaveLen(2))

		Expect(federation.Manager.Client.Delete(ctx, job)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(exists(ctx, worker, ns, job.Name)).To(BeFalse(), "the worker's copy")
			g.Expect(pods(ctx, worker, ns, job.Name)).To(BeEmpty(), "the worker's pods")
			var wls kueuev1beta2.WorkloadList
			g.Expect(federation.Manager.Client.List(ctx, &wls, client.InNamespace(ns))).To(Succeed())
			g.Expect(wls.Items).To(BeEmpty(), "the manager's Workload")
		}, timeout, poll).Should(Succeed())
	})

	It("leaves a job whose queue is not MultiKueue's to the manager's own cluster", func(ctx SpecContext) {
		ns := newQueues(ctx, true)
		job := queuedJob(ns, "local", 2, 2, "1s").Obj()
		Expect(federation.Manager.Client.Create(ctx, job)).To(Succeed())
		Expect(job.Spec.ManagedBy).To(BeNil())
		got := testutil.WaitForJobCondition(ctx, federation.Manager.Client, ns, job.Name, ibjv1.ConditionComplete, timeout)
		Expect(got.Status.Succeeded).To(BeEquivalentTo(2))
		Expect(pods(ctx, federation.Manager, ns, job.Name)).To(HaveLen(2), "its pods ran on the manager")
		for _, w := range federation.Workers {
			Expect(exists(ctx, w, ns, job.Name)).To(BeFalse(), "a copy on %s", w.Name)
		}
	})

	// Last: the lost worker's API server is stopped for a while, and its
	// clients (Kueue, the operator, kwok) take time to come back after.
	It("runs a job again on another worker when its worker is lost, counting no index twice", func(ctx SpecContext) {
		ns := newQueues(ctx, false)
		job := queuedJob(ns, "lost", 4, 2, "5s").Obj()
		managerStatuses := recordStatuses(ctx, federation.Manager, ns, job.Name)
		workerStatuses := map[*multikueue.Member]func() []ibjv1.IndexedBatchJobStatus{}
		for _, w := range federation.Workers {
			workerStatuses[w] = recordStatuses(ctx, w, ns, job.Name)
		}
		Expect(federation.Manager.Client.Create(ctx, job)).To(Succeed())
		lost, _ := dispatched(ctx, ns, job.Name)
		By("the manager's copy shows indexes done on " + lost.Name)
		Eventually(func(g Gomega) {
			g.Expect(get(g, ctx, federation.Manager.Client, ns, job.Name).Status.Succeeded).To(BeNumerically(">=", 1))
		}, timeout, poll).Should(Succeed())
		before := get(Default, ctx, federation.Manager.Client, ns, job.Name).Status

		By("stopping " + lost.Name + "'s API server")
		Expect(lost.Cluster.StopAPIServer()).To(Succeed())
		restarted := false
		DeferCleanup(func(ctx SpecContext) {
			if !restarted {
				Expect(lost.Cluster.StartAPIServer(ctx)).To(Succeed())
			}
		})

		By("after workerLostTimeout the job is dispatched to the other worker and runs there to its end")
		var other *multikueue.Member
		for _, w := range federation.Workers {
			if w != lost {
				other = w
			}
		}
		Eventually(func(g Gomega) {
			g.Expect(exists(ctx, other, ns, job.Name)).To(BeTrue(), "a copy on %s", other.Name)
		}, workerLostTimeout+2*timeout, poll).Should(Succeed())
		final := expectMirrored(ctx, ns, job.Name, managerStatuses, other, workerStatuses)
		Expect(apimeta.IsStatusConditionTrue(final.Status.Conditions, ibjv1.ConditionComplete)).To(BeTrue(), "Complete")
		Expect(final.Status.Succeeded).To(BeEquivalentTo(4), "each index counted once (%d were counted from %s before it was lost)", before.Succeeded, lost.Name)
		Expect(final.Status.CompletedIndexes).To(Equal("0-3"))
		Expect(final.Status.Failed).To(BeZero())

		By("once " + lost.Name + " is back, MultiKueue deletes the copy it left there")
		Expect(lost.Cluster.StartAPIServer(ctx)).To(Succeed())
		restarted = true
		Eventually(func(g Gomega) {
			for _, w := range federation.Workers {
				g.Expect(exists(ctx, w, ns, job.Name)).To(BeFalse(), "a copy on %s", w.Name)
				g.Expect(pods(ctx, w, ns, job.Name)).To(BeEmpty(), "pods on %s", w.Name)
			}
		}, 3*timeout, poll).Should(Succeed())
	})
})

var namespaces int

// newQueues makes a namespace with queues on every cluster (see
// multikueue.Federation.Queues) and returns its name.
func newQueues(ctx context.Context, local bool) string {
	GinkgoHelper()
	namespaces++
	ns := fmt.Sprintf("mk-%d", namespaces)
	Expect(federation.Queues(ctx, ns, "8", local)).To(Succeed())
	return ns
}

// queuedJob is a job queued in ns's LocalQueue, its pods asking for a CPU
// each and running for duration.
func queuedJob(ns, name string, completions, parallelism int32, duration string) *harness.JobWrapper {
	return harness.MakeIndexedBatchJob(name, ns).Completions(completions).Parallelism(parallelism).
		Label(ibjv1.QueueNameLabel, ns).
		Requests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}).
		PodAnnotation(kwokcluster.DurationAnnotation, duration)
}

// dispatched waits for a copy of the job on exactly one worker and returns
// that worker and the copy.
func dispatched(ctx context.Context, ns, name string) (*multikueue.Member, *ibjv1.IndexedBatchJob) {
	GinkgoHelper()
	var worker *multikueue.Member
	var copy *ibjv1.IndexedBatchJob
	Eventually(func(g Gomega) {
		worker, copy = nil, nil
		for _, w := range federation.Workers {
			j := &ibjv1.IndexedBatchJob{}
			err := w.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, j)
			if apierrors.IsNotFound(err) {
				continue
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(worker).To(BeNil(), "copies on two workers")
			worker, copy = w, j
		}
		g.Expect(worker).NotTo(BeNil(), "no worker has a copy")
	}, timeout, poll).Should(Succeed())
	return worker, copy
}

func get(g Gomega, ctx context.Context, c client.Client, ns, name string) *ibjv1.IndexedBatchJob {
	j := &ibjv1.IndexedBatchJob{}
	g.ExpectWithOffset(1, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, j)).To(Succeed())
	return j
}

func exists(ctx context.Context, m *multikueue.Member, ns, name string) bool {
	GinkgoHelper()
	err := m.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ibjv1.IndexedBatchJob{})
	if apierrors.IsNotFound(err) {
		return false
	}
	Expect(err).NotTo(HaveOccurred())
	return true
}

// pods are the job's pods on m.
func pods(ctx context.Context, m *multikueue.Member, ns, job string) []corev1.Pod {
	GinkgoHelper()
	var list corev1.PodList
	Expect(m.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{ibjv1.JobNameLabel: job})).To(Succeed())
	return list.Items
}

// workloadOf is the manager's Workload of the job.
func workloadOf(g Gomega, ctx context.Context, ns, job string) *kueuev1beta2.Workload {
	var list kueuev1beta2.WorkloadList
	g.ExpectWithOffset(1, federation.Manager.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	for i := range list.Items {
		for _, ref := range list.Items[i].OwnerReferences {
			if ref.Name == job && ref.Kind == "IndexedBatchJob" {
				return &list.Items[i]
			}
		}
	}
	g.ExpectWithOffset(1, fmt.Errorf("no Workload of %s/%s", ns, job)).NotTo(HaveOccurred())
	return nil
}

// recordStatuses watches the job on m from now on, and returns what it has
// seen so far: each status the job had, in order (an empty one before its
// first status write left out).
func recordStatuses(ctx context.Context, m *multikueue.Member, ns, name string) func() []ibjv1.IndexedBatchJobStatus {
	GinkgoHelper()
	s, err := multikueue.Scheme()
	Expect(err).NotTo(HaveOccurred())
	c, err := client.NewWithWatch(m.Cluster.Config, client.Options{Scheme: s})
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(ctx)
	DeferCleanup(cancel)
	var mu sync.Mutex
	var seen []ibjv1.IndexedBatchJobStatus
	go func() {
		defer GinkgoRecover()
		for ctx.Err() == nil {
			w, err := c.Watch(ctx, &ibjv1.IndexedBatchJobList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": name})
			if err != nil {
				time.Sleep(poll)
				continue
			}
			for ev := range w.ResultChan() {
				j, ok := ev.Object.(*ibjv1.IndexedBatchJob)
				if !ok || cmp.Equal(j.Status, ibjv1.IndexedBatchJobStatus{}) {
					continue
				}
				mu.Lock()
				if len(seen) == 0 || !cmp.Equal(seen[len(seen)-1], j.Status) {
					seen = append(seen, *j.Status.DeepCopy())
				}
				mu.Unlock()
			}
			w.Stop()
		}
	}()
	return func() []ibjv1.IndexedBatchJobStatus {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// expectMirrored waits for the manager's copy of the job to finish and
// checks it was a mirror of the workers' copies throughout: each status the
// manager's copy had (managerStatuses) is one a worker's copy had, at least
// one of them while the job ran, and its last is the last status of
// worker's copy. It returns the manager's copy.
func expectMirrored(ctx context.Context, ns, name string, managerStatuses func() []ibjv1.IndexedBatchJobStatus,
	worker *multikueue.Member, workerStatuses map[*multikueue.Member]func() []ibjv1.IndexedBatchJobStatus) *ibjv1.IndexedBatchJob {
	GinkgoHelper()
	var final *ibjv1.IndexedBatchJob
	Eventually(func(g Gomega) {
		final = get(g, ctx, federation.Manager.Client, ns, name)
		g.Expect(finished(final.Status)).To(BeTrue(), "the manager's copy finished")
		remote := workerStatuses[worker]()
		g.Expect(remote).NotTo(BeEmpty())
		g.Expect(cmp.Diff(remote[len(remote)-1], final.Status)).To(BeEmpty(), "the manager's status (-%s's last +manager's)", worker.Name)
	}, timeout, poll).Should(Succeed())
	seen := make([][]ibjv1.IndexedBatchJobStatus, 0, len(workerStatuses))
	for _, statuses := range workerStatuses {
		seen = append(seen, statuses())
	}
	all := slices.Concat(seen...)
	running := 0
	for _, s := range managerStatuses() {
		Expect(slices.ContainsFunc(all, func(w ibjv1.IndexedBatchJobStatus) bool { return cmp.Equal(w, s) })).
			To(BeTrue(), "the manager's copy had a status no worker's had: %+v", s)
		if !finished(s) && s.Active > 0 {
			running++
		}
	}
	Expect(running).To(BeNumerically(">", 0), "the manager's copy never showed the job running")
	return final
}

// finished reports whether a status has the Complete or Failed condition.
func finished(s ibjv1.IndexedBatchJobStatus) bool {
	return apimeta.IsStatusConditionTrue(s.Conditions, ibjv1.ConditionComplete) ||
		apimeta.IsStatusConditionTrue(s.Conditions, ibjv1.ConditionFailed)
}
