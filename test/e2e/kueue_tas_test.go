package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

// The node labels of the spec's topology, from the highest level to the
// lowest.
const (
	blockLabel    = "topology.indexedjob.dev/block"
	rackLabel     = "topology.indexedjob.dev/rack"
	hostnameLabel = "kubernetes.io/hostname"
	// tasNodeLabel marks the spec's nodes (its value is the spec's
	// namespace): the ResourceFlavor selects them by it, and a taint of the
	// same key keeps the pods of other specs off them.
	tasNodeLabel = "e2e.indexedjob.dev/tas"
	// topologyGate is the scheduling gate Kueue puts on the pods of a
	// Workload it admitted with a topology assignment, until its
	// TopologyUngater gives each pod its domain.
	topologyGate = "kueue.x-k8s.io/topology"
)

// Topology-aware scheduling runs with Kueue's own manager (its scheduler
// and its TopologyUngater) and the operator's integration, on kwok nodes
// labelled by block and rack. The cluster's binder stands in for
// kube-scheduler: it binds a pod only once it has no scheduling gate, to a
// node that carries the labels of its nodeSelector, which is all that TAS
// needs of a scheduler when the topology's lowest level is the hostname.
var _ = Describe("Kueue's topology-aware scheduling", Label("kueue"), func() {
	It("places each index in the domain Kueue's topology assignment gives its rank, all within one rack", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		k := startKueue(ctx)

		By("creating six kwok nodes in two blocks and three racks; only rack r2 has room for the whole job")
		// cpus per node of each rack: the job asks for four pods of one cpu
		// in one rack. r1 has two cpus, r2 four, r3 (block b) two.
		racks := []struct {
			block, rack string
			cpus        string
		}{{"b1", "r1", "1"}, {"b1", "r2", "2"}, {"b2", "r3", "1"}}
		for _, r := range racks {
			for i := range 2 {
				createTASNode(ctx, ns, fmt.Sprintf("%s-%s-%s-%d", ns, r.block, r.rack, i), r.block, r.rack, r.cpus)
			}
		}

		By("creating a Topology (block, rack, hostname), a ResourceFlavor naming it, a ClusterQueue and a LocalQueue")
		Expect(kueueClient.Create(ctx, &kueuev1beta2.Topology{
			ObjectMeta: metav1.ObjectMeta{Name: ns},
			Spec: kueuev1beta2.TopologySpec{Levels: []kueuev1beta2.TopologyLevel{
				{NodeLabel: blockLabel}, {NodeLabel: rackLabel}, {NodeLabel: hostnameLabel},
			}},
		})).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(kueueClient.Delete(ctx, &kueuev1beta2.Topology{ObjectMeta: metav1.ObjectMeta{Name: ns}}))).To(Succeed())
		})
		testutil.CreateQueue(ctx, kueueClient, testutil.Queue{
			Name: ns, CPU: resource.MustParse("8"),
			Flavor: kueuev1beta2.ResourceFlavorSpec{
				NodeLabels:   map[string]string{tasNodeLabel: ns},
				TopologyName: ptr.To(kueuev1beta2.TopologyReference(ns)),
			},
			LocalQueue: &client.ObjectKey{Namespace: ns, Name: "queue"},
		}, timeout)

		By("creating a job of four indexes that requires one rack")
		job := harness.MakeIndexedBatchJob("tas", ns).Completions(4).Parallelism(4).
			Label(queueNameLabel, "queue").
			PodAnnotation(kueuev1beta2.PodSetRequiredTopologyAnnotation, rackLabel).
			Toleration(corev1.Toleration{Key: tasNodeLabel, Operator: corev1.TolerationOpEqual, Value: ns, Effect: corev1.TaintEffectNoSchedule}).
			Requests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}).
			PodAnnotation(kwokcluster.DurationAnnotation, "4s").Obj()
		pods := watchPods(ns, "tas")
		Expect(k8sClient.Create(ctx, job)).To(Succeed())

		By("Kueue admits the Workload with a topology assignment for the pod set, ranked by the completion index label")
		var wl *kueuev1beta2.Workload
		Eventually(func(g Gomega) {
			wl = workloadOfJob(g, ctx, ns, "tas")
			g.Expect(wl).NotTo(BeNil(), "the job's Workload")
			g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueuev1beta2.WorkloadAdmitted)).To(BeTrue(), "Admitted")
		}, timeout, poll).Should(Succeed())
		Expect(wl.Spec.PodSets).To(HaveLen(1))
		Expect(wl.Spec.PodSets[0].TopologyRequest).To(Equal(&kueuev1beta2.PodSetTopologyRequest{
			Required: ptr.To(rackLabel), PodIndexLabel: ptr.To(ibjv1.CompletionIndexLabel),
		}))
		Expect(wl.Status.Admission.PodSetAssignments).To(HaveLen(1))
		assignment := wl.Status.Admission.PodSetAssignments[0].TopologyAssignment
		Expect(assignment).NotTo(BeNil(), "a topology assignment")
		ranks := rankDomains(assignment)
		Expect(ranks).To(HaveLen(4), "a domain for each of the four ranks")
		AddReportEntry("topology assignment", fmt.Sprintf("levels %v, domain of each rank %v", assignment.Levels, ranks))

		By("the job's template carries the topology gate Kueue merged in at admission, so each pod starts gated")
		// The integration's reconciler resumes the job, with what admission
		// assigned merged into its template in the same write, shortly after
		// the Workload is Admitted.
		var admitted *ibjv1.IndexedBatchJob
		Eventually(func(g Gomega) {
			admitted = getJob(ctx, ns, "tas")
			g.Expect(ptr.Deref(admitted.Spec.Suspend, true)).To(BeFalse(), "the job resumed")
		}, timeout, poll).Should(Succeed())
		Expect(admitted.Spec.Template.Spec.SchedulingGates).To(ContainElement(corev1.PodSchedulingGate{Name: topologyGate}))
		Expect(admitted.Spec.Template.Spec.NodeSelector).To(HaveKeyWithValue(tasNodeLabel, ns), "the flavor's node labels")
		for _, key := range assignment.Levels {
			Expect(admitted.Spec.Template.Spec.NodeSelector).NotTo(HaveKey(key),
				"the template selects no domain: Kueue's TopologyUngater adds each pod's own")
		}

		By("the job completes, each index run once")
		testutil.WaitForJobCondition(ctx, k8sClient, ns, "tas", ibjv1.ConditionComplete, timeout)
		j := getJob(ctx, ns, "tas")
		Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).To(Equal(ibjv1.ReasonCompletionsReached))
		Expect(j.Status.Phase).To(Equal(ibjv1.PhaseComplete))
		Expect(j.Status.Succeeded).To(Equal(int32(4)))
		Expect(j.Status.CompletedIndexes).To(Equal("0-3"))
		Expect(j.Status.Failed).To(BeZero())
		Expect(j.Status.Active).To(BeZero())
		Expect(j.Status.FailedIndexes).To(BeNil())
		Expect(deref(j.Status.Ready)).To(BeZero())
		pods.Stop()
		for i := range 4 {
			Expect(pods.RunsOf(i)).To(Equal(1), "index %d run by one pod: the operator replaced no pod Kueue ungated", i)
		}
		Expect(pods.Doubles()).To(BeEmpty())

		By("each index ran on a node of the domain of its rank, without gates, with the domain's node selector")
		tasPods := jobPods(ctx, ns, "tas")
		nodesUsed := make([]string, 0, len(tasPods))
		racksUsed := map[string]bool{}
		for _, p := range tasPods {
			rank, err := strconv.Atoi(p.Labels[ibjv1.CompletionIndexLabel])
			Expect(err).NotTo(HaveOccurred())
			Expect(p.Name).To(Equal(fmt.Sprintf("tas-%d-0", rank)), "the first pod of its index")
			Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded), p.Name)
			Expect(p.Spec.SchedulingGates).To(BeEmpty(), "%s: ungated by Kueue", p.Name)
			node := &corev1.Node{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, node)).To(Succeed(), p.Name)
			for l, key := range assignment.Levels {
				Expect(p.Spec.NodeSelector).To(HaveKeyWithValue(key, ranks[rank][l]), "%s (rank %d): Kueue's node selector for its domain", p.Name, rank)
				Expect(node.Labels).To(HaveKeyWithValue(key, ranks[rank][l]), "%s (rank %d) on node %s", p.Name, rank, node.Name)
			}
			Expect(p.Spec.NodeSelector).To(HaveKeyWithValue(tasNodeLabel, ns), p.Name)
			// The API server's record of who wrote the pod: the operator
			// created it (its labels); another manager, Kueue's
			// TopologyUngater, wrote its node selector (an atomic map) when
			// it removed the gate.
			creator, selectorWriter := "", ""
			for _, m := range p.ManagedFields {
				if m.FieldsV1 == nil || m.Subresource != "" {
					continue
				}
				raw := m.FieldsV1.GetRawString()
				if strings.Contains(raw, `"f:`+ibjv1.CompletionIndexLabel+`"`) {
					creator = m.Manager
				}
				if strings.Contains(raw, `"f:nodeSelector"`) {
					selectorWriter = m.Manager
				}
			}
			Expect(creator).NotTo(BeEmpty(), "%s: the operator's create in its managed fields", p.Name)
			Expect(selectorWriter).NotTo(BeElementOf("", creator), "%s: its node selector last written by another manager than the operator", p.Name)
			nodesUsed = append(nodesUsed, fmt.Sprintf("%s (rank %d) on %s, created by %q, node selector %v written by %q",
				p.Name, rank, node.Name, creator, p.Spec.NodeSelector, selectorWriter))
			racksUsed[node.Labels[blockLabel]+"/"+node.Labels[rackLabel]] = true
		}
		AddReportEntry("placement", nodesUsed)
		Expect(racksUsed).To(Equal(map[string]bool{"b1/r2": true}), "all indexes within the one rack with room for them")

		By("the Workload finishes; Kueue was never refused a request")
		Eventually(func(g Gomega) {
			wl := workloadOfJob(g, ctx, ns, "tas")
			g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueuev1beta2.WorkloadFinished)).To(BeTrue(), "Workload Finished")
		}, timeout, poll).Should(Succeed())
		Expect(k.log()).NotTo(ContainSubstring("forbidden"))
	})
})

// createTASNode creates a kwok node of the spec's topology, with cpus to
// allocate (and room for 110 pods), tainted so that only the spec's pods
// run there, and deletes it when the spec ends.
func createTASNode(ctx context.Context, ns, name, block, rack, cpus string) {
	GinkgoHelper()
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpus),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			// kwok plays the nodes with this annotation (kwokcluster).
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels: map[string]string{
				hostnameLabel: name, blockLabel: block, rackLabel: rack, tasNodeLabel: ns,
				"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok",
			},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: tasNodeLabel, Value: ns, Effect: corev1.TaintEffectNoSchedule}}},
		// A node's status is kept on create (a kubelet registers its node
		// so); kwok's node stage keeps the allocatable it finds.
		Status: corev1.NodeStatus{Capacity: resources, Allocatable: resources},
	}
	Expect(k8sClient.Create(ctx, node)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed())
	})
	Eventually(func(g Gomega) {
		n := &corev1.Node{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
		g.Expect(kwokcluster.NodeReady(n)).To(BeTrue(), "node %s Ready", name)
		g.Expect(n.Status.Allocatable.Cpu().String()).To(Equal(cpus), "node %s allocatable cpu", name)
	}, timeout, poll).Should(Succeed())
}

// rankDomains decodes Kueue's topology assignment: the values, one per
// level of ta.Levels, of the domain of each rank, rank 0 first. The
// assignment lists slices of domains; in a slice, a level's values are one
// value for every domain (universal) or a value per domain (individual:
// prefix + root + suffix), and the pod counts one count for every domain
// or a count per domain. Ranks follow the domains in order, each domain
// taking as many consecutive ranks as its pod count (what Kueue's
// TopologyUngater does with a pod index label).
func rankDomains(ta *kueuev1beta2.TopologyAssignment) [][]string {
	GinkgoHelper()
	var ranks [][]string
	for _, s := range ta.Slices {
		Expect(s.ValuesPerLevel).To(HaveLen(len(ta.Levels)))
		for d := range int(s.DomainCount) {
			values := make([]string, len(ta.Levels))
			for l, v := range s.ValuesPerLevel {
				if v.Universal != nil {
					values[l] = *v.Universal
					continue
				}
				Expect(v.Individual).NotTo(BeNil())
				values[l] = ptr.Deref(v.Individual.Prefix, "") + v.Individual.Roots[d] + ptr.Deref(v.Individual.Suffix, "")
			}
			count := ptr.Deref(s.PodCounts.Universal, 0)
			if s.PodCounts.Individual != nil {
				count = s.PodCounts.Individual[d]
			}
			for range count {
				ranks = append(ranks, values)
			}
		}
	}
	return ranks
}
