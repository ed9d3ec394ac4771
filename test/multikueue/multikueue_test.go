package multikueue

import (
	"context"
	"fmt"
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
)

const (
	timeout = 2 * time.Minute
	poll    = 200 * time.Millisecond
	// prebuiltWorkloadLabel names, on a worker's copy, the Workload
	// MultiKueue created for it there.
	prebuiltWorkloadLabel = "kueue.x-k8s.io/prebuilt-workload-name"
)

var _ = Describe("MultiKueue", func() {
	It("runs a job created on the manager on the worker Kueue picks, and mirrors its status, exact, as it goes and at its end", func(ctx SpecContext) {
		ns := newQueues(ctx, false)
		job := queuedJob(ns, "mirrored", 6, 3, "2s").BackoffLimitPerIndex(1).
			PodAnnotation(kwokcluster.FailIndexesAnnotation, "5").Obj()
		Expect(federation.Manager.Client.Create(ctx, job)).To(Succeed())

		By("the manager's defaulting webhook hands the job to MultiKueue")
		Expect(job.Spec.ManagedBy).To(Equal(ptr.To(kueuev1beta2.MultiKueueControllerName)))

		By("one worker gets a copy: without managedBy, with the Workload MultiKueue made for it there")
		worker, copy := dispatched(ctx, ns, job.Name)
		Expect(copy.Spec.ManagedBy).To(BeNil())
		Expect(copy.Labels).To(HaveKeyWithValue(kueuev1beta2.MultiKueueOriginLabel, multikueue.Origin))
		Expect(copy.Labels).To(HaveKey(prebuiltWorkloadLabel))
		Expect(copy.Spec.Template).To(Equal(job.Spec.Template), "the template as created on the manager")

		By("the manager's copy follows the worker's as the job runs")
		var progress []ibjv1.IndexedBatchJobStatus
		Eventually(func(g Gomega) {
			got := get(g, ctx, federation.Manager.Client, ns, job.Name)
			if len(progress) == 0 || !cmp.Equal(progress[len(progress)-1], got.Status) {
				progress = append(progress, got.Status)
			}
			g.Expect(apimeta.IsStatusConditionTrue(got.Status.Conditions, ibjv1.ConditionFailed)).To(BeTrue(), "Failed")
		}, timeout, poll).Should(Succeed())
		running := 0
		for _, s := range progress {
			if s.Active > 0 && len(s.Conditions) > 0 && !apimeta.IsStatusConditionTrue(s.Conditions, ibjv1.ConditionFailed) {
				running++
			}
		}
		Expect(running).To(BeNumerically(">", 0), "the manager's copy never showed the job running: %+v", progress)

		By("at its end the manager's status is the worker's, exact")
		var final *ibjv1.IndexedBatchJob
		Eventually(func(g Gomega) {
			final = get(g, ctx, federation.Manager.Client, ns, job.Name)
			remote := get(g, ctx, worker.Client, ns, job.Name)
			g.Expect(cmp.Diff(remote.Status, final.Status)).To(BeEmpty(), "manager's status (-worker +manager)")
		}, timeout, poll).Should(Succeed())
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

	It("runs a job again on another worker when its worker is lost, counting no index twice", func(ctx SpecContext) {
		ns := newQueues(ctx, false)
		job := queuedJob(ns, "lost", 4, 2, "5s").Obj()
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
		var final *ibjv1.IndexedBatchJob
		Eventually(func(g Gomega) {
			final = get(g, ctx, federation.Manager.Client, ns, job.Name)
			g.Expect(apimeta.IsStatusConditionTrue(final.Status.Conditions, ibjv1.ConditionComplete)).To(BeTrue(), "Complete")
			remote := get(g, ctx, other.Client, ns, job.Name)
			g.Expect(cmp.Diff(remote.Status, final.Status)).To(BeEmpty(), "manager's status (-%s +manager)", other.Name)
		}, timeout, poll).Should(Succeed())
		Expect(final.Status.Succeeded).To(BeEquivalentTo(4), "each index counted once (%d were counted from %s before it was lost)", before.Succeeded, lost.Name)
		Expect(final.Status.CompletedIndexes).To(Equal("0-3"))
		Expect(final.Status.Failed).To(BeZero())

		By("once " + lost.Name + " is back and the job deleted, neither worker keeps a copy")
		Expect(lost.Cluster.StartAPIServer(ctx)).To(Succeed())
		restarted = true
		Expect(federation.Manager.Client.Delete(ctx, final)).To(Succeed())
		Eventually(func(g Gomega) {
			for _, w := range federation.Workers {
				g.Expect(exists(ctx, w, ns, job.Name)).To(BeFalse(), "a copy on %s", w.Name)
				g.Expect(pods(ctx, w, ns, job.Name)).To(BeEmpty(), "pods on %s", w.Name)
			}
		}, 2*timeout, poll).Should(Succeed())
	})

	It("leaves a job whose queue is not MultiKueue's to the manager's own cluster", func(ctx SpecContext) {
		ns := newQueues(ctx, true)
		job := queuedJob(ns, "local", 2, 2, "1s").Obj()
		Expect(federation.Manager.Client.Create(ctx, job)).To(Succeed())
		Expect(job.Spec.ManagedBy).To(BeNil())
		Eventually(func(g Gomega) {
			got := get(g, ctx, federation.Manager.Client, ns, job.Name)
			g.Expect(apimeta.IsStatusConditionTrue(got.Status.Conditions, ibjv1.ConditionComplete)).To(BeTrue(), "Complete")
			g.Expect(got.Status.Succeeded).To(BeEquivalentTo(2))
		}, timeout, poll).Should(Succeed())
		Expect(pods(ctx, federation.Manager, ns, job.Name)).To(HaveLen(2), "its pods ran on the manager")
		for _, w := range federation.Workers {
			Expect(exists(ctx, w, ns, job.Name)).To(BeFalse(), "a copy on %s", w.Name)
		}
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

