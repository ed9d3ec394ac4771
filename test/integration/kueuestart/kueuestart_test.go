package kueuestart_test

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	ibjkueue "github.com/indexed-batch-job/indexed-batch-job/internal/kueue"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kueueinprocess"
)

const (
	queueNameLabel = "kueue.x-k8s.io/queue-name"
	timeout        = 60 * time.Second
	poll           = 100 * time.Millisecond
)

// The specs run in order: the first installs Kueue's CRDs, which stay.
var _ = Describe("The Kueue integration", Ordered, func() {
	var ns string
	BeforeEach(func() {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ibj-kueuestart-"}}
		Expect(k8sClient.Create(ctx, n)).To(Succeed())
		ns = n.Name
	})

	It("starts inside the running operator once Kueue's CRDs are installed, and Kueue's reconciler makes Workloads", func() {
		By("running the operator as a Pod it knows, which the integration's events are about")
		pod := operatorPod(ns)
		op := startOperator(ibjkueue.Options{PodName: pod.Name, PodNamespace: pod.Namespace})
		Expect(op.integration.State()).To(Equal(ibjkueue.StateWaiting))
		Expect(reportedState()).To(Equal(ibjkueue.StateWaiting))

		By("without Kueue: a job labelled with a queue name is created as it is, and runs")
		before := harness.MakeIndexedBatchJob("before", ns).Label(queueNameLabel, "queue").Obj()
		Expect(k8sClient.Create(ctx, before)).To(Succeed())
		Expect(ptr.Deref(before.Spec.Suspend, false)).To(BeFalse(), "nothing queues it while Kueue is not installed")
		DeferCleanup(startKubelet(ns, "before").Stop)
		Eventually(complete(ns, "before"), timeout, poll).Should(Succeed())
		Expect(op.integration.State()).To(Equal(ibjkueue.StateWaiting))

		By("installing Kueue's CRDs under the running operator")
		kueueDir, err := kueueinprocess.ModuleDir()
		Expect(err).NotTo(HaveOccurred())
		_, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
			Paths: []string{kueueinprocess.CRDDir(kueueDir)}, ErrorIfPathMissing: true,
		})
		Expect(err).NotTo(HaveOccurred())
		Eventually(op.integration.State, timeout, poll).Should(Equal(ibjkueue.StateRunning))
		Expect(reportedState()).To(Equal(ibjkueue.StateRunning))
		op.running()

		By("a job labelled with a queue name is now created suspended, and gets its Workload")
		queued := harness.MakeIndexedBatchJob("queued", ns).Label(queueNameLabel, "queue").Obj()
		Expect(k8sClient.Create(ctx, queued)).To(Succeed())
		Expect(ptr.Deref(queued.Spec.Suspend, false)).To(BeTrue(), "the webhook queues it for Kueue")
		Eventually(func(g Gomega) {
			wl := workloadOf(g, ns, queued.UID)
			g.Expect(wl).NotTo(BeNil(), "the Workload of the queued job")
			g.Expect(wl.Spec.QueueName).To(Equal(kueuev1beta2.LocalQueueName("queue")))
			g.Expect(wl.Spec.PodSets).To(HaveLen(1))
			g.Expect(wl.Spec.PodSets[0].Count).To(Equal(int32(1)))
		}, timeout, poll).Should(Succeed())
		// No Kueue runs here to admit it.
		Consistently(func(g Gomega) {
			j := &ibjv1.IndexedBatchJob{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(queued), j)).To(Succeed())
			g.Expect(ptr.Deref(j.Spec.Suspend, false)).To(BeTrue())
			g.Expect(j.Status.Active).To(BeZero())
		}, 2*time.Second, poll).Should(Succeed())

		By("recording that it started, about the operator's Pod")
		Eventually(func() []eventsv1.Event { return eventsAbout(pod.UID, ibjkueue.ReasonStarted) }, timeout, poll).
			Should(ContainElement(HaveField("Type", corev1.EventTypeNormal)))
		op.running()
	})

	It("keeps the operator running while the integration fails to start, says why, and starts it on a later try", func() {
		var attempts atomic.Int32
		var failing atomic.Bool
		failing.Store(true)
		op := startOperator(ibjkueue.Options{
			// No Pod: the events are about the IndexedBatchJob CRD.
			NewController: func(ctx context.Context, mgr ctrl.Manager, s ibjkueue.Settings) (manager.Runnable, error) {
				if attempts.Add(1) == 1 {
					panic("injected panic in the integration's setup")
				}
				if failing.Load() {
					return nil, errors.New("injected failure: the integration cannot start")
				}
				return ibjkueue.NewController(ctx, mgr, s)
			},
		})

		By("reporting the failure: state, metric, a Warning event about the CRD, and retries")
		Eventually(op.integration.State, timeout, poll).Should(Equal(ibjkueue.StateFailed))
		Expect(reportedState()).To(Equal(ibjkueue.StateFailed))
		crd := &metav1.PartialObjectMetadata{}
		crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
		Expect(k8sClient.Get(ctx, types.NamespacedName{Name: "indexedbatchjobs.batch.indexedjob.dev"}, crd)).To(Succeed())
		// One event, whose note is the first failure's, and a series that
		// counts the retries that failed again (events.k8s.io keeps a
		// repeated event as one, with a count).
		Eventually(func() []eventsv1.Event { return eventsAbout(crd.UID, ibjkueue.ReasonFailed) }, timeout, poll).Should(
			ContainElement(SatisfyAll(
				HaveField("Type", corev1.EventTypeWarning),
				HaveField("Note", ContainSubstring("panic: injected panic in the integration's setup")),
				WithTransform(occurrences, BeNumerically(">=", 2)),
			)))
		Expect(attempts.Load()).To(BeNumerically(">=", 2))

		By("the rest runs on: the webhook admits jobs and a job without a queue name runs to completion")
		plain := harness.MakeIndexedBatchJob("plain", ns).Completions(2).Parallelism(2).Obj()
		Expect(k8sClient.Create(ctx, plain)).To(Succeed())
		DeferCleanup(startKubelet(ns, "plain").Stop)
		Eventually(complete(ns, "plain"), timeout, poll).Should(Succeed())
		queued := harness.MakeIndexedBatchJob("queued", ns).Label(queueNameLabel, "queue").Obj()
		Expect(k8sClient.Create(ctx, queued)).To(Succeed())
		Expect(ptr.Deref(queued.Spec.Suspend, false)).To(BeTrue(), "Kueue's API is served: the job waits for Kueue, suspended")
		Consistently(func(g Gomega) { g.Expect(workloadOf(g, ns, queued.UID)).To(BeNil()) }, 2*time.Second, poll).Should(Succeed())
		Expect(op.integration.State()).To(Equal(ibjkueue.StateFailed))
		op.running()

		By("a later try starts it, in the same manager")
		failing.Store(false)
		Eventually(op.integration.State, timeout, poll).Should(Equal(ibjkueue.StateRunning))
		Expect(reportedState()).To(Equal(ibjkueue.StateRunning))
		Eventually(func(g Gomega) { g.Expect(workloadOf(g, ns, queued.UID)).NotTo(BeNil()) }, timeout, poll).Should(Succeed())
		Eventually(func() []eventsv1.Event { return eventsAbout(crd.UID, ibjkueue.ReasonStarted) }, timeout, poll).ShouldNot(BeEmpty())
		op.running()
	})

	It("with Kueue's default settings (manageJobsWithoutQueueName off), leaves a job without a queue name alone", func() {
		op := startOperator(ibjkueue.Options{})
		Eventually(op.integration.State, timeout, poll).Should(Equal(ibjkueue.StateRunning))
		// The namespace has no LocalQueue named default, which would give
		// the job its name (internal/kueue's TestDefaulterAppliesKueuesSettings).
		plain := harness.MakeIndexedBatchJob("plain", ns).Completions(2).Parallelism(2).Obj()
		Expect(k8sClient.Create(ctx, plain)).To(Succeed())
		Expect(ptr.Deref(plain.Spec.Suspend, false)).To(BeFalse(), "created as it is")
		Expect(plain.Labels).NotTo(HaveKey(queueNameLabel))
		DeferCleanup(startKubelet(ns, "plain").Stop)
		Eventually(complete(ns, "plain"), timeout, poll).Should(Succeed())
		Consistently(func(g Gomega) { g.Expect(workloadOf(g, ns, plain.UID)).To(BeNil()) }, 2*time.Second, poll).Should(Succeed())

		By("a job with a queue name beside it is Kueue's, as before")
		queued := harness.MakeIndexedBatchJob("queued", ns).Label(queueNameLabel, "queue").Obj()
		Expect(k8sClient.Create(ctx, queued)).To(Succeed())
		Expect(ptr.Deref(queued.Spec.Suspend, false)).To(BeTrue())
		Eventually(func(g Gomega) { g.Expect(workloadOf(g, ns, queued.UID)).NotTo(BeNil()) }, timeout, poll).Should(Succeed())
		op.running()
	})
})

// operatorPod creates a Pod standing for the operator's own (envtest runs
// no kubelet: it never starts).
func operatorPod(ns string) *corev1.Pod {
	GinkgoHelper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "indexed-batch-job-controller-manager-0", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "manager"}}},
	}
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	return pod
}

// complete succeeds once the job is Complete.
func complete(ns, name string) func(g Gomega) {
	return func(g Gomega) {
		j := &ibjv1.IndexedBatchJob{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, j)).To(Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(j.Status.Conditions, ibjv1.ConditionComplete)).To(BeTrue(), "job %s complete", name)
	}
}

// workloadOf is the Workload in ns controlled by the object of uid, or nil.
func workloadOf(g Gomega, ns string, uid types.UID) *kueuev1beta2.Workload {
	var list kueuev1beta2.WorkloadList
	g.Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	for i := range list.Items {
		if owner := metav1.GetControllerOf(&list.Items[i]); owner != nil && owner.UID == uid {
			return &list.Items[i]
		}
	}
	return nil
}

// eventsAbout lists the events (events.k8s.io, in any namespace) with
// reason about the object of uid.
func eventsAbout(uid types.UID, reason string) []eventsv1.Event {
	var list eventsv1.EventList
	Expect(k8sClient.List(ctx, &list)).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.UID == uid && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// occurrences is how many times an event was recorded.
func occurrences(e eventsv1.Event) int32 {
	if e.Series == nil {
		return 1
	}
	return e.Series.Count
}

// reportedState is the state the indexedbatchjob_kueue_integration gauge
// of the operator's metrics endpoint reports (the one at 1), or "" if not
// exactly one is.
func reportedState() ibjkueue.State {
	GinkgoHelper()
	families, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	var on []ibjkueue.State
	for _, f := range families {
		if f.GetName() != "indexedbatchjob_kueue_integration" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetGauge().GetValue() == 1 {
				for _, l := range m.GetLabel() {
					if l.GetName() == "state" {
						on = append(on, ibjkueue.State(l.GetValue()))
					}
				}
			}
		}
	}
	if len(on) != 1 {
		return ""
	}
	return on[0]
}
