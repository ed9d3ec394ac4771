package e2e

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// The admission chain (mutating webhooks and policies, LimitRanger,
// PodNodeSelector) may change a pod on its way in. Each mutation below runs
// an IndexedBatchJob and the same batch/v1 Job (kube-controller-manager's
// Job controller) side by side, and counts the pods each creates in its
// first minute. A change to what the operator relies on (a and b) must not
// start a loop: at most parallelism + 2 pods a minute, the job's condition
// PodCreationFailed (reason PodMutated) naming the field within 10 s, exact
// counts, and the job goes on once the policy is gone. The rest (c to f) is
// the cluster's business: no count changes and no pod is created twice.

const (
	// chainCompletions and chainParallelism are every job's here: two
	// indexes, as the job of the report that the operator created 124
	// pods in 40 s for.
	chainCompletions = 2
	chainParallelism = 2
	// chainRun is how long each pod runs.
	chainRunFor = 2 * time.Second
	// rewrittenIndex is what the annotation-rewriting policy writes: no
	// index of a 2-index job.
	rewrittenIndex = "99"
	// The jobs' names: ours (an IndexedBatchJob) and the built-in's.
	chainOurs    = "ours"
	chainBuiltin = "builtin"
	// The sidecar mutation's pair whose sidecar ends killed (137).
	sidecarOurs    = "sidecar-killed"
	sidecarBuiltin = "sidecar-killed-builtin"
	// chainCondition: the condition must appear within this long of the
	// first create that came back mutated.
	chainCondition = 10 * time.Second
)

// The mutations' values of chainLabel.
const (
	stripLabel   = "strip-label"
	rewriteIndex = "rewrite-index"
	limitRange   = "limit-range"
	nodeSelector = "node-selector"
	toleration   = "toleration"
	sidecar      = "sidecar"
)

// The LimitRange's defaults, the namespace's node selector, the toleration
// the policy adds.
var (
	defaultMemory   = resource.MustParse("64Mi")
	selectorKey     = "admission-chain.e2e.indexedjob.dev/pool"
	selectorValue   = "batch"
	addedToleration = corev1.Toleration{Key: "admission-chain.e2e.indexedjob.dev/dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
)

// jobControllerOnly runs kube-controller-manager's Job controller alone.
const jobControllerOnly = "--controllers=job"

// notEnded is the end of a job that has not ended.
const notEnded = "running"

// chainMutation is one change the admission chain makes to a pod.
type chainMutation struct {
	id, title string
	// install puts the mutation in place in ns, for pods labelled
	// chainLabel=id; it returns what removes it, or nil.
	install func(ctx context.Context, ns string, dryRuns bool) func(context.Context)
	// applied: the pod came back from admission with the mutation.
	applied func(*corev1.Pod) bool
	// field, for a mutation of what the operator relies on, is the field
	// the job's condition must name; empty for the others.
	field string
}

var chainMutations = []chainMutation{
	{
		id:    stripLabel,
		title: "a. MutatingAdmissionPolicy strips the label the controller finds its pods by (" + ibjv1.JobNameLabel + "; batch/v1: " + batchv1.ControllerUidLabel + ")",
		install: func(ctx context.Context, ns string, dryRuns bool) func(context.Context) {
			return installChainPolicy(ctx, ns, stripLabel, dryRuns, removeLabelsPatch(ibjv1.JobNameLabel, batchv1.ControllerUidLabel))
		},
		applied: func(p *corev1.Pod) bool {
			_, ours := p.Labels[ibjv1.JobNameLabel]
			_, builtin := p.Labels[batchv1.ControllerUidLabel]
			return !ours && !builtin
		},
		field: "metadata.labels[" + ibjv1.JobNameLabel + "]",
	},
	{
		id:    rewriteIndex,
		title: "b. MutatingAdmissionPolicy rewrites the completion-index annotation to " + rewrittenIndex,
		install: func(ctx context.Context, ns string, dryRuns bool) func(context.Context) {
			return installChainPolicy(ctx, ns, rewriteIndex, dryRuns,
				setAnnotationsPatch(rewrittenIndex, ibjv1.CompletionIndexLabel, batchv1.JobCompletionIndexAnnotation))
		},
		applied: func(p *corev1.Pod) bool {
			ours, ok1 := p.Annotations[ibjv1.CompletionIndexLabel]
			builtin, ok2 := p.Annotations[batchv1.JobCompletionIndexAnnotation]
			return (ok1 || ok2) && (!ok1 || ours == rewrittenIndex) && (!ok2 || builtin == rewrittenIndex)
		},
		field: "metadata.annotations[" + ibjv1.CompletionIndexLabel + "]",
	},
	{
		id:    limitRange,
		title: "c. LimitRange default requests and limits (templates without resources)",
		install: func(ctx context.Context, ns string, _ bool) func(context.Context) {
			Expect(k8sClient.Create(ctx, &corev1.LimitRange{
				ObjectMeta: metav1.ObjectMeta{Name: "defaults", Namespace: ns},
				Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
					Type:           corev1.LimitTypeContainer,
					Default:        corev1.ResourceList{corev1.ResourceMemory: defaultMemory, corev1.ResourceCPU: resource.MustParse("200m")},
					DefaultRequest: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi"), corev1.ResourceCPU: resource.MustParse("100m")},
				}}},
			})).To(Succeed())
			return nil
		},
		applied: func(p *corev1.Pod) bool {
			q, ok := p.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]
			return ok && q.Cmp(defaultMemory) == 0
		},
	},
	{
		id:    nodeSelector,
		title: "d. PodNodeSelector: the namespace's node selector",
		install: func(ctx context.Context, ns string, _ bool) func(context.Context) {
			n := &corev1.Namespace{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Name: ns}, n)).To(Succeed())
			patch := client.MergeFrom(n.DeepCopy())
			metav1.SetMetaDataAnnotation(&n.ObjectMeta, "scheduler.alpha.kubernetes.io/node-selector", selectorKey+"="+selectorValue)
			Expect(k8sClient.Patch(ctx, n, patch)).To(Succeed())
			return nil
		},
		applied: func(p *corev1.Pod) bool { return p.Spec.NodeSelector[selectorKey] == selectorValue },
	},
	{
		id:    toleration,
		title: "e. MutatingAdmissionPolicy adds a toleration",
		install: func(ctx context.Context, ns string, dryRuns bool) func(context.Context) {
			value := fmt.Sprintf(`Object.spec.tolerations{key: %q, operator: %q, effect: %q}`, addedToleration.Key, addedToleration.Operator, addedToleration.Effect)
			patch := `has(object.spec.tolerations) ? [JSONPatch{op: "add", path: "/spec/tolerations/-", value: ` + value + `}]` +
				` : [JSONPatch{op: "add", path: "/spec/tolerations", value: [` + value + `]}]`
			installChainPolicy(ctx, ns, toleration, dryRuns, patch)
			return nil
		},
		applied: func(p *corev1.Pod) bool {
			for _, t := range p.Spec.Tolerations {
				if t.MatchToleration(&addedToleration) {
					return true
				}
			}
			return false
		},
	},
	{
		id:    sidecar,
		title: "f. mutating webhook injects a native sidecar (restartPolicy Always)",
		install: func(ctx context.Context, ns string, _ bool) func(context.Context) {
			startSidecarInjector(ctx, ns, sidecar)
			return nil
		},
		applied: hasSidecar,
	},
}

// chainTemplate is the pod template of the mutation's jobs, on node.
func chainTemplate(id, node string) corev1.PodTemplateSpec {
	job := harness.MakeIndexedBatchJob("template", "").PodLabel(chainLabel, id).Obj()
	job.Spec.Template.Spec.NodeName = node
	return job.Spec.Template
}

// chainJobs are the mutation's IndexedBatchJob and batch/v1 Job, with the
// pod failure policy rules given.
func chainJobs(ns, id, ours, builtin, node string, rules ...batchv1.PodFailurePolicyRule) (*ibjv1.IndexedBatchJob, *batchv1.Job) {
	w := harness.MakeIndexedBatchJob(ours, ns).Completions(chainCompletions).Parallelism(chainParallelism)
	bj := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: builtin, Namespace: ns},
		Spec: batchv1.JobSpec{
			Completions: ptr.To[int32](chainCompletions), Parallelism: ptr.To[int32](chainParallelism),
			CompletionMode: ptr.To(batchv1.IndexedCompletion), Template: chainTemplate(id, node),
		},
	}
	if len(rules) > 0 {
		w.PodFailurePolicy(rules...)
		bj.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: rules}
	}
	job := w.Obj()
	job.Spec.Template = chainTemplate(id, node)
	return job, bj
}

// chainRun is one mutation's namespace and jobs, and what was seen of them.
type chainRun struct {
	m      chainMutation
	ns     string
	pods   *chainPods
	remove func(context.Context)

	// What the first minute showed of our job: when the condition was
	// first seen, its message, and the first status seen off its exact
	// counts.
	conditionAt      time.Time
	conditionMessage string
	inexact          string
}

// setUpChainRun makes the mutation's namespace, puts the mutation in place,
// waits until admission applies it, and starts the watch and the kubelets
// of the namespace's pods.
func setUpChainRun(ctx context.Context, m chainMutation) *chainRun {
	GinkgoHelper()
	r := &chainRun{m: m, ns: newNamespace(ctx)}
	r.remove = m.install(ctx, r.ns, false)
	waitInEffect(ctx, r.ns, m.id, false, m.applied)
	r.pods = watchChainPods(ctx, r.ns)
	startChainKubelets(r.ns)
	if m.id == sidecar {
		endSidecarPods(ctx, r.ns)
	}
	return r
}

// startChainKubelets plays the pods of both jobs of ns, by their job-name
// labels: each runs chainRunFor and succeeds.
func startChainKubelets(ns string) {
	GinkgoHelper()
	cs := chainClientset()
	for _, kind := range []struct{ selector, index string }{
		{ibjv1.JobNameLabel + "=" + chainOurs, ibjv1.CompletionIndexLabel},
		{batchv1.JobNameLabel + "=" + chainBuiltin, batchv1.JobCompletionIndexAnnotation},
	} {
		sim := podsim.New(podsim.Options{
			Client: cs, Namespace: ns, LabelSelector: kind.selector, IndexLabels: []string{kind.index},
			Script:   func(*corev1.Pod, int) podsim.Plan { return podsim.Plan{Run: chainRunFor} },
			Shutdown: 100 * time.Millisecond, Workers: 4, ReportRunning: true,
		})
		runCtx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)
		Expect(sim.Run(runCtx)).To(Succeed())
	}
}

// createJobs creates the mutation's jobs; the sidecar mutation's also a
// pair whose sidecar ends killed, with a FailJob rule on exit code 137.
func (r *chainRun) createJobs(ctx context.Context) {
	GinkgoHelper()
	job, bj := chainJobs(r.ns, r.m.id, chainOurs, chainBuiltin, simNode)
	Expect(k8sClient.Create(ctx, job)).To(Succeed())
	Expect(k8sClient.Create(ctx, bj)).To(Succeed())
	if r.m.id != sidecar {
		return
	}
	rule := batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailJob,
		OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{137}}}
	job, bj = chainJobs(r.ns, r.m.id, sidecarOurs, sidecarBuiltin, sidecarNode, rule)
	Expect(k8sClient.Create(ctx, job)).To(Succeed())
	Expect(k8sClient.Create(ctx, bj)).To(Succeed())
}

// observe reads our job during the first minute: when the condition
// appears, and whether its counts ever leave 0.
func (r *chainRun) observe(ctx context.Context) {
	GinkgoHelper()
	if r.m.field == "" {
		return
	}
	job := getJob(ctx, r.ns, chainOurs)
	if c := meta.FindStatusCondition(job.Status.Conditions, ibjv1.ConditionPodCreationFailed); c != nil && r.conditionAt.IsZero() &&
		c.Status == metav1.ConditionTrue && c.Reason == ibjv1.ReasonPodMutated {
		r.conditionAt, r.conditionMessage = time.Now(), c.Message
	}
	if s := job.Status; r.inexact == "" && (s.Succeeded != 0 || s.Failed != 0 || s.CompletedIndexes != "") {
		r.inexact = fmt.Sprintf("succeeded %d, failed %d, completed indexes %q while every create came back mutated", s.Succeeded, s.Failed, s.CompletedIndexes)
	}
}

// chainFigures are one mutation's figures.
type chainFigures struct {
	title                      string
	oursMinute, builtinMinute  int
	oursAll, builtinAll        int
	toCondition                string
	oursEnd, builtinEnd        string
	sidecarOurs, sidecarBuiltn string
}

// jobEnd sums up our job's status.
func jobEnd(j *ibjv1.IndexedBatchJob) string {
	end := notEnded
	switch {
	case harness.ConditionReason(j, ibjv1.ConditionComplete) != "":
		end = "Complete"
	case harness.ConditionReason(j, ibjv1.ConditionFailed) != "":
		end = "Failed (" + harness.ConditionReason(j, ibjv1.ConditionFailed) + ")"
	}
	return fmt.Sprintf("%s, succeeded %d, failed %d", end, j.Status.Succeeded, j.Status.Failed)
}

// builtinEnd sums up a batch/v1 Job's status.
func builtinEnd(ctx context.Context, ns, name string) (string, bool) {
	GinkgoHelper()
	j := &batchv1.Job{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, j)).To(Succeed())
	s := batchDiffStatus(j)
	end := notEnded
	if s.Finished {
		end = s.Condition
		if s.Reason != "" && s.Condition != string(batchv1.JobComplete) {
			end += " (" + s.Reason + ")"
		}
	}
	return fmt.Sprintf("%s, succeeded %d, failed %d", end, s.Succeeded, s.Failed), s.Finished
}

// ended: our job has its Complete or Failed condition.
func ended(j *ibjv1.IndexedBatchJob) bool {
	return harness.ConditionReason(j, ibjv1.ConditionComplete) != "" || harness.ConditionReason(j, ibjv1.ConditionFailed) != ""
}

// podMutatedEvents counts the PodMutated events of our job.
func podMutatedEvents(ctx context.Context, ns, job string) int {
	GinkgoHelper()
	var events eventsv1.EventList
	Expect(k8sClient.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
	n := 0
	for _, e := range events.Items {
		if e.Regarding.Name == job && e.Reason == ibjv1.ReasonPodMutated {
			n++
			if e.Series != nil {
				n += int(e.Series.Count) - 1
			}
		}
	}
	return n
}

// check holds the run to its targets once its jobs ended, and returns its
// figures and what went wrong.
func (r *chainRun) check(ctx context.Context, start time.Time) (chainFigures, []string) {
	GinkgoHelper()
	ours, builtin := r.pods.of("IndexedBatchJob/"+chainOurs), r.pods.of("Job/"+chainBuiltin)
	end := start.Add(time.Minute)
	f := chainFigures{title: r.m.title, oursMinute: within(ours, end), builtinMinute: within(builtin, end),
		oursAll: len(ours), builtinAll: len(builtin), toCondition: "-"}
	var problems []string
	fail := func(format string, args ...any) {
		problems = append(problems, r.m.id+": "+fmt.Sprintf(format, args...))
	}
	job := getJob(ctx, r.ns, chainOurs)
	f.oursEnd = jobEnd(job)
	var builtinDone bool
	f.builtinEnd, builtinDone = builtinEnd(ctx, r.ns, chainBuiltin)
	if _, ok := firstWith(builtin, r.m.applied); !ok {
		fail("no pod of the batch/v1 Job came back with the mutation: the comparison tested nothing")
	}
	if harness.ConditionReason(job, ibjv1.ConditionComplete) == "" || job.Status.Succeeded != chainCompletions || job.Status.Failed != 0 {
		fail("our job ended %s, want Complete with %d succeeded and 0 failed", f.oursEnd, chainCompletions)
	}
	if r.m.field == "" {
		if n := len(ours) - countApplied(ours, r.m.applied); n > 0 {
			fail("%d of our %d pods came back without the mutation", n, len(ours))
		}
		if len(ours) != chainCompletions || len(builtin) != chainCompletions {
			fail("pods created: ours %d, batch/v1 %d, want %d each (no pod created twice)", len(ours), len(builtin), chainCompletions)
		}
		if !builtinDone || !strings.HasPrefix(f.builtinEnd, string(batchv1.JobComplete)) {
			fail("the batch/v1 Job ended %s, want Complete", f.builtinEnd)
		}
		if r.m.id == sidecar {
			problems = append(problems, r.checkSidecarKilled(ctx, &f)...)
		}
		return f, problems
	}
	first, ok := firstWith(ours, r.m.applied)
	switch {
	case !ok:
		fail("none of our pods came back mutated: the policy tested nothing")
	case r.conditionAt.IsZero():
		fail("condition %s (reason %s) never seen in the first minute", ibjv1.ConditionPodCreationFailed, ibjv1.ReasonPodMutated)
	default:
		wait := r.conditionAt.Sub(first.at)
		f.toCondition = wait.Round(100 * time.Millisecond).String()
		if wait > chainCondition {
			fail("the condition came %v after the first mutated create, want at most %v", wait, chainCondition)
		}
		if !strings.Contains(r.conditionMessage, r.m.field) {
			fail("the condition's message does not name %s: %q", r.m.field, r.conditionMessage)
		}
	}
	if f.oursMinute > chainParallelism+2 {
		fail("our job created %d pods in its first minute while its creates came back mutated, want at most parallelism + 2 = %d", f.oursMinute, chainParallelism+2)
	}
	if r.inexact != "" {
		fail("%s", r.inexact)
	}
	if n := podMutatedEvents(ctx, r.ns, chainOurs); n != 1 {
		fail("%d PodMutated events, want 1", n)
	}
	if c := meta.FindStatusCondition(job.Status.Conditions, ibjv1.ConditionPodCreationFailed); c != nil && c.Status == metav1.ConditionTrue {
		fail("condition %s still True after the policy went: %s", c.Type, c.Message)
	}
	return f, problems
}

// checkSidecarKilled holds the sidecar-killed pair: our job counts its
// pods' own failures, never the sidecar's 137, so its FailJob rule on 137
// does not fire; the built-in's end is reported.
func (r *chainRun) checkSidecarKilled(ctx context.Context, f *chainFigures) []string {
	GinkgoHelper()
	job := getJob(ctx, r.ns, sidecarOurs)
	f.sidecarOurs = jobEnd(job)
	f.sidecarBuiltn, _ = builtinEnd(ctx, r.ns, sidecarBuiltin)
	if harness.ConditionReason(job, ibjv1.ConditionComplete) == "" || job.Status.Succeeded != chainCompletions || job.Status.Failed != chainCompletions {
		return []string{fmt.Sprintf("%s: the job whose sidecars end with 137 ended %s, want Complete with %d succeeded and %d failed (the FailJob rule on 137 must not see the sidecar)",
			sidecar, f.sidecarOurs, chainCompletions, chainCompletions)}
	}
	return nil
}

// countApplied counts the creates whose pod came back with the mutation.
func countApplied(creates []podCreate, applied func(*corev1.Pod) bool) int {
	n := 0
	for _, pc := range creates {
		if applied(pc.pod) {
			n++
		}
	}
	return n
}

// done: every job of the run that must end has ended.
func (r *chainRun) done(ctx context.Context) bool {
	GinkgoHelper()
	if !ended(getJob(ctx, r.ns, chainOurs)) {
		return false
	}
	if r.m.field != "" {
		return true
	}
	if _, ok := builtinEnd(ctx, r.ns, chainBuiltin); !ok {
		return false
	}
	if r.m.id != sidecar {
		return true
	}
	_, ok := builtinEnd(ctx, r.ns, sidecarBuiltin)
	return ok && ended(getJob(ctx, r.ns, sidecarOurs))
}

// chainTable is the figures as a table.
func chainTable(figures []chainFigures) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "mutation\tIBJ pods, 1st minute\tbatch/v1 pods, 1st minute\tIBJ pods, all\tbatch/v1 pods, all\tIBJ condition after\tIBJ end\tbatch/v1 end")
	for _, f := range figures {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", f.title, f.oursMinute, f.builtinMinute, f.oursAll, f.builtinAll, f.toCondition, f.oursEnd, f.builtinEnd)
	}
	_ = w.Flush()
	for _, f := range figures {
		if f.sidecarOurs != "" {
			fmt.Fprintf(&b, "sidecar killed (137) with a FailJob rule on 137: IBJ %s; batch/v1 %s\n", f.sidecarOurs, f.sidecarBuiltn)
		}
	}
	return b.String()
}

var _ = Describe("The admission chain", Label("admission-chain"), func() {
	It("beside batch/v1: no loop and exact counts whatever admission changes, each mutation counted over a minute", func(ctx SpecContext) {
		By("starting kube-controller-manager with the built-in Job controller alone")
		proc, err := cluster.StartComponent(controlplane.ControllerManager, controlplane.Component{Flags: []string{jobControllerOnly}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(cluster.StopComponent(proc)).To(Succeed()) })

		By("putting each mutation in place in a namespace of its own")
		runs := make([]*chainRun, len(chainMutations))
		for i, m := range chainMutations {
			runs[i] = setUpChainRun(ctx, m)
		}
		By("creating each mutation's IndexedBatchJob and batch/v1 Job, and watching them for a minute")
		start := time.Now()
		for _, r := range runs {
			r.createJobs(ctx)
		}
		for time.Since(start) < time.Minute {
			for _, r := range runs {
				r.observe(ctx)
			}
			time.Sleep(100 * time.Millisecond)
		}
		By("removing the policies our pods came back mutated by; every job must end")
		for _, r := range runs {
			if r.remove != nil {
				r.remove(ctx)
			}
		}
		Eventually(func() bool {
			for _, r := range runs {
				if !r.done(ctx) {
					return false
				}
			}
			return true
		}).WithContext(ctx).WithTimeout(3*time.Minute).WithPolling(time.Second).Should(BeTrue(), "the jobs did not end")

		figures := make([]chainFigures, 0, len(runs))
		var problems []string
		for _, r := range runs {
			f, p := r.check(ctx, start)
			figures = append(figures, f)
			problems = append(problems, p...)
		}
		table := chainTable(figures)
		fmt.Fprintln(GinkgoWriter, table)
		AddReportEntry("admission chain", table)
		Expect(problems).To(BeEmpty())
	}, SpecTimeout(8*time.Minute))

	It("refuses at kubectl apply a job whose dry-run pod loses its job-name label, naming the field, and admits with a warning one whose index annotation is rewritten", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		for _, m := range chainMutations[:2] {
			m.install(ctx, ns, true)
			waitInEffect(ctx, ns, m.id, true, m.applied)
		}
		labelled := func(name, id string) *ibjv1.IndexedBatchJob {
			job := admissionJob(ns, name, nil)
			job.Spec.Suspend = ptr.To(true)
			job.Spec.Template.Labels = map[string]string{chainLabel: id}
			return job
		}

		By("refusing the job whose every pod would lose its job-name label")
		out, err := applyManifest(labelled("stripped", stripLabel), "apply")
		Expect(err).To(HaveOccurred(), "kubectl apply should refuse the job:\n%s", out)
		Expect(out).To(ContainSubstring(`The IndexedBatchJob "stripped" is invalid: `))
		Expect(out).To(ContainSubstring("spec.template.metadata.labels["+ibjv1.JobNameLabel+"]"), "the refusal names the field")
		err = k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "stripped"}, &ibjv1.IndexedBatchJob{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the refused job exists: %v", err)

		By("admitting, with a warning naming the field, the job whose pods' index annotation is rewritten")
		out, err = applyManifest(labelled("rewritten", rewriteIndex), "apply")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("indexedbatchjob.batch.indexedjob.dev/rewritten created"))
		Expect(out).To(ContainSubstring("Warning:"))
		Expect(out).To(ContainSubstring("metadata.annotations["+ibjv1.CompletionIndexLabel+"]"), "the warning names the field")
	})
})
