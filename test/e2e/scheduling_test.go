package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/workloadapi"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

// The scheduling specs run each part of spec.scheduling on a cluster of
// their own, kube-scheduler placing the pods, and the same job as a
// batch/v1 Job with the same spec.scheduling right after it, placed by the
// same kube-scheduler and run by kube-controller-manager's Job controller
// (gate WorkloadWithJob). Four kwok nodes of 2 CPUs, two per zone
// (kwok-node-0 and 1 in zone-a, 2 and 3 in zone-b); each part cordons
// nodes or places a blocker to make its point and undoes it after. Every
// component runs with controlplane.WorkloadSchedulingFeatureGates and
// WorkloadWithJob. A part compares what kube-scheduler did with both jobs'
// pods (the node of each index, in each generation) and how both jobs
// ended, and prints them as a table.
var _ = Describe("Scheduling beside batch/v1", Label("gang", "scheduling"), Ordered, ContinueOnFailure, func() {
	var (
		sc  *kwokcluster.Cluster
		c   client.Client
		all []partResult
	)

	BeforeAll(func(ctx SpecContext) {
		minor, err := harness.ControlPlaneMinor(controlplane.BinDir(root))
		Expect(err).NotTo(HaveOccurred())
		if minor < harness.WorkloadAPIMinor {
			Skip(fmt.Sprintf("kube-apiserver 1.%d cannot serve the Workload API (1.%d or later)", minor, harness.WorkloadAPIMinor))
		}
		sc, c = startSchedulingCluster(ctx)
		By("labelling the zones: kwok-node-0 and 1 in zone-a, 2 and 3 in zone-b")
		for i, n := range sc.NodeNames {
			setNode(ctx, c, n, func(node *corev1.Node) { node.Labels[kwokcluster.ZoneLabel] = zoneOf(i) })
		}
		Expect(c.Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: highPriority}, Value: 1000})).To(Succeed())
	})

	AfterAll(func() {
		if len(all) == 0 {
			return
		}
		table := placementsTable(all)
		GinkgoWriter.Printf("placements, IndexedBatchJob against batch/v1 Job:\n%s", table)
		AddReportEntry("placements", table)
	})

	// pair runs the same job as an IndexedBatchJob, then as a batch/v1
	// Job, each in a namespace of its own, through play, and checks that
	// kube-scheduler placed both alike and both ended alike.
	pair := func(ctx context.Context, part string, job *ibjv1.IndexedBatchJob, play func(context.Context, *side) sideResult) partResult {
		GinkgoHelper()
		Expect(sc.Check()).To(Succeed(), "a process of the cluster exited")
		r := partResult{part: part}
		for _, kind := range []string{kindIBJ, kindBuiltin} {
			s := &side{kind: kind, c: c, cluster: sc}
			s.ns = testutil.NewNamespace(ctx, c, testutil.NamespaceOptions{Prefix: "ibj-sched-"})
			s.watch = watchJobPods(sc, s.ns)
			s.job = job.DeepCopy()
			s.job.Namespace = s.ns
			By(fmt.Sprintf("%s: as %s in %s", part, kind, s.ns))
			got := play(ctx, s)
			got.kind = kind
			r.sides = append(r.sides, got)
		}
		all = append(all, r)
		ours, builtin := r.sides[0], r.sides[1]
		By(part + ": the IndexedBatchJob placed and ended as the batch/v1 Job")
		Expect(ours.perNode()).To(Equal(builtin.perNode()), "pods per node in each generation")
		Expect(ours.perZone()).To(Equal(builtin.perZone()), "pods per zone in each generation")
		Expect(ours.status).To(Equal(builtin.status), "final status")
		return r
	}

	It("a) gang: binds none while fewer than minCount fit, all once they do", func(ctx SpecContext) {
		job := schedulingJob("3s").Gang(4).Obj()
		pair(ctx, "a) gang minCount 4", job, func(ctx context.Context, s *side) sideResult {
			cordon(ctx, s, 1, 2, 3)
			s.create(ctx)
			By("4 pods in the job's PodGroup, room for 2 of them on kwok-node-0: none bound")
			s.waitGrouped(ctx, 4)
			Consistently(func(g Gomega) int { return len(s.bound(g)) }).WithContext(ctx).
				WithTimeout(10*time.Second).WithPolling(100*time.Millisecond).Should(BeZero(), "a pod of the gang bound while only 2 of 4 fit")
			By("kwok-node-1 uncordoned, room for 4: all 4 bound")
			uncordon(ctx, s, 1)
			Eventually(func(g Gomega) int { return len(s.bound(g)) }).WithContext(ctx).
				WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(4))
			r := s.finish(ctx)
			Expect(r.perNode()).To(Equal([]string{twoNodes}))
			Expect(r.status.end).To(Equal(ibjv1.ConditionComplete))
			return r
		})
	})

	It("b) schedulingConstraints.topology: the whole group in one zone, the zone with room for it", func(ctx SpecContext) {
		job := schedulingJob("3s").Gang(4).Topology(kwokcluster.ZoneLabel).Obj()
		pair(ctx, "b) topology zone", job, func(ctx context.Context, s *side) sideResult {
			By("a blocker of 1 CPU on kwok-node-0: zone-a has room for 3 of the 4 pods, zone-b for 4")
			b := blocker(ctx, s, sc.NodeNames[0], kwokcluster.Forever)
			s.create(ctx)
			Eventually(func(g Gomega) int { return len(s.bound(g)) }).WithContext(ctx).
				WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(4))
			r := s.finish(ctx)
			Expect(s.c.Delete(ctx, b, client.GracePeriodSeconds(0))).To(Succeed())
			Expect(r.perZone()).To(Equal([]string{"zone-b×4"}), "every pod of the group in zone-b")
			Expect(r.status.end).To(Equal(ibjv1.ConditionComplete))
			return r
		})
	})

	It("c) disruptionMode all: a higher-priority pod preempts the whole group together", func(ctx SpecContext) {
		job := schedulingJob("20s").Gang(4).DisruptTogether(true).
			PodFailurePolicy(harness.OnPodCondition(batchv1.PodFailurePolicyActionIgnore, corev1.DisruptionTarget, corev1.ConditionTrue)).Obj()
		pair(ctx, "c) disruptionMode all", job, func(ctx context.Context, s *side) sideResult {
			cordon(ctx, s, 2, 3)
			s.create(ctx)
			By("the gang of 4 running on kwok-node-0 and 1, which it fills")
			Eventually(func(g Gomega) int { return len(s.running(g)) }).WithContext(ctx).
				WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(4))
			By("a pod of priority 1000 asking for 1 CPU, running 5 s: kube-scheduler preempts")
			preemptor := blocker(ctx, s, "", "5s")
			Eventually(func(g Gomega) string {
				g.Expect(c.Get(ctx, client.ObjectKeyFromObject(preemptor), preemptor)).To(Succeed())
				return preemptor.Spec.NodeName
			}).WithContext(ctx).WithTimeout(60*time.Second).WithPolling(100*time.Millisecond).ShouldNot(BeEmpty(), "the preemptor bound")
			r := s.finish(ctx)
			evicted, spread := s.watch.disrupted(0)
			r.note = fmt.Sprintf("%d of 4 pods of generation 0 evicted (%s), within %s", len(evicted), strings.Join(reasons(evicted), ","), spread.Round(10*time.Millisecond))
			By("every pod of the group evicted, together, as kube-scheduler's preemption victims")
			Expect(evicted).To(HaveLen(4), "pods of generation 0 with a DisruptionTarget condition: %v", evicted)
			for pod, reason := range evicted {
				Expect(reason).To(Equal("PreemptionByScheduler"), pod)
			}
			Expect(spread).To(BeNumerically("<", 5*time.Second), "the evictions were not together")
			By("the evictions ignored by the podFailurePolicy: a second generation, bound once the preemptor ended, completes")
			Expect(r.perNode()).To(Equal([]string{twoNodes, twoNodes}))
			Expect(r.status).To(Equal(jobStatus{end: ibjv1.ConditionComplete, reason: batchv1.JobReasonCompletionsReached, succeeded: 4}))
			return r
		})
	})

	It("d) resourceClaims: one claim for the group, allocated once, from the test's ResourceSlice", func(ctx SpecContext) {
		device := sc.NodeNames[3]
		publishDevices(ctx, c, device)
		// Pods of 100m CPU: the 4 fit on the one node where the device is.
		job := schedulingJob("3s").Gang(4).SharedClaim(sharedClaim, sharedClaimTemplate, true).
			Requests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}).Obj()
		job.Spec.Template.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: sharedClaim, ResourceClaimTemplateName: ptr.To(sharedClaimTemplate)}}
		job.Spec.Template.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: sharedClaim}}
		pair(ctx, "d) resourceClaims", job, func(ctx context.Context, s *side) sideResult {
			Expect(c.Create(ctx, claimTemplate(s.ns))).To(Succeed())
			s.create(ctx)
			Eventually(func(g Gomega) int { return len(s.bound(g)) }).WithContext(ctx).
				WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(4))
			claim := s.sharedClaim(ctx)
			r := s.finish(ctx)
			r.note = fmt.Sprintf("claim %s, device %s, reserved for %s", claim.name, claim.device, claim.reservedFor)
			By("one ResourceClaim in the namespace, allocated once, the one every pod of the group names")
			Expect(s.watch.claimsNamed()).To(Equal([]string{claim.name}), "the claims the pods name")
			Expect(claim.allocations).To(Equal(1), "allocations of the claim seen")
			Expect(r.perNode()).To(Equal([]string{device + "×4"}), "every pod where the device is")
			Expect(r.status.end).To(Equal(ibjv1.ConditionComplete))
			return r
		})
	})
})

// The two controllers of a pair, and the objects the specs share.
const (
	kindIBJ             = "IndexedBatchJob"
	kindBuiltin         = "batch/v1 Job"
	highPriority        = "ibj-e2e-high"
	deviceDriver        = "gpu.e2e.indexedjob.dev"
	deviceClass         = "ibj-e2e-gpu"
	sharedClaim         = "shared"
	sharedClaimTemplate = "shared-gpu"
	// twoNodes is a generation of 4 pods, two on each of kwok-node-0 and 1.
	twoNodes = "kwok-node-0×2 kwok-node-1×2"
)

// startSchedulingCluster starts the specs' cluster: four kwok nodes of 2
// CPUs, kube-scheduler, kube-controller-manager's Job and ResourceClaim
// controllers, every gate of spec.scheduling and WorkloadWithJob, and the
// operator.
func startSchedulingCluster(ctx context.Context) (*kwokcluster.Cluster, client.Client) {
	GinkgoHelper()
	sc := startSpecCluster(ctx, "scheduling", "etcd, kube-apiserver, kube-scheduler and four kwok nodes of 2 CPUs", kwokcluster.Options{
		Nodes: 4, KubeScheduler: true, WorkloadAPI: true,
		FeatureGates:    []string{controlplane.WorkloadSchedulingFeatureGates, "WorkloadWithJob=true"},
		NodeAllocatable: nodeCapacity("2", "8Gi"),
	})
	By("starting kube-controller-manager with the Job and ResourceClaim controllers")
	kcm, err := sc.StartComponent(controlplane.ControllerManager, controlplane.Component{Flags: []string{"--controllers=job-controller,resourceclaim-controller"}})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(sc.StopComponent(kcm)).To(Succeed()) })
	c, err := client.New(sc.Config, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	By("starting the operator against it")
	proc := startOperatorOn(sc)
	DeferCleanup(func() { Expect(proc.Stop(30 * time.Second)).To(Succeed()) })
	return sc, c
}

// schedulingJob is the 4-index job every part runs, 4 pods at once of 1
// CPU, each running for run.
func schedulingJob(run string) *harness.JobWrapper {
	return harness.MakeIndexedBatchJob("train", "").Completions(4).Parallelism(4).
		Requests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}).
		PodAnnotation(kwokcluster.DurationAnnotation, run)
}

// zoneOf is the zone of the i-th node: two nodes per zone.
func zoneOf(i int) string { return "zone-" + string(rune('a'+i/2)) }

// side is one job of a pair: the IndexedBatchJob or the batch/v1 Job, in
// a namespace of its own.
type side struct {
	kind    string
	ns      string
	job     *ibjv1.IndexedBatchJob
	c       client.Client
	cluster *kwokcluster.Cluster
	watch   *jobPodWatch
}

// create creates the side's job: the IndexedBatchJob as built, or the
// batch/v1 Job with the same spec.
func (s *side) create(ctx context.Context) {
	GinkgoHelper()
	if s.kind == kindIBJ {
		Expect(s.c.Create(ctx, s.job)).To(Succeed())
		return
	}
	Expect(s.c.Create(ctx, builtinJob(s.job))).To(Succeed())
}

// builtinJob is the batch/v1 Job of job's spec: completions, parallelism,
// backoffLimit, podFailurePolicy, template and scheduling (the same JSON on
// both), Indexed. Unstructured, since this module's k8s.io/api predates
// the Job's spec.scheduling.
func builtinJob(job *ibjv1.IndexedBatchJob) *unstructured.Unstructured {
	GinkgoHelper()
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&job.Spec)
	Expect(err).NotTo(HaveOccurred())
	out := map[string]any{"completionMode": string(batchv1.IndexedCompletion)}
	for _, field := range []string{"completions", "parallelism", "backoffLimit", "podFailurePolicy", "template", "scheduling"} {
		if v, ok := spec[field]; ok {
			out[field] = v
		}
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": out}}
	u.SetGroupVersionKind(batchv1.SchemeGroupVersion.WithKind("Job"))
	u.SetNamespace(job.Namespace)
	u.SetName(job.Name)
	return u
}

// waitGrouped waits until the job has n pods, each naming the one
// PodGroup in the namespace, which its controller made.
func (s *side) waitGrouped(ctx context.Context, n int) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		groups := &unstructured.UnstructuredList{}
		groups.SetGroupVersionKind(workloadapi.GroupVersion.WithKind("PodGroupList"))
		g.Expect(s.c.List(ctx, groups, client.InNamespace(s.ns))).To(Succeed())
		names := make([]string, 0, len(groups.Items))
		for _, pg := range groups.Items {
			names = append(names, pg.GetName())
		}
		g.Expect(names).To(HaveLen(1), "the PodGroups")
		pods := s.pods(g)
		g.Expect(pods).To(HaveLen(n))
		for _, p := range pods {
			g.Expect(p.Spec.SchedulingGroup).NotTo(BeNil(), p.Name)
			g.Expect(p.Spec.SchedulingGroup.PodGroupName).To(Equal(ptr.To(names[0])), p.Name)
		}
	}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// pods are the job's pods now (those with a completion index).
func (s *side) pods(g Gomega) []corev1.Pod {
	var list corev1.PodList
	g.Expect(s.c.List(context.Background(), &list, client.InNamespace(s.ns))).To(Succeed())
	return slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return indexOf(&p) == "" })
}

// bound are the job's pods kube-scheduler bound.
func (s *side) bound(g Gomega) []corev1.Pod {
	return slices.DeleteFunc(s.pods(g), func(p corev1.Pod) bool { return p.Spec.NodeName == "" })
}

// running are the job's pods kwok runs.
func (s *side) running(g Gomega) []corev1.Pod {
	return slices.DeleteFunc(s.pods(g), func(p corev1.Pod) bool { return p.Status.Phase != corev1.PodRunning })
}

// finish waits for the job's end and sums up the side: where each
// generation of its pods ran, and its final status.
func (s *side) finish(ctx context.Context) sideResult {
	GinkgoHelper()
	var st jobStatus
	Eventually(func(g Gomega) {
		var ok bool
		st, ok = s.status(ctx, g)
		g.Expect(ok).To(BeTrue(), "the %s has not ended: %+v", s.kind, st)
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	return sideResult{generations: s.watch.placements(), status: st, zones: s.zones(ctx)}
}

// jobStatus is how a job ended: its Complete or Failed condition and reason,
// and its counts of succeeded and failed pods.
type jobStatus struct {
	end, reason       string
	succeeded, failed int32
}

func (st jobStatus) String() string {
	return fmt.Sprintf("%s (%s), succeeded %d, failed %d", st.end, st.reason, st.succeeded, st.failed)
}

// status reads the side's job.
func (s *side) status(ctx context.Context, g Gomega) (jobStatus, bool) {
	if s.kind == kindIBJ {
		var j ibjv1.IndexedBatchJob
		g.Expect(s.c.Get(ctx, client.ObjectKeyFromObject(s.job), &j)).To(Succeed())
		typ, reason, _, ok := terminal(j.Status.Conditions)
		return jobStatus{end: typ, reason: reason, succeeded: j.Status.Succeeded, failed: j.Status.Failed}, ok
	}
	var j batchv1.Job
	g.Expect(s.c.Get(ctx, client.ObjectKeyFromObject(s.job), &j)).To(Succeed())
	typ, reason, _, ok := batchTerminal(&j)
	return jobStatus{end: typ, reason: reason, succeeded: j.Status.Succeeded, failed: j.Status.Failed}, ok
}

// zones maps each node to its zone.
func (s *side) zones(ctx context.Context) map[string]string {
	GinkgoHelper()
	var nodes corev1.NodeList
	Expect(s.c.List(ctx, &nodes)).To(Succeed())
	out := map[string]string{}
	for _, n := range nodes.Items {
		out[n.Name] = n.Labels[kwokcluster.ZoneLabel]
	}
	return out
}

// cordon marks the nodes of these numbers unschedulable until the spec
// ends.
func cordon(ctx context.Context, s *side, nodes ...int) {
	GinkgoHelper()
	for _, i := range nodes {
		setNode(ctx, s.c, s.cluster.NodeNames[i], func(n *corev1.Node) { n.Spec.Unschedulable = true })
	}
	DeferCleanup(func(ctx context.Context) { uncordon(ctx, s, nodes...) })
}

// uncordon marks the nodes of these numbers schedulable.
func uncordon(ctx context.Context, s *side, nodes ...int) {
	GinkgoHelper()
	for _, i := range nodes {
		setNode(ctx, s.c, s.cluster.NodeNames[i], func(n *corev1.Node) { n.Spec.Unschedulable = false })
	}
}

// setNode changes a node, retrying on a conflict with kwok's writes.
func setNode(ctx context.Context, c client.Client, name string, change func(*corev1.Node)) {
	GinkgoHelper()
	Eventually(func() error {
		var n corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			return err
		}
		change(&n)
		return c.Update(ctx, &n)
	}).WithContext(ctx).WithTimeout(10 * time.Second).Should(Succeed())
}

// blocker creates a pod of no job in the side's namespace asking for 1
// CPU and running for run: bound to node, or, without one, placed by
// kube-scheduler at priority class highPriority. It is deleted when the
// spec ends.
func blocker(ctx context.Context, s *side, node, run string) *corev1.Pod {
	GinkgoHelper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "blocker", Namespace: s.ns, Annotations: map[string]string{kwokcluster.DurationAnnotation: run}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			NodeName:      node,
			Containers: []corev1.Container{{
				Name: "main", Image: harness.DefaultImage,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
			}},
		},
	}
	if node == "" {
		p.Name, p.Spec.PriorityClassName = "preemptor", highPriority
	}
	Expect(s.c.Create(ctx, p)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(client.IgnoreNotFound(s.c.Delete(ctx, p, client.GracePeriodSeconds(0)))).To(Succeed())
	})
	return p
}

// publishDevices creates the DeviceClass of the test's driver and a
// ResourceSlice of two devices on node, as a DRA driver on that node
// would publish them.
func publishDevices(ctx context.Context, c client.Client, node string) {
	GinkgoHelper()
	class := &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: deviceClass},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", deviceDriver)},
		}}},
	}
	slice := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   deviceDriver,
			Pool:     resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr.To(node),
			Devices:  []resourcev1.Device{{Name: "gpu-0"}, {Name: "gpu-1"}},
		},
	}
	for _, o := range []client.Object{class, slice} {
		Expect(c.Create(ctx, o)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(c.Delete(ctx, o))).To(Succeed()) })
	}
}

// claimTemplate is the ResourceClaimTemplate the group's claim is made
// from: one device of the test's class.
func claimTemplate(ns string) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: sharedClaimTemplate, Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: deviceClass}}},
		}}},
	}
}

// groupClaim is what a side's namespace holds of ResourceClaims: the one
// claim, its allocated device, what it is reserved for, and how many
// allocations of it the poll saw.
type groupClaim struct {
	name, device, reservedFor string
	allocations               int
}

// sharedClaim waits until the namespace holds exactly one ResourceClaim,
// allocated, and every pod of the job names it, then watches it until the
// job ends, counting the distinct allocations it had.
func (s *side) sharedClaim(ctx context.Context) groupClaim {
	GinkgoHelper()
	var gc groupClaim
	seen := map[string]bool{}
	read := func(g Gomega) {
		var claims resourcev1.ResourceClaimList
		g.Expect(s.c.List(ctx, &claims, client.InNamespace(s.ns))).To(Succeed())
		g.Expect(claims.Items).To(HaveLen(1), "ResourceClaims in %s", s.ns)
		cl := claims.Items[0]
		g.Expect(cl.Status.Allocation).NotTo(BeNil(), "claim %s allocated", cl.Name)
		g.Expect(cl.Status.Allocation.Devices.Results).To(HaveLen(1), "devices allocated")
		gc.name, gc.device = cl.Name, cl.Status.Allocation.Devices.Results[0].Device
		users := make([]string, 0, len(cl.Status.ReservedFor))
		for _, r := range cl.Status.ReservedFor {
			users = append(users, r.Resource+"/"+r.Name)
		}
		gc.reservedFor = strings.Join(users, ",")
		seen[string(cl.UID)+"/"+gc.device+"/"+timeText(cl.Status.Allocation.AllocationTimestamp)] = true
	}
	Eventually(func(g Gomega) {
		read(g)
		for _, p := range s.pods(g) {
			g.Expect(p.Status.ResourceClaimStatuses).To(ContainElement(corev1.PodResourceClaimStatus{Name: sharedClaim, ResourceClaimName: ptr.To(gc.name)}), p.Name)
		}
	}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	Eventually(func(g Gomega) {
		read(g)
		_, ended := s.status(ctx, g)
		g.Expect(ended).To(BeTrue())
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
	gc.allocations = len(seen)
	return gc
}

// timeText is a timestamp as text, "" for none.
func timeText(t *metav1.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// indexOf is a pod's completion index, from either controller's
// annotation, or "" for a pod of no job.
func indexOf(p *corev1.Pod) string {
	if i, ok := p.Labels[ibjv1.CompletionIndexLabel]; ok {
		return i
	}
	return p.Annotations[batchv1.JobCompletionIndexAnnotation]
}

// reasons are the distinct values of m, sorted.
func reasons(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// sideResult is what a side did: the node of each index in each
// generation of its pods (in creation order per index), its final status,
// and a note of what the part watched.
type sideResult struct {
	kind        string
	generations []map[string]string
	zones       map[string]string
	status      jobStatus
	note        string
}

// perNode counts each generation's pods per node, as "node×n" in node
// order.
func (r sideResult) perNode() []string {
	return r.count(func(node string) string { return node })
}

// perZone counts each generation's pods per zone.
func (r sideResult) perZone() []string {
	return r.count(func(node string) string { return r.zones[node] })
}

func (r sideResult) count(key func(node string) string) []string {
	out := make([]string, 0, len(r.generations))
	for _, gen := range r.generations {
		n := map[string]int{}
		for _, node := range gen {
			n[key(node)]++
		}
		parts := make([]string, 0, len(n))
		for k, v := range n {
			parts = append(parts, fmt.Sprintf("%s×%d", k, v))
		}
		sort.Strings(parts)
		out = append(out, strings.Join(parts, " "))
	}
	return out
}

// placed is each generation as "index:node ..." in index order.
func (r sideResult) placed() string {
	gens := make([]string, 0, len(r.generations))
	for g, gen := range r.generations {
		idx := make([]string, 0, len(gen))
		for i := range gen {
			idx = append(idx, i)
		}
		sort.Strings(idx)
		var parts []string
		for _, i := range idx {
			parts = append(parts, i+":"+strings.TrimPrefix(gen[i], "kwok-node-"))
		}
		gens = append(gens, fmt.Sprintf("gen %d: %s", g, strings.Join(parts, " ")))
	}
	return strings.Join(gens, "; ")
}

// partResult is one part's pair.
type partResult struct {
	part  string
	sides []sideResult
}

// placementsTable prints every part's pair, one row per controller.
func placementsTable(parts []partResult) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "part\tcontroller\tindex:node (kwok-node-N)\tper zone\tfinal status\tobserved")
	for _, p := range parts {
		for _, s := range p.sides {
			_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", p.part, s.kind, s.placed(), strings.Join(s.perZone(), "; "), s.status, s.note)
		}
	}
	_ = w.Flush()
	return b.String()
}
