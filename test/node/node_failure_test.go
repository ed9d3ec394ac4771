package node

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/nodecluster"
)

// A variant of the lost-node spec: how the job replaces and counts a pod
// lost with its node.
type lostVariant struct {
	name   string // the jobs' name
	policy batchv1.PodReplacementPolicy
	// ignore adds a podFailurePolicy rule that ignores pods with the
	// DisruptionTarget condition.
	ignore bool
	// timeout gives the IndexedBatchJob terminatingTimeoutSeconds (the
	// batch/v1 Job has no such field) and both a 1 s grace period.
	timeout bool
}

var lostVariants = []lostVariant{
	{name: "count-terminating", policy: batchv1.TerminatingOrFailed},
	{name: "count-failed", policy: batchv1.Failed},
	{name: "ignore-failed", policy: batchv1.Failed, ignore: true},
	{name: "timeout-failed", policy: batchv1.Failed, timeout: true},
}

// lostTimeout is the timeout variant's terminatingTimeoutSeconds.
const lostTimeout = 5 * time.Second

// createLost creates the variant's two jobs.
func createLost(ns string, v lostVariant, nodes int) {
	GinkgoHelper()
	for _, kind := range []string{ibjKind, jobKind} {
		spec := lostSpec(v, nodes)
		if v.timeout && kind == ibjKind {
			spec = fmt.Sprintf("    terminatingTimeoutSeconds: %d\n", int(lostTimeout.Seconds())) + spec
		}
		out, err := kc.RunWithStdin(jobManifest(kind, v.name, ns, spec), "create", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), "creating the %s:\n%s", kind, out)
	}
}

// lostSpec is a job of two pods per node, each running 20 s, spread so that
// each node holds exactly two pods of each job (topology spread by the
// job's own name label: each controller's, whichever the pod has), and
// replacements go to the nodes left (nodeTaintsPolicy Honor: a tainted
// node is no domain of the spread).
func lostSpec(v lostVariant, nodes int) string {
	s := fmt.Sprintf("    completions: %d\n    parallelism: %d\n    podReplacementPolicy: %s\n", 2*nodes, 2*nodes, v.policy)
	if v.ignore {
		s += `    podFailurePolicy:
      rules:
      - action: Ignore
        onPodConditions:
        - type: DisruptionTarget
`
	}
	grace := ""
	if v.timeout {
		grace = "        terminationGracePeriodSeconds: 1\n"
	}
	return s + `    template:
      metadata:
        labels:
          ibj-node-spec: lost-node
      spec:
        restartPolicy: Never
` + grace + `        topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: DoNotSchedule
          nodeTaintsPolicy: Honor
          labelSelector:
            matchLabels:
              ibj-node-spec: lost-node
          matchLabelKeys: [batch.kubernetes.io/job-name, batch.indexedjob.dev/job-name]
        containers:
        - name: main
          image: ` + nodecluster.WorkerImage + `
          args: ["--duration=20s"]
`
}

// lostNode is what the lost-node specs share: one node lost under all
// three variants' jobs at once.
type lostNode struct {
	ns    string
	index int    // the node's
	name  string // the node's
	// lostPods are the UIDs of the pods running on the node when it was
	// lost, by kind and job name.
	lostPods map[string]sets.Set[types.UID]
	// Times of the loss, the pods' eviction, the out-of-service taint.
	stopped, evicted, tainted time.Time
}

var _ = Describe("Real failures", Label("node", "node-failure"), func() {
	Describe("a node lost mid-job", Ordered, func() {
		var lost lostNode

		BeforeAll(func(ctx SpecContext) {
			Expect(len(cluster.Nodes)).To(BeNumerically(">=", 2), "a node lost needs another to replace its pods on")
			lost = loseNode(ctx)
		}, NodeTimeout(8*time.Minute))

		It("counts a pod lost with its node as failed and replaces it as soon as the taint eviction controller deletes it, under TerminatingOrFailed", func(ctx SpecContext) {
			lifetimesAfter := checkLost(ctx, lost, lostVariants[0], 2)
			for _, kind := range []string{ibjKind, jobKind} {
				replaced := replacements(lifetimesAfter[kind], lost)
				Expect(replaced).To(HaveLen(2), kind)
				for _, l := range replaced {
					Expect(l.Created.At).To(BeTemporally("<", lost.tainted), "%s: %s was not created before the out-of-service taint", kind, l.Name)
				}
				// What Failed rules out: each replacement ran while
				// the pod it replaced was still terminating.
				Expect(secondPods(kind, lifetimesAfter[kind])).To(HaveLen(2), kind)
			}
		})

		It("counts a pod lost with its node as failed and replaces it only once pod GC has failed it on the out-of-service taint, under Failed", func(ctx SpecContext) {
			checkLostFailed(ctx, lost, lostVariants[1], 2)
		})

		It("ignores a pod lost with its node by an Ignore rule on DisruptionTarget (DeletionByTaintManager), and replaces it once pod GC has failed it", func(ctx SpecContext) {
			checkLostFailed(ctx, lost, lostVariants[2], 0)
		})

		It("replaces a pod stuck terminating on the lost node once terminatingTimeoutSeconds passed, where the batch/v1 Job waits for the out-of-service taint", func(ctx SpecContext) {
			v := lostVariants[3]
			lives := checkLost(ctx, lost, v, 2)
			for _, kind := range []string{ibjKind, jobKind} {
				Expect(secondPods(kind, lives[kind])).To(BeEmpty(), kind)
			}
			for _, l := range replacements(lives[ibjKind], lost) {
				// Deleted with a 1 s grace period, failed lostTimeout
				// after that deadline; 15 s for the sync and the create.
				Expect(l.Created.At).To(BeTemporally("<", lost.tainted), "IndexedBatchJob: %s waited for the out-of-service taint", l.Name)
				Expect(l.Created.At.Sub(lost.evictedAt(lives[ibjKind]))).To(BeNumerically("<=", time.Second+lostTimeout+15*time.Second), l.Name)
			}
			for _, l := range replacements(lives[jobKind], lost) {
				Expect(l.Created.At).To(BeTemporally(">", lost.tainted), "Job: %s was created before the out-of-service taint", l.Name)
			}
		})

		It("is refused with an Ignore rule and TerminatingOrFailed, by both APIs", func(ctx SpecContext) {
			v := lostVariant{name: "ignore-terminating", policy: batchv1.TerminatingOrFailed, ignore: true}
			for _, kind := range []string{ibjKind, jobKind} {
				out, err := kc.RunWithStdin(jobManifest(kind, v.name, lost.ns, lostSpec(v, len(cluster.Nodes))), "create", "--dry-run=server", "-f", "-")
				Expect(err).To(HaveOccurred(), "%s admitted: %s", kind, out)
				Expect(out).To(ContainSubstring("podReplacementPolicy"), kind)
			}
		})
	})

	It("loses no result and counts no pod twice when every kubelet restarts while the pods end", func(ctx SpecContext) {
		restartMidJob(ctx, "kubelet", cluster.StopKubelet, cluster.StartKubelet)
	})

	It("loses no result and counts no pod twice when every containerd restarts while the pods end", func(ctx SpecContext) {
		restartMidJob(ctx, "containerd", cluster.StopContainerd, cluster.StartContainerd)
	})
})

// The restart specs' pods run restartRun; the component is down for
// restartDown, less than the node monitor grace period (20 s), so the
// nodes stay Ready.
const (
	restartRun  = 10 * time.Second
	restartDown = 9 * time.Second
)

// restartSpec: four indexes, one retry each, index 1 exiting with 3 every
// time, no index ever with two pods.
var restartSpec = `    completions: 4
    parallelism: 4
    backoffLimitPerIndex: 1
    podReplacementPolicy: Failed
` + workerTemplate("--duration="+restartRun.String(), "--fail-indexes=1", "--exit-code=3")

// restartMidJob runs restartSpec as both kinds, stops the component on
// every node so that the first pods all end while it is down, starts it
// again, and holds both jobs to the seed-like exact status: each first
// pod's end reached the API server only after the restart, and counted
// once.
func restartMidJob(ctx context.Context, component string, stop, start func(int) error) {
	GinkgoHelper()
	ns := recordedNamespace(ctx)
	name := "restart-" + component
	createBoth(ns, name, restartSpec)
	var first, last time.Time
	for _, kind := range []string{ibjKind, jobKind} {
		for _, p := range waitRunning(ctx, kind, ns, name, 4) {
			started := p.Status.ContainerStatuses[0].State.Running.StartedAt.Time
			if first.IsZero() || started.Before(first) {
				first = started
			}
			if started.After(last) {
				last = started
			}
		}
	}
	// The API's times are whole seconds: the last pod started within a
	// second after last, and exits restartRun later, before up.
	Expect(last.Sub(first)).To(BeNumerically("<=", restartRun-restartDown+6*time.Second), "the pods started too far apart to all end while %s is down", component)
	Expect(sleep(ctx, time.Until(last.Add(restartRun-restartDown+1500*time.Millisecond)))).To(Succeed())
	down := time.Now()
	for i := range cluster.Nodes {
		Expect(stop(i)).To(Succeed(), "stopping %s's %s", cluster.Nodes[i], component)
	}
	Expect(sleep(ctx, restartDown)).To(Succeed())
	up := time.Now()
	for i := range cluster.Nodes {
		Expect(start(i)).To(Succeed(), "starting %s's %s", cluster.Nodes[i], component)
	}
	ibj, job := waitBoth(ctx, ns, name, jobTimeout)
	report(ns, name, ibj, job)
	AddReportEntry(component+" restart", fmt.Sprintf("every node's %s down %.1fs, from %.1fs after the last pod started", component, up.Sub(down).Seconds(), down.Sub(last).Seconds()))

	Expect(ibj).To(Equal(outcome{Succeeded: 3, Failed: 2, CompletedIndexes: "0,2,3", FailedIndexes: "1",
		Conditions: failedConditions("FailedIndexes")}))
	Expect(job).To(Equal(ibj), "the built-in Job controller's status on the same nodes")
	codes := map[int][]int32{0: {0}, 1: {3, 3}, 2: {0}, 3: {0}}
	for _, kind := range []string{ibjKind, jobKind} {
		Expect(exitCodes(podsOf(kind, ns, name))).To(Equal(codes), kind)
		lives := lifetimes(kind, ns, name)
		Expect(secondPods(kind, lives)).To(BeEmpty(), kind)
		reports := map[string]podReport{}
		for _, p := range podsOf(kind, ns, name) {
			reports[p.Name] = p
			Expect(p.Restarts).To(BeZero(), "%s: %s", kind, p)
		}
		for _, l := range lives {
			if l.Created.At.After(down) {
				continue // index 1's retry
			}
			p := reports[l.Name]
			Expect(p.Finished).To(BeTemporally(">=", down.Truncate(time.Second)), "%s: %s ended before %s stopped", kind, p.Name, component)
			Expect(p.Finished).To(BeTemporally("<=", up), "%s: %s ended after %s started again", kind, p.Name, component)
			Expect(l.Ended.At).To(BeTemporally(">", up), "%s: the end of %s reached the API server while %s was down", kind, p.Name, component)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// loseNode runs the three variants' jobs, loses a node holding two pods of
// each (none of the operator's), waits for the taint eviction controller to
// delete them, for the TerminatingOrFailed jobs to replace them, then 10 s
// more, taints the node out-of-service and waits for every job to end. The
// node comes back after the ordered specs.
func loseNode(ctx context.Context) lostNode {
	GinkgoHelper()
	nodes := len(cluster.Nodes)
	lost := lostNode{ns: recordedNamespace(ctx), lostPods: map[string]sets.Set[types.UID]{}}
	for _, v := range lostVariants {
		createLost(lost.ns, v, nodes)
	}
	for _, v := range lostVariants {
		for _, kind := range []string{ibjKind, jobKind} {
			waitRunning(ctx, kind, lost.ns, v.name, 2*nodes)
		}
	}
	lost.index = nodeWithoutOperator(ctx)
	lost.name = cluster.Nodes[lost.index]
	for _, v := range lostVariants {
		for _, kind := range []string{ibjKind, jobKind} {
			on := sets.New[types.UID]()
			for _, p := range waitRunning(ctx, kind, lost.ns, v.name, 2*nodes) {
				if p.Spec.NodeName == lost.name {
					on.Insert(p.UID)
				}
			}
			Expect(on).To(HaveLen(2), "%s %s: pods on %s", kind, v.name, lost.name)
			lost.lostPods[kind+"/"+v.name] = on
		}
	}

	By("losing " + lost.name + ": its kubelet, containerd, kube-proxy and containers killed")
	lost.stopped = time.Now()
	Expect(cluster.StopNode(lost.index)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(cluster.UntaintOutOfService(ctx, lost.index)).To(Succeed())
		Expect(cluster.StartNode(ctx, lost.index)).To(Succeed())
	}, NodeTimeout(3*time.Minute))

	By("the node lifecycle controller taints it unreachable, and the taint eviction controller deletes its pods")
	Eventually(func(g Gomega) {
		for key, uids := range lost.lostPods {
			kind, name, _ := strings.Cut(key, "/")
			for _, l := range lifetimes(kind, lost.ns, name) {
				if uids.Has(l.UID) {
					g.Expect(l.Disruptions).To(ContainElement("DeletionByTaintManager"), "%s %s", kind, l.Name)
				}
			}
		}
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	lost.evicted = time.Now()

	By("the TerminatingOrFailed jobs replace them, and the IndexedBatchJob with terminatingTimeoutSeconds; the Failed ones wait")
	Eventually(func(g Gomega) {
		for _, kind := range []string{ibjKind, jobKind} {
			g.Expect(replacements(lifetimes(kind, lost.ns, lostVariants[0].name), lost)).To(HaveLen(2), kind)
		}
		g.Expect(replacements(lifetimes(ibjKind, lost.ns, "timeout-failed"), lost)).To(HaveLen(2), "IndexedBatchJob timeout-failed")
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	Consistently(func(g Gomega) {
		for _, v := range lostVariants[1:] {
			for _, kind := range []string{ibjKind, jobKind} {
				if v.timeout && kind == ibjKind {
					continue
				}
				g.Expect(replacements(lifetimes(kind, lost.ns, v.name), lost)).To(BeEmpty(), "%s %s", kind, v.name)
			}
		}
	}).WithContext(ctx).WithTimeout(10 * time.Second).WithPolling(time.Second).Should(Succeed())

	By("tainting " + lost.name + " out-of-service: pod GC fails and deletes its pods")
	lost.tainted = time.Now()
	Expect(cluster.TaintOutOfService(ctx, lost.index)).To(Succeed())
	for _, v := range lostVariants {
		waitBoth(ctx, lost.ns, v.name, 3*time.Minute)
	}
	AddReportEntry("lost node", fmt.Sprintf("%s lost; its pods evicted %.1fs after, out-of-service taint %.1fs after, every job ended %.1fs after",
		lost.name, lost.evicted.Sub(lost.stopped).Seconds(), lost.tainted.Sub(lost.stopped).Seconds(), time.Since(lost.stopped).Seconds()))
	return lost
}

// evictedAt is when the first pod on the lost node was deleted.
func (lost lostNode) evictedAt(lives []podLife) time.Time {
	var at time.Time
	for _, l := range lives {
		if l.Node == lost.name && l.Terminating.seen() && (at.IsZero() || l.Terminating.At.Before(at)) {
			at = l.Terminating.At
		}
	}
	return at
}

// replacements are the pods created after the node was lost.
func replacements(lives []podLife, lost lostNode) []podLife {
	var found []podLife
	for _, l := range lives {
		if l.Created.At.After(lost.stopped) {
			found = append(found, l)
		}
	}
	return found
}

// checkLost holds the variant's two jobs to the same exact status, with
// failed pods counted, and each pod lost with the node to what the cluster
// did to it; it returns their pods' lifetimes by kind.
func checkLost(ctx context.Context, lost lostNode, v lostVariant, failed int64) map[string][]podLife {
	GinkgoHelper()
	nodes := len(cluster.Nodes)
	ibj, job := waitBoth(ctx, lost.ns, v.name, time.Minute)
	report(lost.ns, v.name, ibj, job)
	Expect(ibj).To(Equal(outcome{Succeeded: int64(2 * nodes), Failed: failed, CompletedIndexes: fmt.Sprintf("0-%d", 2*nodes-1),
		Conditions: completedConditions()}))
	Expect(job).To(Equal(ibj), "the built-in Job controller's status on the same nodes")
	lives := map[string][]podLife{}
	for _, kind := range []string{ibjKind, jobKind} {
		lives[kind] = lifetimes(kind, lost.ns, v.name)
		Expect(lives[kind]).To(HaveLen(2*nodes+2), "%s: one pod per index and one replacement per lost pod", kind)
		for _, p := range podsOf(kind, lost.ns, v.name) {
			if p.Node == lost.name {
				// Killed with the node: no kubelet reported its
				// end; pod GC failed it.
				Expect(p.Phase).To(Equal(corev1.PodFailed), "%s: %s", kind, p)
				Expect(p.ExitCode).To(Equal(int32(-1)), "%s: %s", kind, p)
			} else {
				Expect(p.Phase).To(Equal(corev1.PodSucceeded), "%s: %s", kind, p)
				Expect(p.ExitCode).To(BeZero(), "%s: %s", kind, p)
			}
		}
		for _, l := range lives[kind] {
			if lost.lostPods[kind+"/"+v.name].Has(l.UID) {
				Expect(l.Disruptions).To(HaveExactElements("DeletionByTaintManager"), "%s: %s", kind, l.Name)
			}
		}
		AddReportEntry(kind+" "+v.name+" replacements", replacementTimes(lives[kind], lost))
	}
	return lives
}

// replacementTimes says, from the node's loss, when the lost pods were
// deleted and Failed and when their replacements were created.
func replacementTimes(lives []podLife, lost lostNode) string {
	var evicted, failed, created []string
	for _, l := range lives {
		switch {
		case l.Node == lost.name:
			evicted = append(evicted, fmt.Sprintf("%.1fs", l.Terminating.At.Sub(lost.stopped).Seconds()))
			failed = append(failed, fmt.Sprintf("%.1fs", l.Ended.At.Sub(lost.stopped).Seconds()))
		case l.Created.At.After(lost.stopped):
			created = append(created, fmt.Sprintf("%.1fs", l.Created.At.Sub(lost.stopped).Seconds()))
		}
	}
	return fmt.Sprintf("after the loss: lost pods deleted %v, Failed %v; replacements created %v; out-of-service taint %.1fs",
		evicted, failed, created, lost.tainted.Sub(lost.stopped).Seconds())
}

// checkLostFailed is checkLost for podReplacementPolicy Failed: no index
// ever had two unfinished pods, and the lost pods were replaced only after
// the out-of-service taint, once pod GC had failed them.
func checkLostFailed(ctx context.Context, lost lostNode, v lostVariant, failed int64) {
	GinkgoHelper()
	lives := checkLost(ctx, lost, v, failed)
	for _, kind := range []string{ibjKind, jobKind} {
		Expect(secondPods(kind, lives[kind])).To(BeEmpty(), kind)
		replaced := replacements(lives[kind], lost)
		Expect(replaced).To(HaveLen(2), kind)
		for _, l := range replaced {
			Expect(l.Created.At).To(BeTemporally(">", lost.tainted), "%s: %s was created before the out-of-service taint", kind, l.Name)
		}
	}
}

// nodeWithoutOperator is the last node on which no operator pod runs.
func nodeWithoutOperator(ctx context.Context) int {
	GinkgoHelper()
	pods, err := clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "control-plane=controller-manager"})
	Expect(err).NotTo(HaveOccurred())
	busy := sets.New[string]()
	for _, p := range pods.Items {
		busy.Insert(p.Spec.NodeName)
	}
	for i := len(cluster.Nodes) - 1; i >= 0; i-- {
		if !busy.Has(cluster.Nodes[i]) {
			return i
		}
	}
	Fail(fmt.Sprintf("every node runs an operator pod: %v", sets.List(busy)))
	return -1
}

// waitRunning waits until the job has count pods, each with its container
// running, and returns them.
func waitRunning(ctx context.Context, kind, namespace, name string, count int) []corev1.Pod {
	GinkgoHelper()
	var pods []corev1.Pod
	Eventually(func(g Gomega) {
		list, err := clientset.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: jobNameLabel[kind] + "=" + name})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(list.Items).To(HaveLen(count))
		for _, p := range list.Items {
			g.Expect(p.Status.ContainerStatuses).NotTo(BeEmpty(), p.Name)
			g.Expect(p.Status.ContainerStatuses[0].State.Running).NotTo(BeNil(), p.Name)
		}
		pods = list.Items
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
	return pods
}
