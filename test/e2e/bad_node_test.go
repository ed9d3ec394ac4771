package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/failrecord"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

// badNodeIndexes is the size of the bad-node spec's job
// (IBJ_BAD_NODE_INDEXES, default 1000).
func badNodeIndexes() int {
	GinkgoHelper()
	n := 1000
	if v := os.Getenv("IBJ_BAD_NODE_INDEXES"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		Expect(err).NotTo(HaveOccurred(), "IBJ_BAD_NODE_INDEXES")
	}
	return n
}

// startBadNodeCluster starts a kwok cluster of the spec's own, with the
// last faulty of its nodes faulty (kwokcluster.Options.FaultyNodes: every
// container started there exits 1), kube-scheduler placing the pods (so
// that node affinity is obeyed, where the suite's binder ignores it), each
// node of 8 CPUs, and the operator against it with extra flags. Everything
// stops when the spec, or the Ordered container, ends.
func startBadNodeCluster(ctx context.Context, nodes, faulty int, operatorFlags ...string) (*kwokcluster.Cluster, client.Client) {
	GinkgoHelper()
	bc := startSpecCluster(ctx, "bad-node", fmt.Sprintf("etcd, kube-apiserver, kube-scheduler and %d kwok nodes (%d faulty)", nodes, faulty), kwokcluster.Options{
		Nodes: nodes, FaultyNodes: faulty, KubeScheduler: true, NodeAllocatable: nodeCapacity("8", "64Gi"),
	})
	c, err := client.New(bc.Config, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	By("starting the operator against it")
	proc, err := bc.StartOperator(ctx, managerBin, operatorFlags...)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(proc.Stop(30 * time.Second)).To(Succeed()) })
	return bc, c
}

// badNodeRun is what one controller's run of the job came to, read from
// its pods and its status once it ended.
type badNodeRun struct {
	controller string
	indexes    int
	// pods is every pod the controller created; onBadNode those that
	// kube-scheduler placed on the faulty node.
	pods, onBadNode int
	// failed is the failed attempts (failed pods not deleted by the
	// controller), statusFailed the controller's own count.
	failed, statusFailed int
	// byFailures counts the indexes by their failed attempts (0 to 3).
	byFailures         map[int]int
	maxPerIndex        int
	failedIndexes      string
	end, reason        string
	took               time.Duration
	failedOffBadNode   int
	succeededOnBadNode int
}

// tally reads the pods of a run: index label key, the faulty node.
func (r *badNodeRun) tally(pods []corev1.Pod, indexKey, badNode string) {
	GinkgoHelper()
	perIndex := make([]int, r.indexes)
	for _, p := range pods {
		r.pods++
		ix, err := strconv.Atoi(p.Labels[indexKey])
		Expect(err).NotTo(HaveOccurred(), "pod %s has no index label %s", p.Name, indexKey)
		onBad := p.Spec.NodeName == badNode
		if onBad {
			r.onBadNode++
		}
		switch {
		case p.Status.Phase == corev1.PodFailed && p.DeletionTimestamp == nil:
			r.failed++
			perIndex[ix]++
			if !onBad {
				r.failedOffBadNode++
			}
		case p.Status.Phase == corev1.PodSucceeded && onBad:
			r.succeededOnBadNode++
		}
	}
	r.byFailures = map[int]int{}
	for _, n := range perIndex {
		r.byFailures[n]++
		r.maxPerIndex = max(r.maxPerIndex, n)
	}
}

// badNodeTable is the runs side by side, one column per controller.
func badNodeTable(runs ...badNodeRun) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	row := func(name string, f func(r badNodeRun) string) {
		cells := make([]string, 0, 1+len(runs))
		cells = append(cells, name)
		for _, r := range runs {
			cells = append(cells, f(r))
		}
		_, _ = fmt.Fprintln(w, strings.Join(cells, "\t"))
	}
	row("", func(r badNodeRun) string { return r.controller })
	row("indexes", func(r badNodeRun) string { return strconv.Itoa(r.indexes) })
	row("pods created", func(r badNodeRun) string { return strconv.Itoa(r.pods) })
	row("pods on the bad node", func(r badNodeRun) string { return strconv.Itoa(r.onBadNode) })
	row("failed attempts (status.failed)", func(r badNodeRun) string { return fmt.Sprintf("%d (%d)", r.failed, r.statusFailed) })
	row("max failed attempts of an index", func(r badNodeRun) string { return strconv.Itoa(r.maxPerIndex) })
	row("indexes with 0/1/2/3 failed attempts", func(r badNodeRun) string {
		return fmt.Sprintf("%d/%d/%d/%d", r.byFailures[0], r.byFailures[1], r.byFailures[2], r.byFailures[3])
	})
	row("failed indexes", func(r badNodeRun) string {
		if r.failedIndexes == "" {
			return "0"
		}
		return fmt.Sprintf("%d (%s)", r.byFailures[3], r.failedIndexes)
	})
	row("end", func(r badNodeRun) string { return fmt.Sprintf("%s (%s)", r.end, r.reason) })
	row("time to the end", func(r badNodeRun) string { return r.took.String() })
	_ = w.Flush()
	return b.String()
}

// terminal is the type, reason and time of a job's Complete or Failed
// condition, if it has one.
func terminal(conds []metav1.Condition) (typ, reason string, at time.Time, ok bool) {
	for _, t := range []string{ibjv1.ConditionComplete, ibjv1.ConditionFailed} {
		if c := apimeta.FindStatusCondition(conds, t); c != nil && c.Status == metav1.ConditionTrue {
			return t, c.Reason, c.LastTransitionTime.Time, true
		}
	}
	return "", "", time.Time{}, false
}

func batchTerminal(j *batchv1.Job) (typ, reason string, at time.Time, ok bool) {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return string(c.Type), c.Reason, c.LastTransitionTime.Time, true
		}
	}
	return "", "", time.Time{}, false
}

// avoidedNodes are the nodes a pod's required node affinity keeps it off
// (the metadata.name NotIn matches the operator writes).
func avoidedNodes(p *corev1.Pod) []string {
	var out []string
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, m := range t.MatchFields {
				if m.Key == "metadata.name" && m.Operator == corev1.NodeSelectorOpNotIn {
					out = append(out, m.Values...)
				}
			}
		}
	}
	return out
}

// eventsOf lists the events of reason in ns, oldest first.
func eventsOf(ctx context.Context, c client.Client, ns, reason string) []corev1.Event {
	GinkgoHelper()
	var list corev1.EventList
	Expect(c.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{"reason": reason})).To(Succeed())
	slices.SortFunc(list.Items, func(a, b corev1.Event) int { return eventTime(&a).Compare(eventTime(&b)) })
	return list.Items
}

// eventTime is when an event was first seen, by whichever API wrote it.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// failureRecord reads a job's failure record as kubectl ibj does: the
// ConfigMaps labelled with the job's UID that the job controls, merged.
func failureRecord(ctx context.Context, c client.Client, job *ibjv1.IndexedBatchJob) (*failrecord.Record, error) {
	var list corev1.ConfigMapList
	if err := c.List(ctx, &list, client.InNamespace(job.Namespace), client.MatchingLabels{ibjv1.FailureRecordLabel: string(job.UID)}); err != nil {
		return nil, err
	}
	rec := failrecord.New()
	for i := range list.Items {
		cm := &list.Items[i]
		shard, ok := failrecord.ShardOfConfigMap(job.Name, job.UID, cm)
		if !ok {
			continue
		}
		attempts, bad := failrecord.DecodeShard(cm.Data[failrecord.DataKey])
		if bad > 0 {
			return nil, fmt.Errorf("%d unreadable lines in ConfigMap %s", bad, cm.Name)
		}
		rec.Merge(shard, cm.ResourceVersion, attempts)
	}
	return rec, nil
}

// kubectlIBJNodes runs `kubectl ibj nodes JOB` (the plugin binary, as
// kubectl would) against a cluster and returns what it printed.
func kubectlIBJNodes(ctx context.Context, kubeconfig, ns, job string) string {
	GinkgoHelper()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, pluginBinary(ctx), "nodes", job, "-n", ns, "--kubeconfig", kubeconfig).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "kubectl ibj nodes %s:\n%s", job, out)
	return string(out)
}

// nodeRow is the row of `kubectl ibj nodes` that names node, or "".
func nodeRow(out, node string) string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == node {
			return l
		}
	}
	return ""
}

// One faulty node among 20: every pod kube-scheduler places there fails a
// second after it started, and since its pods end at once it is the
// emptiest node when a retry comes, which kube-scheduler's default
// scoring (the least allocated node first) favours: under batch/v1 an
// index that failed there is often sent back to it. The same job runs as an
// IndexedBatchJob with spec.nodeAvoidance and as a batch/v1 Job with the
// same backoffLimitPerIndex, one after the other on the same cluster, each
// alone on it, both controllers at the same client budget and the same
// 10 s first retry delay. Mode Required: an index's retry never goes back
// to the node where it failed, whatever the others' scores, so with one
// bad node no index can fail twice; 19 nodes of 8 CPUs hold the job's 100
// pods of 1 CPU, so Required strands none. failedIndexesPerNode 3: three
// distinct indexes failing on one node blames the node rather than an
// index's own bug (one index failing everywhere counts once per node),
// and takes it out of the job after about one wave of failures rather than
// one failure for every index that lands there.
var _ = Describe("Bad node", Label("bad-node"), Ordered, func() {
	const (
		nodes       = 20
		parallelism = 100
		threshold   = 3
	)
	var (
		bc      *kwokcluster.Cluster
		c       client.Client
		badNode string
	)

	BeforeAll(func(ctx SpecContext) {
		bc, c = startBadNodeCluster(ctx, nodes, 1)
		badNode = bc.FaultyNodeNames[0]
		By("starting kube-controller-manager with the built-in Job controller alone, at the operator's client budget")
		proc, err := bc.StartComponent(controlplane.ControllerManager, controlplane.Component{
			Flags: []string{"--controllers=job", "--kube-api-qps=50", "--kube-api-burst=100"},
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(bc.StopComponent(proc)).To(Succeed()) })
	})

	It("completes the IndexedBatchJob with at most one failed attempt per index, where the built-in Job retries on the bad node", func(ctx SpecContext) {
		indexes := badNodeIndexes()
		ns := testutil.NewNamespace(ctx, c, testutil.NamespaceOptions{Prefix: "ibj-bad-node-"})
		// Each pod asks for 1 of a node's 8 CPUs and runs 5 s; on the bad
		// node it exits 1 after 1 s.
		base := harness.MakeIndexedBatchJob("train", ns).Completions(int32(indexes)).Parallelism(parallelism).BackoffLimitPerIndex(2).
			Requests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}).
			PodAnnotation(kwokcluster.DurationAnnotation, "5s")
		runTimeout := time.Duration(indexes)*300*time.Millisecond + 3*time.Minute

		By(fmt.Sprintf("running %d indexes as an IndexedBatchJob with nodeAvoidance Required, failedIndexesPerNode %d", indexes, threshold))
		job := base.Clone().NodeAvoidance(ibjv1.NodeAvoidanceRequired, threshold).Obj()
		Expect(c.Create(ctx, job)).To(Succeed())
		ours := badNodeRun{controller: "IndexedBatchJob", indexes: indexes}
		Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(job), job)).To(Succeed())
			typ, reason, at, ok := terminal(job.Status.Conditions)
			g.Expect(ok).To(BeTrue(), "the IndexedBatchJob has not ended: %+v", job.Status)
			ours.end, ours.reason, ours.took = typ, reason, at.Sub(job.CreationTimestamp.Time)
		}).WithContext(ctx).WithTimeout(runTimeout).WithPolling(time.Second).Should(Succeed())
		var pods corev1.PodList
		Expect(c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{ibjv1.JobNameLabel: job.Name})).To(Succeed())
		ours.tally(pods.Items, ibjv1.CompletionIndexLabel, badNode)
		ours.statusFailed, ours.failedIndexes = int(job.Status.Failed), ptr.Deref(job.Status.FailedIndexes, "")
		avoided := eventsOf(ctx, c, ns, "NodeAvoided")

		By(fmt.Sprintf("running the same %d indexes as a batch/v1 Job with the same backoffLimitPerIndex", indexes))
		builtin := badNodeRun{controller: "batch/v1 Job", indexes: indexes}
		bj := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "train-builtin", Namespace: ns},
			Spec: batchv1.JobSpec{
				Completions: ptr.To(int32(indexes)), Parallelism: ptr.To[int32](parallelism), CompletionMode: ptr.To(batchv1.IndexedCompletion),
				BackoffLimitPerIndex: ptr.To[int32](2), Template: *base.Obj().Spec.Template.DeepCopy(),
			},
		}
		Expect(c.Create(ctx, bj)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(bj), bj)).To(Succeed())
			typ, reason, at, ok := batchTerminal(bj)
			g.Expect(ok).To(BeTrue(), "the batch/v1 Job has not ended: %+v", bj.Status)
			builtin.end, builtin.reason, builtin.took = typ, reason, at.Sub(bj.CreationTimestamp.Time)
		}).WithContext(ctx).WithTimeout(2 * runTimeout).WithPolling(time.Second).Should(Succeed())
		var bpods corev1.PodList
		Expect(c.List(ctx, &bpods, client.InNamespace(ns), client.MatchingLabels{batchv1.JobNameLabel: bj.Name})).To(Succeed())
		builtin.tally(bpods.Items, batchv1.JobCompletionIndexAnnotation, badNode)
		builtin.statusFailed, builtin.failedIndexes = int(bj.Status.Failed), ptr.Deref(bj.Status.FailedIndexes, "")

		table := badNodeTable(ours, builtin)
		GinkgoWriter.Printf("bad node %s of %d, %d indexes, backoffLimitPerIndex 2, parallelism %d:\n%s", badNode, nodes, indexes, parallelism, table)
		AddReportEntry("bad node", fmt.Sprintf("bad node %s of %d, %d indexes, backoffLimitPerIndex 2, parallelism %d\n%s", badNode, nodes, indexes, parallelism, table))

		By("the fault was the node's: every failed pod of either job ran on the bad node, and none there succeeded")
		for _, r := range []badNodeRun{ours, builtin} {
			Expect(r.failedOffBadNode).To(BeZero(), "%s: failed pods off the bad node", r.controller)
			Expect(r.succeededOnBadNode).To(BeZero(), "%s: succeeded pods on the bad node", r.controller)
		}
		Expect(builtin.onBadNode).To(BeNumerically(">", 0), "kube-scheduler placed none of the built-in Job's pods on the bad node: the scenario did not play out")

		By("the IndexedBatchJob completed, no index failing twice")
		Expect(ours.end).To(Equal(ibjv1.ConditionComplete), "the IndexedBatchJob ended %s (%s)", ours.end, ours.reason)
		Expect(ours.maxPerIndex).To(BeNumerically("<=", 1), "an index of the IndexedBatchJob failed more than once")
		Expect(ours.statusFailed).To(Equal(ours.failed), "status.failed against the failed pods")
		Expect(ours.failedIndexes).To(BeEmpty())

		By("the bad node avoided by the whole job: event NodeAvoided, and no pod created after it placed there")
		Expect(avoided).To(HaveLen(1), "NodeAvoided events: %v", avoided)
		Expect(avoided[0].Message).To(ContainSubstring("Node "+badNode+":"), "the event names the bad node")
		Expect(avoided[0].InvolvedObject.Name).To(Equal(job.Name))
		since := eventTime(&avoided[0]).Add(time.Second) // the event's time has 1 s resolution at worst
		failedIndex := map[string]bool{}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodFailed {
				failedIndex[p.Labels[ibjv1.CompletionIndexLabel]] = true
			}
		}
		after, jobWide := 0, 0
		for _, p := range pods.Items {
			if !p.CreationTimestamp.After(since) {
				continue
			}
			after++
			Expect(p.Spec.NodeName).NotTo(Equal(badNode), "pod %s, created after the node was avoided, ran there", p.Name)
			Expect(avoidedNodes(&p)).To(ContainElement(badNode), "pod %s, created after the node was avoided, does not avoid it", p.Name)
			if !failedIndex[p.Labels[ibjv1.CompletionIndexLabel]] {
				jobWide++
			}
		}
		GinkgoWriter.Printf("%d pods created after the NodeAvoided event, %d of them of indexes that never failed, each avoiding %s\n", after, jobWide, badNode)
		Expect(jobWide).To(BeNumerically(">", 0), "no pod of an index that never failed was created after the node was avoided: make the job larger (IBJ_BAD_NODE_INDEXES)")

		By("the failure record, as kubectl ibj nodes reads it, names the bad node alone, avoided by every pod")
		Eventually(func(g Gomega) {
			rec, err := failureRecord(ctx, c, job)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(rec.Len()).To(Equal(ours.failed), "attempts in the record against failed pods")
			nodes := rec.Nodes(threshold)
			g.Expect(nodes).To(HaveLen(1), "the record's nodes: %+v", nodes)
			g.Expect(nodes[0].Name).To(Equal(badNode))
			g.Expect(nodes[0].Failures).To(Equal(ours.failed))
			g.Expect(nodes[0].Indexes).To(HaveLen(ours.failed), "distinct indexes that failed on the bad node")
			g.Expect(nodes[0].AvoidedSince.IsZero()).To(BeFalse(), "the record does not have the whole job avoid the bad node")
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(Succeed())
		out := kubectlIBJNodes(ctx, bc.Kubeconfig, ns, job.Name)
		GinkgoWriter.Printf("$ kubectl ibj nodes %s\n%s", job.Name, out)
		Expect(nodeRow(out, badNode)).To(ContainSubstring("every pod, since"), "kubectl ibj nodes:\n%s", out)
		for _, n := range bc.NodeNames {
			if n != badNode {
				Expect(nodeRow(out, n)).To(BeEmpty(), "kubectl ibj nodes names the good node %s", n)
			}
		}
	}, SpecTimeout(45*time.Minute))
})

// With Required avoidance and every node avoided, the retry stays Pending,
// and the job says why within seconds: two nodes, both faulty; index 0
// fails on one, its retry on the other, and its third pod avoids both.
var _ = Describe("Bad node, every node avoided", Label("bad-node"), func() {
	It("leaves the retry Pending and sets PodsUnschedulable (AvoidedNodes) within seconds", func(ctx SpecContext) {
		// A 1 s retry delay (10 s by default) keeps the spec short.
		bc, c := startBadNodeCluster(ctx, 2, 2, "--pod-failure-backoff=1s", "--pod-failure-backoff-max=2s")
		ns := testutil.NewNamespace(ctx, c, testutil.NamespaceOptions{Prefix: "ibj-bad-nodes-"})
		job := harness.MakeIndexedBatchJob("stuck", ns).BackoffLimitPerIndex(3).NodeAvoidance(ibjv1.NodeAvoidanceRequired, 0).Obj()
		Expect(c.Create(ctx, job)).To(Succeed())

		By("the third pod of index 0, avoiding both nodes, left unschedulable by kube-scheduler")
		var third corev1.Pod
		var unschedulableSince time.Time
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{ibjv1.JobNameLabel: job.Name})).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(3))
			failed := 0
			for _, p := range pods.Items {
				switch p.Status.Phase {
				case corev1.PodFailed:
					failed++
				case corev1.PodPending:
					third = p
				}
			}
			g.Expect(failed).To(Equal(2))
			g.Expect(third.Name).NotTo(BeEmpty())
			var cond *corev1.PodCondition
			for i := range third.Status.Conditions {
				if third.Status.Conditions[i].Type == corev1.PodScheduled {
					cond = &third.Status.Conditions[i]
				}
			}
			g.Expect(cond).NotTo(BeNil(), "pod %s has no PodScheduled condition yet", third.Name)
			g.Expect(cond.Status).To(Equal(corev1.ConditionFalse))
			g.Expect(cond.Reason).To(Equal(corev1.PodReasonUnschedulable))
			unschedulableSince = cond.LastTransitionTime.Time
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
		Expect(avoidedNodes(&third)).To(ConsistOf(bc.FaultyNodeNames), "the third pod avoids both nodes")

		By("condition PodsUnschedulable, reason AvoidedNodes, naming both nodes, within seconds")
		var cond *metav1.Condition
		Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(job), job)).To(Succeed())
			cond = apimeta.FindStatusCondition(job.Status.Conditions, ibjv1.ConditionPodsUnschedulable)
			g.Expect(cond).NotTo(BeNil(), "conditions: %v", job.Status.Conditions)
		}).WithContext(ctx).WithTimeout(10 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		Expect(cond.Status).To(Equal(metav1.ConditionTrue))
		Expect(cond.Reason).To(Equal(ibjv1.ReasonAvoidedNodes))
		for _, n := range bc.FaultyNodeNames {
			Expect(cond.Message).To(ContainSubstring(n))
		}
		delay := cond.LastTransitionTime.Sub(unschedulableSince)
		GinkgoWriter.Printf("pod %s unschedulable at %s, PodsUnschedulable at %s (%s later): %s\n",
			third.Name, unschedulableSince.Format(time.RFC3339), cond.LastTransitionTime.Format(time.RFC3339), delay, cond.Message)
		AddReportEntry("every node avoided", fmt.Sprintf("PodsUnschedulable %s after the pod was unschedulable: %s", delay, cond.Message))
		Expect(delay).To(BeNumerically("<=", 5*time.Second))
		Expect(cond.Message).To(ContainSubstring("Pod "+third.Name+" of index 0 "), "the condition names the pod and its index")
		Eventually(func() []corev1.Event { return eventsOf(ctx, c, ns, ibjv1.ReasonAvoidedNodes) }).
			WithContext(ctx).WithTimeout(10*time.Second).WithPolling(200*time.Millisecond).ShouldNot(BeEmpty(), "a Warning event says so too")

		By("the failure record, as kubectl ibj nodes reads it: index 0 failed once on each node, and its retries avoid both")
		Eventually(func(g Gomega) {
			rec, err := failureRecord(ctx, c, job)
			g.Expect(err).NotTo(HaveOccurred())
			nodes := rec.Nodes(0)
			g.Expect(nodes).To(HaveLen(2), "the record's nodes: %+v", nodes)
			for _, n := range nodes {
				g.Expect(bc.FaultyNodeNames).To(ContainElement(n.Name))
				g.Expect(n.Failures).To(Equal(1), "failures on %s", n.Name)
				g.Expect(n.Indexes).To(Equal([]int32{0}), "indexes failed on %s", n.Name)
			}
		}).WithContext(ctx).WithTimeout(10 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		out := kubectlIBJNodes(ctx, bc.Kubeconfig, ns, job.Name)
		GinkgoWriter.Printf("$ kubectl ibj nodes %s\n%s", job.Name, out)
		for _, n := range bc.FaultyNodeNames {
			Expect(nodeRow(out, n)).To(ContainSubstring("retries of 0"), "kubectl ibj nodes:\n%s", out)
		}

		By("the job neither ends nor places the pod while it waits")
		Consistently(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(job), job)).To(Succeed())
			_, _, _, ended := terminal(job.Status.Conditions)
			g.Expect(ended).To(BeFalse())
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(&third), &third)).To(Succeed())
			g.Expect(third.Spec.NodeName).To(BeEmpty())
			g.Expect(apimeta.IsStatusConditionTrue(job.Status.Conditions, ibjv1.ConditionPodsUnschedulable)).To(BeTrue())
		}).WithContext(ctx).WithTimeout(5 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
	}, SpecTimeout(5*time.Minute))
})
