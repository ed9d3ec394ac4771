package node

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/nodecluster"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

// What dist/install.yaml installs.
const (
	operatorNamespace  = "indexed-batch-job-system"
	operatorDeployment = "indexed-batch-job-controller-manager"
)

// bothIndexes is completedIndexes of the specs' two-index jobs once both
// indexes succeeded.
const bothIndexes = "0,1"

// A job runs as an IndexedBatchJob (kind ibj) and as a batch/v1 Job
// (kind job) from the same spec.
const (
	ibjKind = "ibj"
	jobKind = "job"
)

var resources = map[string]schema.GroupVersionResource{
	ibjKind: {Group: "batch.indexedjob.dev", Version: "v1alpha1", Resource: "indexedbatchjobs"},
	jobKind: {Group: "batch", Version: "v1", Resource: "jobs"},
}

// The labels each controller puts on its pods.
var (
	jobNameLabel = map[string]string{ibjKind: "batch.indexedjob.dev/job-name", jobKind: "batch.kubernetes.io/job-name"}
	indexLabel   = map[string]string{ibjKind: "batch.indexedjob.dev/completion-index", jobKind: "batch.kubernetes.io/job-completion-index"}
)

// kc runs the pinned kubectl against the cluster, as a user would.
var kc testutil.Kubectl

// recordedNamespace creates a namespace for one spec (deleted when it ends;
// if it fails, what was in it is reported) and records its pods from then
// on.
func recordedNamespace(ctx context.Context) string {
	GinkgoHelper()
	ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{
		Prefix:                "node-",
		Delete:                true,
		WaitForServiceAccount: true,
		OnFailure:             func(ns string) { kc.ReportNamespace(ns, "ibj,jobs,pods") },
	})
	watchCtx, stop := context.WithCancel(context.Background())
	DeferCleanup(stop)
	recordPods(watchCtx, ns)
	return ns
}

// jobManifest is an IndexedBatchJob or a batch/v1 Job with spec, a YAML
// block indented by four spaces (the worker image's pods). The Job is
// Indexed, as every IndexedBatchJob is.
func jobManifest(kind, name, namespace, spec string) string {
	head := "apiVersion: batch.indexedjob.dev/v1alpha1\nkind: IndexedBatchJob\n"
	if kind == jobKind {
		head = "apiVersion: batch/v1\nkind: Job\n"
		spec = "    completionMode: Indexed\n" + spec
	}
	return fmt.Sprintf("%smetadata:\n  name: %s\n  namespace: %s\nspec:\n%s", head, name, namespace, spec)
}

// createBoth creates the job as an IndexedBatchJob and as a batch/v1 Job,
// both named name.
func createBoth(namespace, name, spec string) {
	GinkgoHelper()
	for _, kind := range []string{ibjKind, jobKind} {
		out, err := kc.RunWithStdin(jobManifest(kind, name, namespace, spec), "create", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), "creating the %s:\n%s", kind, out)
	}
}

// outcome is what the two controllers must agree on: the counts, the
// index sets and the conditions that hold, by type and reason.
type outcome struct {
	Active, Ready, Succeeded, Failed, Terminating int64
	CompletedIndexes, FailedIndexes               string
	Conditions                                    []string
}

func (o outcome) String() string {
	return fmt.Sprintf("active %d, ready %d, succeeded %d, failed %d, terminating %d, completedIndexes %q, failedIndexes %q, conditions %v",
		o.Active, o.Ready, o.Succeeded, o.Failed, o.Terminating, o.CompletedIndexes, o.FailedIndexes, o.Conditions)
}

func getOutcome(ctx context.Context, kind, namespace, name string) (outcome, error) {
	u, err := dyn.Resource(resources[kind]).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return outcome{}, err
	}
	return outcomeOf(u), nil
}

func outcomeOf(u *unstructured.Unstructured) outcome {
	var o outcome
	o.Active, _, _ = unstructured.NestedInt64(u.Object, "status", "active")
	o.Ready, _, _ = unstructured.NestedInt64(u.Object, "status", "ready")
	o.Succeeded, _, _ = unstructured.NestedInt64(u.Object, "status", "succeeded")
	o.Failed, _, _ = unstructured.NestedInt64(u.Object, "status", "failed")
	o.Terminating, _, _ = unstructured.NestedInt64(u.Object, "status", "terminating")
	o.CompletedIndexes, _, _ = unstructured.NestedString(u.Object, "status", "completedIndexes")
	o.FailedIndexes, _, _ = unstructured.NestedString(u.Object, "status", "failedIndexes")
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		m, _ := c.(map[string]any)
		if m["status"] == "True" {
			o.Conditions = append(o.Conditions, fmt.Sprintf("%s/%s", m["type"], m["reason"]))
		}
	}
	slices.Sort(o.Conditions)
	return o
}

// finished reports whether the outcome has a terminal condition.
func (o outcome) finished() bool {
	for _, c := range o.Conditions {
		if strings.HasPrefix(c, "Complete/") || strings.HasPrefix(c, "Failed/") {
			return true
		}
	}
	return false
}

// failedConditions are the conditions of a job that failed for reason.
func failedConditions(reason string) []string {
	return []string{"Failed/" + reason, "FailureTarget/" + reason}
}

// completedConditions are the conditions of a job that completed every
// index.
func completedConditions() []string {
	return []string{"Complete/CompletionsReached", "SuccessCriteriaMet/CompletionsReached"}
}

// waitBoth waits until both jobs have ended and no pod of either is left
// running, and returns their outcomes.
func waitBoth(ctx context.Context, namespace, name string, timeout time.Duration) (ibj, job outcome) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var err error
		ibj, err = getOutcome(ctx, ibjKind, namespace, name)
		g.Expect(err).NotTo(HaveOccurred())
		job, err = getOutcome(ctx, jobKind, namespace, name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ibj.finished()).To(BeTrue(), "IndexedBatchJob: %s", ibj)
		g.Expect(job.finished()).To(BeTrue(), "Job: %s", job)
		g.Expect(ibj.Terminating).To(BeZero())
		g.Expect(job.Terminating).To(BeZero())
	}).WithContext(ctx).WithTimeout(timeout).WithPolling(time.Second).Should(Succeed())
	return ibj, job
}

// podReport is one pod as the kubelet reported it.
type podReport struct {
	UID      types.UID
	Name     string
	Index    int
	Node     string
	Phase    corev1.PodPhase
	ExitCode int32
	Reason   string
	// Disruption is the DisruptionTarget condition's reason, if any.
	Disruption string
	// Started and Finished are when its container ran, if it ended;
	// Restarts its containers' restart count.
	Started, Finished time.Time
	Restarts          int32
}

func (p podReport) String() string {
	s := fmt.Sprintf("%s (index %d) on %s: %s, exit code %d (%s)", p.Name, p.Index, p.Node, p.Phase, p.ExitCode, p.Reason)
	if p.Disruption != "" {
		s += ", DisruptionTarget " + p.Disruption
	}
	return s
}

// recorders keep, for each spec's namespace, the last state of every pod
// seen in it (by UID), and its lifetime: a pod deleted after it ended (a
// job's end deletes its running pods; the kubelet then removes them) is
// reported as it was last.
var (
	recordersMu sync.Mutex
	recorders   = map[string]*podRecorder{}
)

type podRecorder struct {
	mu    sync.Mutex
	seq   int
	pods  map[string]*corev1.Pod
	lives map[string]*podLife
}

// moment is when the namespace's watch saw a change: its order among the
// watch's events (one watch sees every change in the order the API server
// made them, so the orders compare whatever the clocks) and the time this
// process received it.
type moment struct {
	Seq int
	At  time.Time
}

func (m moment) seen() bool { return m.Seq > 0 }

// podLife is a pod's lifetime as the watch saw it.
type podLife struct {
	UID    types.UID
	Name   string
	Labels map[string]string
	Node   string
	// Created is its first event; Running its first in phase Running;
	// Terminating its first with a deletion timestamp; Ended its first
	// in phase Succeeded or Failed; Deleted its removal.
	Created, Running, Terminating, Ended, Deleted moment
	// Disruptions are the reasons of its DisruptionTarget condition, in
	// the order seen.
	Disruptions []string
}

// end is when the pod stopped counting as unfinished: its terminal phase,
// or its removal if it had none.
func (l podLife) end() moment {
	if l.Ended.seen() {
		return l.Ended
	}
	return l.Deleted
}

func (r *podRecorder) observe(deleted bool, pod *corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	now := moment{Seq: r.seq, At: time.Now()}
	// By UID: a job may give a later pod of an index the name of one
	// that is gone.
	uid := string(pod.UID)
	r.pods[uid] = pod
	l := r.lives[uid]
	if l == nil {
		l = &podLife{UID: pod.UID, Name: pod.Name, Labels: pod.Labels, Created: now}
		r.lives[uid] = l
	}
	if pod.Spec.NodeName != "" {
		l.Node = pod.Spec.NodeName
	}
	switch {
	case pod.Status.Phase == corev1.PodRunning && !l.Running.seen():
		l.Running = now
	case (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) && !l.Ended.seen():
		l.Ended = now
	}
	if pod.DeletionTimestamp != nil && !l.Terminating.seen() {
		l.Terminating = now
	}
	if deleted {
		l.Deleted = now
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && !slices.Contains(l.Disruptions, c.Reason) {
			l.Disruptions = append(l.Disruptions, c.Reason)
		}
	}
}

// recordPods watches the namespace's pods until ctx ends.
func recordPods(ctx context.Context, namespace string) {
	GinkgoHelper()
	w, err := clientset.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	r := &podRecorder{pods: map[string]*corev1.Pod{}, lives: map[string]*podLife{}}
	recordersMu.Lock()
	recorders[namespace] = r
	recordersMu.Unlock()
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok {
				r.observe(ev.Type == watch.Deleted, pod)
			}
		}
	}()
}

func recorderOf(namespace string) *podRecorder {
	GinkgoHelper()
	recordersMu.Lock()
	r := recorders[namespace]
	recordersMu.Unlock()
	Expect(r).NotTo(BeNil(), "no pods recorded in %s", namespace)
	return r
}

// lifetimes are the lifetimes of the job's pods, by index then creation.
func lifetimes(kind, namespace, name string) []podLife {
	GinkgoHelper()
	r := recorderOf(namespace)
	r.mu.Lock()
	var lives []podLife
	for _, l := range r.lives {
		if l.Labels[jobNameLabel[kind]] == name {
			l := *l
			l.Disruptions = slices.Clone(l.Disruptions)
			lives = append(lives, l)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(lives, func(a, b podLife) int {
		if a.Labels[indexLabel[kind]] != b.Labels[indexLabel[kind]] {
			return strings.Compare(a.Labels[indexLabel[kind]], b.Labels[indexLabel[kind]])
		}
		return a.Created.Seq - b.Created.Seq
	})
	return lives
}

// secondPods lists each pod created while an earlier pod of its index
// had not ended: what podReplacementPolicy Failed rules out.
func secondPods(kind string, lives []podLife) []string {
	var found []string
	for i, l := range lives {
		for _, earlier := range lives[:i] {
			if earlier.Labels[indexLabel[kind]] != l.Labels[indexLabel[kind]] {
				continue
			}
			if end := earlier.end(); !end.seen() || end.Seq > l.Created.Seq {
				found = append(found, fmt.Sprintf("%s created while %s (index %s) had not ended", l.Name, earlier.Name, l.Labels[indexLabel[kind]]))
			}
		}
	}
	return found
}

// lifeReport is a pod's lifetime in seconds from t0, for the report.
func lifeReport(l podLife, t0 time.Time) string {
	at := func(m moment) string {
		if !m.seen() {
			return "-"
		}
		return fmt.Sprintf("%.1fs", m.At.Sub(t0).Seconds())
	}
	return fmt.Sprintf("%s on %s: created %s, running %s, terminating %s, ended %s, deleted %s, DisruptionTarget %v",
		l.Name, l.Node, at(l.Created), at(l.Running), at(l.Terminating), at(l.Ended), at(l.Deleted), l.Disruptions)
}

// podsOf lists the job's pods as last seen, by index then creation.
func podsOf(kind, namespace, name string) []podReport {
	GinkgoHelper()
	r := recorderOf(namespace)
	r.mu.Lock()
	var pods []corev1.Pod
	created := map[types.UID]int{}
	for uid, pod := range r.pods {
		if pod.Labels[jobNameLabel[kind]] == name {
			pods = append(pods, *pod)
			created[pod.UID] = r.lives[uid].Created.Seq
		}
	}
	r.mu.Unlock()
	slices.SortFunc(pods, func(a, b corev1.Pod) int {
		if a.Labels[indexLabel[kind]] != b.Labels[indexLabel[kind]] {
			return strings.Compare(a.Labels[indexLabel[kind]], b.Labels[indexLabel[kind]])
		}
		return created[a.UID] - created[b.UID]
	})
	reports := make([]podReport, 0, len(pods))
	for _, pod := range pods {
		reports = append(reports, reportOf(kind, &pod))
	}
	return reports
}

// reportOf is the pod as the kubelet last reported it.
func reportOf(kind string, pod *corev1.Pod) podReport {
	r := podReport{UID: pod.UID, Name: pod.Name, Node: pod.Spec.NodeName, Phase: pod.Status.Phase, ExitCode: -1}
	r.Index, _ = strconv.Atoi(pod.Labels[indexLabel[kind]])
	for _, cs := range pod.Status.ContainerStatuses {
		r.Restarts += cs.RestartCount
		if cs.State.Terminated != nil {
			r.ExitCode, r.Reason = cs.State.Terminated.ExitCode, cs.State.Terminated.Reason
			r.Started, r.Finished = cs.State.Terminated.StartedAt.Time, cs.State.Terminated.FinishedAt.Time
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			r.Disruption = c.Reason
		}
	}
	return r
}

// exitCodes is the pods' exit codes by index, as the kubelet reported them.
func exitCodes(pods []podReport) map[int][]int32 {
	codes := map[int][]int32{}
	for _, p := range pods {
		codes[p.Index] = append(codes[p.Index], p.ExitCode)
	}
	return codes
}

// report records both jobs' outcomes and pods in the spec's report (and so
// in the suite's verbose output), for the record of what the kubelet said.
func report(namespace, name string, ibj, job outcome) {
	var b strings.Builder
	var t0 time.Time
	for _, kind := range []string{ibjKind, jobKind} {
		for _, l := range lifetimes(kind, namespace, name) {
			if t0.IsZero() || l.Created.At.Before(t0) {
				t0 = l.Created.At
			}
		}
	}
	for _, kind := range []string{ibjKind, jobKind} {
		o := ibj
		if kind == jobKind {
			o = job
		}
		fmt.Fprintf(&b, "%s %s: %s\n", kind, name, o)
		for _, p := range podsOf(kind, namespace, name) {
			fmt.Fprintf(&b, "  %s\n", p)
		}
		fmt.Fprintf(&b, "  lifetimes, from the first pod's creation:\n")
		for _, l := range lifetimes(kind, namespace, name) {
			fmt.Fprintf(&b, "    %s\n", lifeReport(l, t0))
		}
	}
	AddReportEntry(name, b.String())
	fmt.Fprint(GinkgoWriter, b.String())
}

// workerTemplate is a pod template running the worker image with args.
func workerTemplate(args ...string) string { return workerTemplateWith("", args...) }

// workerTemplateWith is workerTemplate with more of the container's fields,
// a YAML block indented by ten spaces.
func workerTemplateWith(container string, args ...string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = strconv.Quote(a)
	}
	return fmt.Sprintf(`    template:
      spec:
        restartPolicy: Never
        terminationGracePeriodSeconds: 30
        containers:
        - name: main
          image: %s
          args: [%s]
%s`, nodecluster.WorkerImage, strings.Join(quoted, ", "), container)
}
