package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/failrecord"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/nodecluster"
)

// The bad-node spec's jobs: badNodeIndexes indexes of badNodeRun each,
// badNodeParallelism at a time, on badNodeNodes nodes (one of them bad),
// with backoffLimitPerIndex badNodeBackoffLimit.
const (
	badNodeJob          = "bad-node"
	badNodeNodes        = 3
	badNodeIndexes      = 6
	badNodeParallelism  = 3
	badNodeBackoffLimit = 2
	badNodeRun          = 5 * time.Second
	// badNodeFailedIndexesPerNode is the IndexedBatchJob's
	// nodeAvoidance.failedIndexesPerNode.
	badNodeFailedIndexesPerNode = 2
)

// badNodeSpec is the workload of the bad-node spec for kind. Its pods are
// spread over the nodes by hostname, at most one apart (DoNotSchedule), by
// the job's own name label, so that each wave of pods gives the bad node
// its share: the scheduler counts no pod that has ended, and the bad
// node's pods end at once, so it is always the node with room, as a bad
// node of a fleet is. The IndexedBatchJob adds nodeAvoidance: Required (a
// preference would lose to the spread, which is a filter), and a node
// where two indexes failed is avoided by every later pod.
func badNodeSpec(kind string) string {
	s := fmt.Sprintf("    completions: %d\n    parallelism: %d\n    backoffLimitPerIndex: %d\n",
		badNodeIndexes, badNodeParallelism, badNodeBackoffLimit)
	if kind == ibjKind {
		s += fmt.Sprintf("    nodeAvoidance:\n      mode: Required\n      failedIndexesPerNode: %d\n", badNodeFailedIndexesPerNode)
	}
	return s + `    template:
      metadata:
        labels:
          ibj-node-spec: bad-node
      spec:
        restartPolicy: Never
        topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: DoNotSchedule
          labelSelector:
            matchLabels:
              ibj-node-spec: bad-node
          matchLabelKeys: [batch.kubernetes.io/job-name, batch.indexedjob.dev/job-name]
        containers:
        - name: main
          image: ` + nodecluster.WorkerImage + `
          args: ["--duration=` + badNodeRun.String() + `"]
`
}

var _ = Describe("A bad node", Label("node", "bad-node"), func() {
	It("retries each index of an IndexedBatchJob off a node where every container exits 1, where the batch/v1 Job's retries go back to it", func(ctx SpecContext) {
		bad := badNode(ctx)
		badName := cluster.Nodes[bad]
		ns := recordedNamespace(ctx)
		created := time.Now()
		for _, kind := range []string{ibjKind, jobKind} {
			out, err := kc.RunWithStdin(jobManifest(kind, badNodeJob, ns, badNodeSpec(kind)), "create", "-f", "-")
			Expect(err).NotTo(HaveOccurred(), "creating the %s:\n%s", kind, out)
		}
		ibj, job := waitBoth(ctx, ns, badNodeJob, 4*time.Minute)
		report(ns, badNodeJob, ibj, job)

		figures := map[string][]indexFigure{}
		pods := map[string][]podReport{}
		var table strings.Builder
		fmt.Fprintf(&table, "bad node %s; %d indexes of %s, %d at a time, on %d nodes; backoffLimitPerIndex %d; seconds from the jobs' creation\n",
			badName, badNodeIndexes, badNodeRun, badNodeParallelism, len(cluster.Nodes), badNodeBackoffLimit)
		for _, kind := range []string{ibjKind, jobKind} {
			pods[kind] = podsOf(kind, ns, badNodeJob)
			figures[kind] = indexFiguresOf(pods[kind], lifetimes(kind, ns, badNodeJob), badName, created)
			condition, after := terminalCondition(ctx, kind, ns, badNodeJob)
			writeFigures(&table, controllerName[kind], figures[kind], fmt.Sprintf("%s after %s", condition, after))
		}
		AddReportEntry("per index on a bad node", table.String())
		fmt.Fprint(GinkgoWriter, table.String())

		By("the fault: every container started on the bad node exited 1, and none elsewhere failed")
		for _, kind := range []string{ibjKind, jobKind} {
			for _, p := range pods[kind] {
				switch {
				case p.ExitCode < 0:
					// Never ran (none here: every pod ran to its end).
				case p.Node == badName:
					Expect(p.ExitCode).To(BeEquivalentTo(1), "%s: %s", kind, p)
				default:
					Expect(p.ExitCode).To(BeZero(), "%s: %s", kind, p)
				}
			}
			Expect(failedOn(pods[kind], badName)).NotTo(BeEmpty(), "no pod of the %s ran on the bad node: the spec proved nothing", controllerName[kind])
		}

		By("the IndexedBatchJob: every index completes, each with at most one failure, on the bad node")
		Expect(ibj).To(Equal(outcome{Succeeded: badNodeIndexes, Failed: ibj.Failed,
			CompletedIndexes: fmt.Sprintf("0-%d", badNodeIndexes-1), Conditions: completedConditions()}))
		Expect(figures[ibjKind]).To(HaveLen(badNodeIndexes))
		for _, f := range figures[ibjKind] {
			Expect(f.Failures).To(BeNumerically("<=", 1), "index %d: %+v", f.Index, f)
			Expect(f.Result).To(Equal(resultComplete), "index %d: %+v", f.Index, f)
		}
		Expect(ibj.Failed).To(BeEquivalentTo(len(failedOn(pods[ibjKind], badName))), "the IndexedBatchJob's failures are its pods' on the bad node")

		By("the IndexedBatchJob: the bad node is avoided by the whole job once " + fmt.Sprint(badNodeFailedIndexesPerNode) + " indexes failed there")
		failedIndexes := map[int]bool{}
		for _, p := range failedOn(pods[ibjKind], badName) {
			failedIndexes[p.Index] = true
		}
		// The operator's events are sent in the background, paced: the
		// event may come after the job's end.
		if len(failedIndexes) >= badNodeFailedIndexesPerNode {
			Eventually(func() []corev1.Event { return nodeAvoidedEvents(ctx, ns) }).WithContext(ctx).WithTimeout(time.Minute).
				Should(ContainElement(SatisfyAll(
					HaveField("InvolvedObject.Kind", "IndexedBatchJob"), HaveField("InvolvedObject.Name", badNodeJob),
					HaveField("Message", HavePrefix("Node "+badName+": ")))),
					"%d indexes failed on %s", len(failedIndexes), badName)
		}
		var avoided strings.Builder
		for _, e := range nodeAvoidedEvents(ctx, ns) {
			fmt.Fprintf(&avoided, "%s %s: %s (raised at %.1fs, written at %.0fs)\n", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message,
				eventTime(e).Sub(created).Seconds(), e.CreationTimestamp.Sub(created).Seconds())
		}
		AddReportEntry("NodeAvoided events", avoided.String())
		fmt.Fprintf(GinkgoWriter, "NodeAvoided events:\n%s", avoided.String())
		for _, e := range nodeAvoidedEvents(ctx, ns) {
			Expect(e.Message).To(HavePrefix("Node "+badName+": "), "a node avoided with %d indexes failed on %s", len(failedIndexes), badName)
			Expect(len(failedIndexes)).To(BeNumerically(">=", badNodeFailedIndexesPerNode), "NodeAvoided: %s", e.Message)
		}

		By("the failure record outlives the IndexedBatchJob's pods: the bad node and exit code 1 for each failed attempt")
		kc.Must("-n", ns, "delete", "pods", "-l", jobNameLabel[ibjKind]+"="+badNodeJob, "--wait=true", "--timeout=2m")
		Eventually(func(g Gomega) {
			list, err := clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: jobNameLabel[ibjKind] + "=" + badNodeJob})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(list.Items).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		attempts, nodes := failureRecordOf(ctx, ns, badNodeJob)
		fmt.Fprintf(GinkgoWriter, "the failure record, after the pods were deleted:\n")
		for _, a := range attempts {
			fmt.Fprintf(GinkgoWriter, "  index %d, attempt %d, on %s: container %s exit %d (%s), %s\n", a.Index, a.Attempt, a.Node, a.Container, a.ExitCode, a.Reason, a.Action)
		}
		want := podFailures(failedOn(pods[ibjKind], badName))
		Expect(recordedFailures(attempts)).To(Equal(want),
			"the record's failed attempts (index, node, container, exit code), against the pods the kubelet reported failed")
		// The operator syncs the job again for each pod deleted: the record
		// must stay as it is once those syncs are done.
		Consistently(func() []string {
			attempts, _ := failureRecordOf(ctx, ns, badNodeJob)
			return recordedFailures(attempts)
		}).WithContext(ctx).WithTimeout(5 * time.Second).WithPolling(time.Second).Should(Equal(want))
		Expect(nodes).To(HaveLen(1), "the record blames one node: %+v", nodes)
		Expect(nodes[0].Name).To(Equal(badName))
		Expect(nodes[0].AvoidedSince.IsZero()).To(Equal(len(failedIndexes) < badNodeFailedIndexesPerNode),
			"the record says the whole job avoids %s from %s, with %d of its indexes failed there", badName, nodes[0].AvoidedSince, len(failedIndexes))
	}, SpecTimeout(8*time.Minute))
})

// nodeAvoidedEvents are the namespace's NodeAvoided events.
func nodeAvoidedEvents(ctx context.Context, namespace string) []corev1.Event {
	GinkgoHelper()
	list, err := clientset.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=NodeAvoided"})
	Expect(err).NotTo(HaveOccurred())
	return list.Items
}

// eventTime is when the event was raised: its eventTime (events.k8s.io),
// else its first timestamp.
func eventTime(e corev1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.FirstTimestamp.Time
}

// failedOn are the pods that failed on node.
func failedOn(pods []podReport, node string) []podReport {
	var out []podReport
	for _, p := range pods {
		if p.Phase == corev1.PodFailed && p.Node == node {
			out = append(out, p)
		}
	}
	return out
}

// podFailures are the failed pods as the record should state them, one
// line each, sorted: index, node, container, exit code.
func podFailures(pods []podReport) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, fmt.Sprintf("index %d on %s: container main exit %d", p.Index, p.Node, p.ExitCode))
	}
	slices.Sort(out)
	return out
}

// recordedFailures are the record's attempts, as podFailures states them.
func recordedFailures(attempts []failrecord.Attempt) []string {
	out := make([]string, 0, len(attempts))
	for _, a := range attempts {
		exit := "none"
		if a.HasExit {
			exit = fmt.Sprint(a.ExitCode)
		}
		out = append(out, fmt.Sprintf("index %d on %s: container %s exit %s", a.Index, a.Node, a.Container, exit))
	}
	slices.Sort(out)
	return out
}

// failureRecordOf reads the IndexedBatchJob's failure record as the
// operator wrote it: the ConfigMaps labelled with its UID, each of which
// must be a shard the job controls (<job>-failures-<n>) and decode whole.
// It returns the attempts, and what they say of the nodes with the job's
// failedIndexesPerNode.
func failureRecordOf(ctx context.Context, namespace, name string) ([]failrecord.Attempt, []failrecord.Node) {
	GinkgoHelper()
	u, err := dyn.Resource(resources[ibjKind]).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	cms, err := clientset.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: ibjv1.FailureRecordLabel + "=" + string(u.GetUID())})
	Expect(err).NotTo(HaveOccurred())
	Expect(cms.Items).To(HaveLen(1), "one shard for %d indexes", badNodeIndexes)
	record := failrecord.New()
	var attempts []failrecord.Attempt
	for i := range cms.Items {
		cm := &cms.Items[i]
		shard, ok := failrecord.ShardOfConfigMap(name, u.GetUID(), cm)
		Expect(ok).To(BeTrue(), "ConfigMap %s is not a shard of the job's record", cm.Name)
		Expect(cm.Name).To(Equal(failrecord.ShardName(name, shard)))
		got, bad := failrecord.DecodeShard(cm.Data[failrecord.DataKey])
		Expect(bad).To(BeZero(), "lines of %s that do not decode:\n%s", cm.Name, cm.Data[failrecord.DataKey])
		record.Merge(shard, cm.ResourceVersion, got)
		attempts = append(attempts, got...)
	}
	return attempts, record.Nodes(badNodeFailedIndexesPerNode)
}

// controllerName is how the figures name each kind.
var controllerName = map[string]string{ibjKind: "IndexedBatchJob", jobKind: "batch/v1 Job"}

// badNode makes one node of the cluster bad for the spec (BreakNode) and
// returns its index. With fewer than badNodeNodes nodes, the bad node is
// one added for the spec and removed when it ends: the suite runs on two
// nodes, and a third node for every spec would cost each of them its
// kubelet. With enough nodes, it is the last node the operator does not
// run on, repaired when the spec ends.
func badNode(ctx context.Context) int {
	GinkgoHelper()
	if len(cluster.Nodes) < badNodeNodes {
		Expect(cluster.Nodes).To(HaveLen(badNodeNodes-1), "the spec adds one node to a cluster of %d", badNodeNodes-1)
		start := time.Now()
		i, err := cluster.AddNode(ctx)
		DeferCleanup(func(ctx SpecContext) {
			start := time.Now()
			Expect(cluster.RemoveNode(ctx, i)).To(Succeed())
			AddReportEntry("node removed", fmt.Sprintf("removed in %.1fs", time.Since(start).Seconds()))
		}, NodeTimeout(2*time.Minute))
		Expect(err).NotTo(HaveOccurred())
		added := time.Since(start)
		start = time.Now()
		Expect(cluster.BreakNode(ctx, i)).To(Succeed())
		AddReportEntry("node added", fmt.Sprintf("%s added in %.1fs, broken in %.1fs", cluster.Nodes[i], added.Seconds(), time.Since(start).Seconds()))
		return i
	}
	pods, err := clientset.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	i := len(cluster.Nodes) - 1
	for ; i >= 0; i-- {
		if !slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return p.Spec.NodeName == cluster.Nodes[i] }) {
			break
		}
	}
	Expect(i).To(BeNumerically(">=", 0), "the operator runs on every node")
	Expect(cluster.BreakNode(ctx, i)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(cluster.RepairNode(ctx, i)).To(Succeed()) }, NodeTimeout(2*time.Minute))
	return i
}

// indexFigure is what one index of a job went through.
type indexFigure struct {
	Index              int
	Attempts, Failures int
	// Nodes are its pods' nodes in the order they were created, the bad
	// node's marked with a '*'.
	Nodes []string
	// Result is resultComplete if its last pod succeeded, resultFailed if
	// it failed, else its last pod's phase.
	Result string
	// End is when its last pod ended, from the jobs' creation (0 if the
	// watch saw no end).
	End time.Duration
}

// An index's result in the figures.
const (
	resultComplete = "Complete"
	resultFailed   = "Failed"
)

// indexFiguresOf is each index's figures, from the job's pods as last
// reported and their lifetimes as the watch saw them (both by index, then
// creation).
func indexFiguresOf(pods []podReport, lives []podLife, badNode string, created time.Time) []indexFigure {
	ends := map[string]moment{}
	for _, l := range lives {
		ends[string(l.UID)] = l.end()
	}
	var figures []indexFigure
	for _, p := range pods {
		if len(figures) == 0 || figures[len(figures)-1].Index != p.Index {
			figures = append(figures, indexFigure{Index: p.Index})
		}
		f := &figures[len(figures)-1]
		f.Attempts++
		node := p.Node
		if node == badNode {
			node += "*"
		}
		f.Nodes = append(f.Nodes, node)
		switch p.Phase {
		case corev1.PodFailed:
			f.Failures++
			f.Result = resultFailed
		case corev1.PodSucceeded:
			f.Result = resultComplete
		default:
			f.Result = string(p.Phase)
		}
		f.End = 0
		if end := ends[string(p.UID)]; end.seen() {
			f.End = end.At.Sub(created)
		}
	}
	slices.SortStableFunc(figures, func(a, b indexFigure) int { return a.Index - b.Index })
	return figures
}

// writeFigures writes a controller's figures as a table, one row per
// index, then the totals and the job's end.
func writeFigures(b *strings.Builder, controller string, figures []indexFigure, end string) {
	w := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "%s\tindex\tattempts\tfailures\tresult\tended (s)\tnodes\n", controller)
	var attempts, failures, failed int
	for _, f := range figures {
		fmt.Fprintf(w, "\t%d\t%d\t%d\t%s\t%.1f\t%s\n", f.Index, f.Attempts, f.Failures, f.Result, f.End.Seconds(), strings.Join(f.Nodes, ","))
		attempts += f.Attempts
		failures += f.Failures
		if f.Result == resultFailed {
			failed++
		}
	}
	fmt.Fprintf(w, "\tall\t%d\t%d\t%d of %d indexes failed\t%s\t\n", attempts, failures, failed, len(figures), end)
	_ = w.Flush()
}

// terminalCondition is the job's Complete or Failed condition and how long
// after the job's creation it was set, as the API server's clock says (to
// the second).
func terminalCondition(ctx context.Context, kind, namespace, name string) (string, time.Duration) {
	GinkgoHelper()
	u, err := dyn.Resource(resources[kind]).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		m, _ := c.(map[string]any)
		if (m["type"] == string(batchv1.JobComplete) || m["type"] == string(batchv1.JobFailed)) && m["status"] == "True" {
			at, err := time.Parse(time.RFC3339, fmt.Sprint(m["lastTransitionTime"]))
			Expect(err).NotTo(HaveOccurred())
			return fmt.Sprint(m["type"]), at.Sub(u.GetCreationTimestamp().Time)
		}
	}
	return "not terminal", 0
}

// TestIndexFiguresCountEachIndexsAttempts holds the figures of the
// bad-node spec to the pods they come from: attempts and failures per
// index, the bad node marked, the result of the last attempt and the time
// of its end. It runs without a cluster.
func TestIndexFiguresCountEachIndexsAttempts(t *testing.T) {
	created := time.Unix(1000, 0)
	pod := func(uid string, index int, node string, phase corev1.PodPhase) podReport {
		return podReport{UID: types.UID(uid), Index: index, Node: node, Phase: phase}
	}
	life := func(uid string, endSeq int, endAfter time.Duration) podLife {
		return podLife{UID: types.UID(uid), Ended: moment{Seq: endSeq, At: created.Add(endAfter)}}
	}
	const bad, marked = "bad", "bad*"
	pods := []podReport{
		pod("a", 0, "n0", corev1.PodSucceeded),
		pod("b", 1, bad, corev1.PodFailed), pod("c", 1, "n1", corev1.PodSucceeded),
		pod("d", 2, bad, corev1.PodFailed), pod("e", 2, bad, corev1.PodFailed),
	}
	lives := []podLife{life("a", 1, 6*time.Second), life("b", 2, 2*time.Second), life("c", 5, 18*time.Second),
		life("d", 3, 3*time.Second), life("e", 4, 14*time.Second)}
	want := []indexFigure{
		{Index: 0, Attempts: 1, Nodes: []string{"n0"}, Result: resultComplete, End: 6 * time.Second},
		{Index: 1, Attempts: 2, Failures: 1, Nodes: []string{marked, "n1"}, Result: resultComplete, End: 18 * time.Second},
		{Index: 2, Attempts: 2, Failures: 2, Nodes: []string{marked, marked}, Result: resultFailed, End: 14 * time.Second},
	}
	if diff := cmp.Diff(want, indexFiguresOf(pods, lives, bad, created)); diff != "" {
		t.Errorf("indexFiguresOf (-want +got):\n%s", diff)
	}
}
