package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// refusedHexDigits are the last characters of a pod UID that the chaos
// policy refuses: 5 of the 16 hex digits, about 31% of creates. The API
// server gives a pod its UID before validating admission, so each create
// (each new UID) is refused or let through at random.
var refusedHexDigits = []string{"0", "3", "6", "9", "c"}

// refuseAtRandom installs a ValidatingAdmissionPolicy, bound to ns, that
// refuses about 31% of the creates of the job's pods, as a policy engine,
// a quota or a LimitRange refuses some creates of a busy namespace.
//
// Dry runs pass: the operator's webhook dry-runs a pod of the job when the
// job is created, and refuses the job when the API server finds that pod
// invalid, as it finds a pod this policy denies. A policy that refused that
// dry run at random would refuse the job itself one time in three, before a
// pod of it exists.
func refuseAtRandom(ctx SpecContext, ns, job string) {
	GinkgoHelper()
	name := "refuse-at-random-" + ns
	digits := "['" + strings.Join(refusedHexDigits, "','") + "']"
	policy, binding := harness.PodCreatePolicy(name, ns,
		fmt.Sprintf(`!request.dryRun && has(object.metadata.labels) && '%[1]s' in object.metadata.labels && object.metadata.labels['%[1]s'] == '%[2]s'`, ibjv1.JobNameLabel, job),
		fmt.Sprintf(`!%s.exists(d, object.metadata.uid.endsWith(d))`, digits), "refused at random by the chaos policy")
	Expect(k8sClient.Create(ctx, policy)).To(Succeed())
	Expect(k8sClient.Create(ctx, binding)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, binding))).To(Succeed())
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, policy))).To(Succeed())
	})
}

// failedCreates counts the job's FailedCreate events.
func failedCreates(ctx SpecContext, ns, job string) int {
	GinkgoHelper()
	var events eventsv1.EventList
	Expect(k8sClient.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
	n := 0
	for _, e := range events.Items {
		if e.Regarding.Name == job && e.Reason == "FailedCreate" {
			n++
		}
	}
	return n
}

var _ = Describe("Chaos from the cluster", Label("chaos"), func() {
	It("keeps a job exact while a policy refuses about 30% of its pod creates and running pods are deleted", func(ctx SpecContext) {
		cfg := loadChaosConfig()
		// A quarter of the SIGKILL run's size: every refusal costs the job
		// a retry of its sync.
		cfg.indexes /= 4
		ns := newNamespace(ctx)
		refuseAtRandom(ctx, ns, "refused")
		run := startChaosRun(ctx, ns, "refused", cfg)
		figures := run.verify(ctx)
		refusals := failedCreates(ctx, ns, "refused")
		Expect(refusals).To(BeNumerically(">", 0), "the policy refused no create: the run tested nothing")
		AddReportEntry("chaos refusals", fmt.Sprintf("%d FailedCreate events; %s", refusals, figures))
	}, SpecTimeout(15*time.Minute))

	It("keeps a job exact while running pods are edited out of it (their job-name label removed) and others deleted", func(ctx SpecContext) {
		cfg := loadChaosConfig()
		cfg.indexes /= 4
		ns := newNamespace(ctx)
		run := startChaosRun(ctx, ns, "edited", cfg)
		cs, err := kubernetes.NewForConfig(cluster.Config)
		Expect(err).NotTo(HaveOccurred())
		editCtx, stopEdits := context.WithCancel(context.Background())
		ed := startEditor(editCtx, cs, ns, run.sim, rand.New(rand.NewPCG(cfg.seed, 4)), 300*time.Millisecond)
		DeferCleanup(func() { stopEdits(); ed.wg.Wait() })
		Eventually(run.terminal).WithContext(ctx).WithTimeout(10 * time.Minute).WithPolling(time.Second).Should(BeTrue())
		stopEdits()
		ed.wg.Wait()
		edited := ed.edited()
		run.edited = sets.New[string]()
		for uid := range edited {
			run.edited.Insert(string(uid))
		}
		figures := run.verify(ctx)
		Expect(edited).NotTo(BeEmpty(), "no pod was edited: the run tested nothing")

		By("every edited pod is released: no finalizer of the operator, no controller reference to the job")
		job := getJob(ctx, ns, "edited")
		Eventually(func(g Gomega) {
			for uid, name := range edited {
				p := &corev1.Pod{}
				g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p)).To(Succeed())
				g.Expect(p.UID).To(Equal(uid))
				g.Expect(hasTrackingFinalizer(p)).To(BeFalse(), "pod %s", name)
				g.Expect(metav1.IsControlledBy(p, job)).To(BeFalse(), "pod %s", name)
			}
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		AddReportEntry("chaos edits", fmt.Sprintf("%d running pods edited out of the job and released; %s", len(edited), figures))
	}, SpecTimeout(15*time.Minute))
})

// editor removes the job-name label of a running pod now and then, as a
// careless user debugging a pod does: the operator must release the pod,
// never count it, and run its index again.
type editor struct {
	mu    sync.Mutex
	names map[types.UID]string
	wg    sync.WaitGroup
}

// startEditor edits sim's running pods at random until ctx ends, each with
// a JSON patch that tests that the pod has not ended (the chaos simulator
// writes a pod's status once, at its end: until then it is Pending), so
// that a pod is edited only before its end.
func startEditor(ctx context.Context, cs kubernetes.Interface, ns string, sim *podsim.Simulator, rng *rand.Rand, interval time.Duration) *editor {
	e := &editor{names: map[types.UID]string{}}
	patch := []byte(`[{"op":"test","path":"/status/phase","value":"Pending"},` +
		`{"op":"remove","path":"/metadata/labels/` + strings.ReplaceAll(ibjv1.JobNameLabel, "/", "~1") + `"}]`)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval + time.Duration(rng.Int64N(int64(2*interval)))):
			}
			running := sim.Running()
			if len(running) == 0 {
				continue
			}
			pod := running[rng.IntN(len(running))]
			if _, err := cs.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.JSONPatchType, patch, metav1.PatchOptions{}); err == nil {
				e.mu.Lock()
				e.names[pod.UID] = pod.Name
				e.mu.Unlock()
			}
		}
	}()
	return e
}

// edited returns the pods edited, by UID.
func (e *editor) edited() map[types.UID]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.names)
}
