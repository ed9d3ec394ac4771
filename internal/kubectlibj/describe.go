package kubectlibj

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/workloadapi"
)

// describeEvents is how many of the latest events about the job describe
// shows.
const describeEvents = 10

const describeExample = `  # Why is per-index not running, and what happens next?
  kubectl ibj describe per-index

  # Every job of the namespace, or of all namespaces
  kubectl ibj describe
  kubectl ibj describe -A`

// describeOptions is `kubectl ibj describe [JOB]`.
type describeOptions struct {
	*common
	name          string
	allNamespaces bool
}

func newDescribeCommand(c *common) *cobra.Command {
	o := &describeOptions{common: c}
	cmd := &cobra.Command{
		Use:   "describe [JOB]",
		Short: "The job's state in words, its counts, its latest events and what happens next",
		Long: `Describe an IndexedBatchJob in words: whether it runs, and if not why (finished,
suspended, waiting for the operator, backing off until a time, failing to
create pods as the latest FailedCreate event says); its indexes by state and
its pod counts; from its failure record, how many failures it had, how it
avoids nodes, and the last recorded failure of each failed index, even once
its pods are gone; its conditions; what will happen next; and the latest
events about it. Without JOB, every job of the namespace (-A: of all
namespaces).`,
		Example: describeExample,
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				o.name = args[0]
			}
			if o.name != "" && o.allNamespaces {
				return fmt.Errorf("a job name cannot be given with --all-namespaces")
			}
			if err := o.complete(); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "Describe the jobs of every namespace.")
	return cmd
}

func (o *describeOptions) run(ctx context.Context) error {
	if o.name != "" {
		job, err := o.getJob(ctx, o.namespace, o.name)
		if err != nil {
			return err
		}
		return o.describe(ctx, job)
	}
	namespace := o.namespace
	if o.allNamespaces {
		namespace = metav1.NamespaceAll
	}
	jobs := o.dynamic.Resource(jobsResource).Namespace(namespace)
	p := o.newPager(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return jobs.List(ctx, opts)
	})
	first := true
	err := p.EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return nil
		}
		job := &ibjv1.IndexedBatchJob{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), job); err != nil {
			return err
		}
		if !first {
			fmt.Fprint(o.Out, "\n\n")
		}
		first = false
		return o.describe(ctx, job)
	})
	if err == nil && first {
		where := "namespace " + namespace
		if o.allNamespaces {
			where = "any namespace"
		}
		fmt.Fprintf(o.ErrOut, "No IndexedBatchJobs found in %s.\n", where)
	}
	return err
}

// describe reads the job's pods and events and writes its description.
func (o *describeOptions) describe(ctx context.Context, job *ibjv1.IndexedBatchJob) error {
	scan, err := o.scanPods(ctx, job)
	if err != nil {
		return err
	}
	rec, err := o.recordOrWarn(ctx, job)
	if err != nil {
		return err
	}
	events, err := o.jobEvents(ctx, job)
	if err != nil {
		return err
	}
	d := newDescription(newJobView(job, scan, o.now(), o.backoff).withRecord(rec.Record), events)
	// kubectl describe's layout: each block of lines aligns on its own
	// (cli-runtime's table writer would carry widths from block to block).
	w := tabwriter.NewWriter(o.Out, 0, 8, 2, ' ', 0)
	d.write(w)
	return w.Flush()
}

// jobEvents lists the events about the job, oldest first. Events written
// through events.k8s.io/v1 are listed too: the API server serves every
// event in both APIs.
func (c *common) jobEvents(ctx context.Context, job *ibjv1.IndexedBatchJob) ([]jobEvent, error) {
	list := c.kube.CoreV1().Events(job.Namespace)
	p := c.newPager(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return list.List(ctx, opts)
	})
	selector := fields.Set{
		"involvedObject.kind": jobKind.Kind,
		"involvedObject.name": job.Name,
		"involvedObject.uid":  string(job.UID),
	}.AsSelector().String()
	var events []jobEvent
	err := p.EachListItem(ctx, metav1.ListOptions{FieldSelector: selector}, func(obj runtime.Object) error {
		if e, ok := obj.(*corev1.Event); ok {
			events = append(events, newJobEvent(e))
		}
		return nil
	})
	slices.SortStableFunc(events, func(a, b jobEvent) int { return a.last.Compare(b.last) })
	return events, err
}

// jobEvent is one event about the job, its times read from whichever of
// the core and events.k8s.io fields its writer set.
type jobEvent struct {
	typ, reason, from, message string
	first, last                time.Time
	count                      int32
}

func newJobEvent(e *corev1.Event) jobEvent {
	je := jobEvent{typ: e.Type, reason: e.Reason, message: e.Message, count: max(e.Count, 1)}
	je.from = e.Source.Component
	if je.from == "" {
		je.from = e.ReportingController
	}
	je.first = e.FirstTimestamp.Time
	if je.first.IsZero() {
		je.first = e.EventTime.Time
	}
	je.last = latest(latest(e.LastTimestamp.Time, e.EventTime.Time), je.first)
	if s := e.Series; s != nil {
		je.last = latest(je.last, s.LastObservedTime.Time)
		je.count = max(je.count, s.Count)
	}
	return je
}

// description is what describe says of one job.
type description struct {
	view    *jobView
	events  []jobEvent
	summary summary
	// retry is the row of the index whose retry is due first, nil when
	// none waits.
	retry *IndexStatus
}

func newDescription(view *jobView, events []jobEvent) *description {
	d := &description{view: view, events: events, summary: summarize(view, view.wanted)}
	for i := range d.summary.rows {
		r := &d.summary.rows[i]
		if r.State == StateRetrying && r.RetryAt != nil && (d.retry == nil || r.RetryAt.Before(d.retry.RetryAt)) {
			d.retry = r
		}
	}
	return d
}

func (d *description) write(w io.Writer) {
	job, now := d.view.job, d.view.now
	fmt.Fprintf(w, "Name:\t%s\n", job.Name)
	fmt.Fprintf(w, "Namespace:\t%s\n", job.Namespace)
	if of := job.Labels[RerunOfLabel]; of != "" {
		fmt.Fprintf(w, "Rerun of:\t%s\n", of)
	}
	fmt.Fprintf(w, "State:\t%s\n", d.state())
	fmt.Fprintf(w, "Next:\t%s\n", strings.Join(d.next(), "\n\t"))
	fmt.Fprintf(w, "Indexes:\t%d (%s), %d at a time\n", d.view.wanted.Len(), truncate(d.view.wanted.String(), 60), ptr.Deref(job.Spec.Parallelism, 1))
	if minCount, ok := workloadapi.Gang(job); ok {
		fmt.Fprintf(w, "Gang:\t%s\n", d.gang(minCount))
	}
	for _, state := range stateOrder {
		if ixs := d.summary.indexes[state]; ixs.Len() > 0 {
			fmt.Fprintf(w, "  %s:\t%d (%s)\n", state, ixs.Len(), truncate(ixs.String(), 60))
		}
	}
	st := job.Status
	fmt.Fprintf(w, "Pods:\t%d active (%d ready), %d terminating, %d succeeded, %d failed\n",
		st.Active, ptr.Deref(st.Ready, 0), ptr.Deref(st.Terminating, 0), st.Succeeded, st.Failed)
	fmt.Fprintf(w, "Retries:\t%s\n", d.retries())
	if limit := job.Spec.MaxRestarts; limit != nil {
		fmt.Fprintf(w, "Restarts:\t%d/%d (maxRestarts); %s\n", st.Restarts, *limit, d.liveGenerations())
	}
	fmt.Fprintf(w, "Started:\t%s\n", when(timeOf(st.StartTime), now))
	if st.CompletionTime != nil {
		fmt.Fprintf(w, "Completed:\t%s\n", when(st.CompletionTime.Time, now))
	}
	d.writeFailures(w)
	if len(st.Conditions) > 0 {
		fmt.Fprintf(w, "Conditions:\n  Type\tStatus\tReason\tSince\tMessage\n  ----\t------\t------\t-----\t-------\n")
		for _, c := range st.Conditions {
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, since(c.LastTransitionTime.Time, now), c.Message)
		}
	}
	d.writeEvents(w)
}

// liveGenerations says of which generations (restart-attempt labels) the
// job's pods that have not finished are.
func (d *description) liveGenerations() string {
	counts := map[int32]int{}
	for _, f := range d.view.scan.latest {
		if !f.Finished() {
			counts[f.Generation]++
		}
	}
	if len(counts) == 0 {
		return "no live pods"
	}
	parts := make([]string, 0, len(counts))
	for _, g := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d of generation %d", counts[g], g))
	}
	return "live pods: " + strings.Join(parts, ", ")
}

// restarting is how many pods a restart of the job still waits for: the
// pods of earlier generations that have not finished.
func (d *description) restarting() int {
	n := 0
	for _, f := range d.view.scan.latest {
		if !f.Finished() && jobpod.OldGeneration(d.view.job, f.Pod) {
			n++
		}
	}
	return n
}

// state is the job's state in words: what it does, or why it does not run.
// gang is the gang a job's pods are placed in: the minCount the job
// states (parallelism by default), and, while fewer indexes are left to
// run, the smaller gang of the PodGroup now; with the field it comes from.
func (d *description) gang(minCount *int32) string {
	job := d.view.job
	size := min(ptr.Deref(minCount, ptr.Deref(job.Spec.Parallelism, 1)), ptr.Deref(job.Spec.Parallelism, 1))
	line := fmt.Sprintf("%s placed at once or none", plural(int(size), "pod", "pods"))
	if now := workloadapi.MinCount(job); now < size && d.finalCondition() == nil {
		line += fmt.Sprintf(", now %d (the indexes left)", now)
	}
	field := workloadapi.GangSchedulingField
	if workloadapi.Field(job) == workloadapi.SchedulingField {
		field = "scheduling.schedulingPolicy.gang"
	}
	return line + fmt.Sprintf(" (%s; Workload and PodGroup %s)", field, workloadapi.Name(job))
}

func (d *description) state() string {
	job, now := d.view.job, d.view.now
	st := job.Status
	if c := d.finalCondition(); c != nil {
		return fmt.Sprintf("%s (%s) since %s: %s", c.Type, c.Reason, when(c.LastTransitionTime.Time, now), c.Message)
	}
	if end := d.view.end; end != nil {
		word := "Failing"
		if !d.view.failing {
			word = "Succeeding"
		}
		return fmt.Sprintf("%s (%s) since %s: %s; waiting for %s", word, end.Reason,
			when(end.LastTransitionTime.Time, now), end.Message, plural(int(ptr.Deref(st.Terminating, 0)+st.Active), "pod to stop", "pods to stop"))
	}
	if m := ptr.Deref(job.Spec.ManagedBy, ibjv1.ControllerName); m != ibjv1.ControllerName {
		return fmt.Sprintf("Not run by this operator: spec.managedBy is %s", m)
	}
	if ptr.Deref(job.Spec.Suspend, false) {
		s := "Suspended: spec.suspend is true"
		if c := findTrue(st.Conditions, ibjv1.ConditionSuspended); c != nil {
			s += ", since " + when(c.LastTransitionTime.Time, now)
		}
		if q := job.Labels["kueue.x-k8s.io/queue-name"]; q != "" {
			s += fmt.Sprintf(" (queued in Kueue's queue %s, which resumes it when admitted)", q)
		}
		return s
	}
	if st.ObservedGeneration < job.Generation {
		return fmt.Sprintf("Waiting for the operator: it has not synced generation %d yet (status is of generation %d)", job.Generation, st.ObservedGeneration)
	}
	if c := meta.FindStatusCondition(st.Conditions, ibjv1.ConditionPodGroupReady); c != nil && c.Status == metav1.ConditionFalse {
		return fmt.Sprintf("Waiting for the job's PodGroup (%s) since %s: %s", c.Reason, when(c.LastTransitionTime.Time, now), c.Message)
	}
	if e := d.failingCreate(); e != nil {
		return fmt.Sprintf("Failing to create pods: %s (%s, %d times)", e.message, "last "+when(e.last, now), e.count)
	}
	if n := d.restarting(); n > 0 {
		return fmt.Sprintf("Restarting (restart %d of at most %d): waiting for %s of an earlier generation to stop",
			st.Restarts, ptr.Deref(job.Spec.MaxRestarts, 0), plural(n, "pod", "pods"))
	}
	if st.Active == 0 && d.retry != nil && d.retry.RetryAt.After(now) {
		return fmt.Sprintf("Backing off until %s: the latest pod of index %d failed (%s)",
			when(d.retry.RetryAt.Time, now), d.retry.Index, d.retry.Reason)
	}
	if st.Active > 0 {
		s := fmt.Sprintf("Running: %d pods active, %d ready", st.Active, ptr.Deref(st.Ready, 0))
		if waits := d.waitingPods(); waits != "" {
			s += "; not started yet: " + waits
		}
		return s
	}
	return "Waiting: no pod is active; the operator starts pending indexes on its next sync"
}

// finalCondition is the job's Complete or Failed condition, if True.
func (d *description) finalCondition() *metav1.Condition {
	for _, typ := range []string{ibjv1.ConditionComplete, ibjv1.ConditionFailed} {
		if c := findTrue(d.view.job.Status.Conditions, typ); c != nil {
			return c
		}
	}
	return nil
}

// failingCreate is the latest FailedCreate warning, when no pod was created
// after it.
func (d *description) failingCreate() *jobEvent {
	var failed, created *jobEvent
	for i := range d.events {
		switch e := &d.events[i]; e.reason {
		case "FailedCreate":
			failed = e
		case "SuccessfulCreate":
			created = e
		}
	}
	if failed == nil || (created != nil && created.last.After(failed.last)) {
		return nil
	}
	return failed
}

// waitingPods counts the pods not started yet by the reason they wait.
func (d *description) waitingPods() string {
	counts := map[string]int{}
	var reasons []string
	for _, r := range d.summary.rows {
		if r.State == StatePending {
			reason := r.Reason
			if reason == "" {
				reason = "pending"
			}
			if counts[reason] == 0 {
				reasons = append(reasons, reason)
			}
			counts[reason]++
		}
	}
	parts := make([]string, 0, len(reasons))
	for _, r := range reasons {
		parts = append(parts, fmt.Sprintf("%d %s", counts[r], r))
	}
	return strings.Join(parts, ", ")
}

// retries states the limits and the backoff.
func (d *description) retries() string {
	spec := d.view.job.Spec
	var parts []string
	if spec.BackoffLimitPerIndex != nil {
		parts = append(parts, fmt.Sprintf("%d per index (backoffLimitPerIndex)", *spec.BackoffLimitPerIndex))
		if spec.MaxFailedIndexes != nil {
			parts = append(parts, fmt.Sprintf("at most %d failed indexes", *spec.MaxFailedIndexes))
		}
	} else {
		parts = append(parts, fmt.Sprintf("%d failed pods in all (backoffLimit)", ptr.Deref(spec.BackoffLimit, 6)))
	}
	if spec.PodFailurePolicy != nil {
		parts = append(parts, fmt.Sprintf("%d podFailurePolicy rules", len(spec.PodFailurePolicy.Rules)))
	}
	b := d.view.backoff
	parts = append(parts, fmt.Sprintf("backoff %s doubling to %s", duration.HumanDuration(b.Base), duration.HumanDuration(b.Max)))
	parts = append(parts, ruleDelays(spec.PodFailurePolicy)...)
	if delay := jobpod.CreateRefusedDelay(d.view.job); delay > 0 {
		parts = append(parts, fmt.Sprintf("a refused pod create waits %s (createRefusedDelaySeconds)", duration.HumanDuration(delay)))
	}
	if rr := spec.RetryResources; rr != nil && rr.OnOOMKilled != nil {
		o := rr.OnOOMKilled
		parts = append(parts, fmt.Sprintf("after an OOM kill, memory times %d%% up to %s (retryResources.onOOMKilled)", o.FactorPercent, o.MaxMemory.String()))
	}
	return strings.Join(parts, "; ")
}

// ruleDelays says, for each Count or Ignore rule whose retry differs from
// the backoff, how long its failures wait: its retryDelaySeconds, none for
// an Ignore rule without one, or the kubelet's restart backoff for a rule
// that retries in place; and which indexes each RestartJob rule restarts.
func ruleDelays(policy *ibjv1.PodFailurePolicy) []string {
	if policy == nil {
		return nil
	}
	var out []string
	for i, r := range policy.Rules {
		name := fmt.Sprintf("rule %d", i)
		if r.Name != "" {
			name += fmt.Sprintf(" %q", r.Name)
		}
		switch {
		case r.Action == ibjv1.PodFailurePolicyActionRestartJob:
			which := "the unfinished indexes"
			if r.RestartIndexes == ibjv1.RestartAllIndexes {
				which = "every index"
			}
			out = append(out, fmt.Sprintf("%s (%s) restarts %s together", name, r.Action, which))
		case r.Action != batchv1.PodFailurePolicyActionCount && r.Action != batchv1.PodFailurePolicyActionIgnore:
		case r.Retry == ibjv1.RetryInPlace:
			out = append(out, fmt.Sprintf("%s (%s) retries in place, after the kubelet's restart backoff", name, r.Action))
		case r.RetryDelaySeconds != nil:
			out = append(out, fmt.Sprintf("%s (%s) retries after %s", name, r.Action,
				duration.HumanDuration(time.Duration(*r.RetryDelaySeconds)*time.Second)))
		case r.Action == batchv1.PodFailurePolicyActionIgnore:
			out = append(out, fmt.Sprintf("%s (%s) retries at once", name, r.Action))
		}
	}
	return out
}

// next says what will happen next, one line a thing.
func (d *description) next() []string {
	job, now := d.view.job, d.view.now
	spec, st := job.Spec, job.Status
	if c := d.finalCondition(); c != nil {
		var lines []string
		if ttl := spec.TTLSecondsAfterFinished; ttl != nil {
			lines = append(lines, fmt.Sprintf("the job and its pods are deleted at %s (ttlSecondsAfterFinished)",
				when(c.LastTransitionTime.Add(time.Duration(*ttl)*time.Second), now)))
		} else {
			lines = append(lines, "nothing: the job has finished")
		}
		if notDone := d.view.wanted.Len() - d.view.completed.Intersect(d.view.wanted).Len(); notDone > 0 {
			lines = append(lines, fmt.Sprintf("to rerun its %s: kubectl ibj rerun %s --failed", plural(notDone, "index that did not succeed", "indexes that did not succeed"), job.Name))
		}
		return lines
	}
	if end := d.view.end; end != nil {
		word := "Failed"
		if !d.view.failing {
			word = "Complete"
		}
		return []string{fmt.Sprintf("the job becomes %s once its remaining pods have stopped", word)}
	}
	if m := ptr.Deref(spec.ManagedBy, ibjv1.ControllerName); m != ibjv1.ControllerName {
		return []string{"whatever " + m + " does: this operator leaves the job alone"}
	}
	if ptr.Deref(spec.Suspend, false) {
		return []string{"nothing until spec.suspend is false"}
	}
	if e := d.failingCreate(); e != nil {
		if delay := jobpod.CreateRefusedDelay(job); delay > 0 {
			return []string{fmt.Sprintf("the operator tries again to create the pods at %s, createRefusedDelaySeconds after the last refusal; the FailedCreate event (State, Events) says what stops it",
				when(e.last.Add(delay), now))}
		}
		return []string{"the operator tries again to create the pods; the FailedCreate event (State, Events) says what stops it"}
	}
	if d.restarting() > 0 {
		return []string{fmt.Sprintf("once they have stopped, the indexes the restart runs again start as generation %d", st.Restarts)}
	}
	var lines []string
	if r := d.retry; r != nil {
		lines = append(lines, fmt.Sprintf("index %d is retried at %s", r.Index, when(r.RetryAt.Time, now)))
	}
	if pending := d.summary.indexes[StatePending].Len(); pending > 0 {
		lines = append(lines, fmt.Sprintf("%s as running pods end (%d at a time)", plural(pending, "pending index starts", "pending indexes start"), ptr.Deref(spec.Parallelism, 1)))
	} else if st.Active > 0 {
		lines = append(lines, fmt.Sprintf("the job ends when its %s", plural(int(st.Active), "active pod does", "active pods do")))
	}
	if dl := spec.ActiveDeadlineSeconds; dl != nil && st.StartTime != nil {
		lines = append(lines, fmt.Sprintf("unless done, it fails with DeadlineExceeded at %s",
			when(st.StartTime.Add(time.Duration(*dl)*time.Second), now)))
	}
	if len(lines) == 0 {
		lines = append(lines, "the operator's next sync decides")
	}
	return lines
}

func (d *description) writeEvents(w io.Writer) {
	if len(d.events) == 0 {
		fmt.Fprintf(w, "Events:\t<none>\n")
		return
	}
	fmt.Fprintf(w, "Events:\n  Type\tReason\tAge\tFrom\tMessage\n  ----\t------\t---\t----\t-------\n")
	for _, e := range d.events[max(len(d.events)-describeEvents, 0):] {
		age := since(e.last, d.view.now)
		if e.count > 1 {
			age = fmt.Sprintf("%s (x%d over %s)", age, e.count, since(e.first, d.view.now))
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", e.typ, e.reason, age, e.from, strings.TrimSpace(e.message))
	}
}

// since is how long ago t was, as kubectl's ages.
func since(t, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}

func findTrue(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ && conds[i].Status == metav1.ConditionTrue {
			return &conds[i]
		}
	}
	return nil
}

func timeOf(t *metav1.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

// plural is "n one" or "n many".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// latest is the later of two times.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
