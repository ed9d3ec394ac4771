package jobpod

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// Exit is a container that terminated with a non-zero exit code;
// OOMKilled when the kernel killed it for going over its memory limit.
type Exit struct {
	Container string
	Code      int32
	OOMKilled bool
}

// Condition is a pod condition as a podFailurePolicy rule matches it.
type Condition struct {
	Type   corev1.PodConditionType
	Status corev1.ConditionStatus
}

// Exits lists the containers of the pod that terminated with a non-zero exit
// code, init containers first, in the order the pod's status lists them: the
// order in which rules look at them.
func Exits(pod *corev1.Pod) []Exit {
	var exits []Exit
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
				exits = append(exits, Exit{Container: cs.Name, Code: t.ExitCode, OOMKilled: t.Reason == ReasonOOMKilled})
			}
		}
	}
	return exits
}

// OwnExits are the exits of p's containers that the job's template
// names: a container admission injected (a service mesh's sidecar, which
// the kubelet stops with SIGTERM or SIGKILL once the template's containers
// end) is not the job's work, and no podFailurePolicy rule, failure
// record or OOM raise reads it. The slice is p.Exits itself when every
// exit is the template's, as it is in a pod admission left alone.
func OwnExits(job *ibjv1.IndexedBatchJob, p *Pod) []Exit {
	for i, e := range p.Exits {
		if !TemplateContainer(&job.Spec.Template.Spec, e.Container) {
			own := slices.Clone(p.Exits[:i])
			for _, e := range p.Exits[i+1:] {
				if TemplateContainer(&job.Spec.Template.Spec, e.Container) {
					own = append(own, e)
				}
			}
			return own
		}
	}
	return p.Exits
}

// TemplateContainer: the template names a container or init container
// name.
func TemplateContainer(spec *corev1.PodSpec, name string) bool {
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				return true
			}
		}
	}
	return false
}

// Conditions lists the pod's conditions, type and status only.
func Conditions(pod *corev1.Pod) []Condition {
	if len(pod.Status.Conditions) == 0 {
		return nil
	}
	conds := make([]Condition, len(pod.Status.Conditions))
	for i, c := range pod.Status.Conditions {
		conds[i] = Condition{Type: c.Type, Status: c.Status}
	}
	return conds
}

// Match is the podFailurePolicy rule that matched a failed pod.
type Match struct {
	// Rule is the rule's position in the policy, Name its name ("" when
	// unnamed).
	Rule   int32
	Name   string
	Action batchv1.PodFailurePolicyAction
	// RetryDelay is the rule's retryDelaySeconds, nil when unset.
	RetryDelay *time.Duration
	// Exit is the container whose exit code an onExitCodes rule matched;
	// Condition the condition an onPodConditions rule matched.
	Exit      *Exit
	Condition corev1.PodConditionType
	// Message says what matched, in the words of upstream's FailJob
	// condition message.
	Message string
}

// Reason is the reason a FailJob or FailIndex match gives the job's
// condition or the index's failure: PodFailurePolicy_<name> for a named
// rule, PodFailurePolicy (batch/v1's) for an unnamed one.
func (m *Match) Reason() string {
	if m.Name == "" {
		return ibjv1.ReasonPodFailurePolicy
	}
	return ibjv1.ReasonPodFailurePolicy + "_" + m.Name
}

// Failure is how one pod's end counts.
type Failure struct {
	// Failed: the pod ended in failure (phase Failed, or deleted before it
	// succeeded when terminating pods are replaced at once).
	Failed bool
	// Ignored: an Ignore rule matched; the failure counts against nothing
	// and grows no backoff: the next attempt waits only the rule's
	// retryDelaySeconds, if set.
	Ignored bool
	// Counted: the failure counts against backoffLimit and its index's
	// backoffLimitPerIndex.
	Counted bool
	// FailsIndex: with backoffLimitPerIndex, the index is failed for good (a
	// FailIndex rule matched, or the index's failures went over its limit).
	FailsIndex bool
	// RestartsJob: a RestartJob rule matched. The job's pods restart
	// together (the controller's decision); until that is decided, or
	// once the job may make no more restarts, the failure counts as a
	// Count rule's would.
	RestartsJob bool
	// Match is the rule that matched, nil when none did.
	Match *Match
	// InPlace is how many failures the pod had in place before its end,
	// each a container restarted inside it (InPlaceFailures): they count
	// against backoffLimit and backoffLimitPerIndex as failures of their
	// own, whatever its end is.
	InPlace int32
	// Stopped: the pod's in-place failures alone took its index over
	// backoffLimitPerIndex. The index fails with the last of them, the pod
	// is stopped if it still runs, and its end (the stop, or whatever
	// became of it after that restart) is not another failure.
	Stopped bool
}

// InPlaceRecorded is what recording the pod's end adds to status.failed at
// once, beside its UID in uncountedTerminatedPods: its in-place failures,
// less the one that the UID of a Stopped pod counts once its finalizer is
// released (a pod that failed or was stopped adds 1 then; one that
// succeeded, nothing).
func (f Failure) InPlaceRecorded() int32 {
	if f.Stopped {
		return f.InPlace - 1
	}
	return f.InPlace
}

// FailsJob is the matched FailJob rule, nil otherwise.
func (f Failure) FailsJob() *Match {
	if f.Counted && f.Match != nil && f.Match.Action == batchv1.PodFailurePolicyActionFailJob {
		return f.Match
	}
	return nil
}

// Classify decides how a pod of the job counts, as upstream's isPodFailed,
// matchPodFailurePolicy and isIndexFailed together: a failed pod that no
// Ignore rule matches counts against the job and its index, whatever other
// rule matched (a FailJob match fails the index too once it is over its
// limit), and a FailIndex match fails its index at once.
//
// A pod of an earlier generation than the job's (OldGeneration) that the
// restart found uncounted (it still holds its tracking finalizer, or lost
// it uncounted) counts for nothing, its in-place failures included: the
// restart ended it. A failure counted before the restart stays counted,
// and its index keeps it.
//
// The failures a pod had in place (InPlaceFailures) count before its end:
// a pod whose in-place failures alone took its index over
// backoffLimitPerIndex is Stopped, whether it still runs or not (unless it
// succeeded); otherwise its end fails the index once Failures+InPlace+1
// is over the limit.
func Classify(job *ibjv1.IndexedBatchJob, p *Pod) Failure {
	if OldGeneration(job, p) && (p.Tracked || p.Discarded) {
		return Failure{}
	}
	inPlace := InPlaceFailures(job, p)
	limit := job.Spec.BackoffLimitPerIndex
	if inPlace > 0 && limit != nil && p.Failures+inPlace > *limit && !p.Discarded && p.Phase != corev1.PodSucceeded {
		return Failure{Failed: true, FailsIndex: true, InPlace: inPlace, Stopped: true}
	}
	if !countsAsFailed(p, OnlyReplaceFailed(job)) {
		return Failure{InPlace: inPlace}
	}
	m := MatchPolicy(job, p)
	if m != nil && m.Action == batchv1.PodFailurePolicyActionIgnore {
		return Failure{Failed: true, Ignored: true, Match: m, InPlace: inPlace}
	}
	f := Failure{Failed: true, Counted: true, Match: m, InPlace: inPlace,
		RestartsJob: m != nil && m.Action == ibjv1.PodFailurePolicyActionRestartJob}
	if limit != nil {
		f.FailsIndex = (m != nil && m.Action == batchv1.PodFailurePolicyActionFailIndex) || p.Failures+inPlace+1 > *limit
	}
	return f
}

// OldGeneration: the job restarts its pods together (spec.maxRestarts)
// and the pod was created before its latest restart, by its restart-attempt
// label.
func OldGeneration(job *ibjv1.IndexedBatchJob, p *Pod) bool {
	return job.Spec.MaxRestarts != nil && p.Generation < job.Status.Restarts
}

// InPlaceFailures is how many times the pod's containers were restarted
// inside it, for a job whose template has restartPolicy Never: there only
// container restart rules restart a container (the operator's, for
// podFailurePolicy retry InPlace, or the template's own), and each restart
// is a failure, so that no rule of a template gets around the job's
// limits. Zero for restartPolicy OnFailure, whose restarts count as
// upstream counts them (Pod.Restarts, against backoffLimit only), and for a
// pod the operator discarded.
func InPlaceFailures(job *ibjv1.IndexedBatchJob, p *Pod) int32 {
	if job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever || p.Discarded {
		return 0
	}
	return p.InPlace
}

// OnlyReplaceFailed: a terminating pod is replaced only once it has failed
// (podReplacementPolicy Failed, the default with a podFailurePolicy).
func OnlyReplaceFailed(job *ibjv1.IndexedBatchJob) bool {
	if job.Spec.PodReplacementPolicy != nil {
		return *job.Spec.PodReplacementPolicy == batchv1.Failed
	}
	return job.Spec.PodFailurePolicy != nil
}

// countsAsFailed mirrors upstream's isPodFailed: phase Failed, or, when
// terminating pods are replaced at once, a pod deleted before it succeeded
// (it may never get the chance to reach phase Failed). A pod the operator
// discarded never counts. A pod that lost only its tracking finalizer and
// kept its index-retry one was counted as failed (the controller's count of
// a pod held for its index's retry): it stays failed even if it then
// succeeded, as a terminating pod counted at once may.
func countsAsFailed(p *Pod, onlyFailed bool) bool {
	if p.Discarded {
		return false
	}
	if p.Phase == corev1.PodFailed || p.Held && !p.Tracked && (p.Finished() || p.DeletionTimestamp != nil) {
		return true
	}
	return !onlyFailed && p.DeletionTimestamp != nil && p.Phase != corev1.PodSucceeded
}

// MatchPolicy applies the job's podFailurePolicy rules in order, first
// match wins, as upstream's matchPodFailurePolicy; nil without a policy or
// when no rule matches (the failure is then counted). A rule with an action
// from a newer API is passed over, as upstream does. Exit codes are read
// from the template's containers only (OwnExits).
func MatchPolicy(job *ibjv1.IndexedBatchJob, p *Pod) *Match {
	policy := job.Spec.PodFailurePolicy
	if policy == nil {
		return nil
	}
	exits := OwnExits(job, p)
	for i, rule := range policy.Rules {
		switch rule.Action {
		case batchv1.PodFailurePolicyActionFailJob, batchv1.PodFailurePolicyActionFailIndex,
			batchv1.PodFailurePolicyActionIgnore, batchv1.PodFailurePolicyActionCount, ibjv1.PodFailurePolicyActionRestartJob:
		default:
			continue
		}
		var m *Match
		switch {
		case rule.OnExitCodes != nil:
			if e := matchExitCodes(exits, rule.OnExitCodes); e != nil {
				m = &Match{Exit: e, Message: fmt.Sprintf("Container %s for pod %s/%s failed with exit code %d matching %s rule at index %d",
					e.Container, p.Namespace, p.Name, e.Code, rule.Action, i)}
			}
		case rule.OnPodConditions != nil:
			if c, ok := matchPodConditions(p.Conditions, rule.OnPodConditions); ok {
				m = &Match{Condition: c, Message: fmt.Sprintf("Pod %s/%s has condition %s matching %s rule at index %d",
					p.Namespace, p.Name, c, rule.Action, i)}
			}
		}
		if m != nil {
			m.Rule, m.Name, m.Action = int32(i), rule.Name, rule.Action
			if d := rule.RetryDelaySeconds; d != nil && (rule.Action == batchv1.PodFailurePolicyActionCount || rule.Action == batchv1.PodFailurePolicyActionIgnore) {
				m.RetryDelay = ptr.To(time.Duration(*d) * time.Second)
			}
			return m
		}
	}
	return nil
}

// matchExitCodes finds a container that failed with an exit code the
// requirement accepts, in the container it names if it names one. A zero
// exit code never matches: a container that succeeded did not cause the
// failure.
func matchExitCodes(exits []Exit, req *batchv1.PodFailurePolicyOnExitCodesRequirement) *Exit {
	var want bool
	switch req.Operator {
	case batchv1.PodFailurePolicyOnExitCodesOpIn:
		want = true
	case batchv1.PodFailurePolicyOnExitCodesOpNotIn:
		want = false
	default:
		return nil
	}
	for i, e := range exits {
		if e.Code == 0 || (req.ContainerName != nil && *req.ContainerName != e.Container) {
			continue
		}
		if slices.Contains(req.Values, e.Code) == want {
			return &exits[i]
		}
	}
	return nil
}

// matchPodConditions finds a pod condition equal in type and status (status
// defaulting to True) to one of the patterns.
func matchPodConditions(conds []Condition, patterns []batchv1.PodFailurePolicyOnPodConditionsPattern) (corev1.PodConditionType, bool) {
	for _, c := range conds {
		for _, p := range patterns {
			if c.Type == p.Type && c.Status == cmp.Or(p.Status, corev1.ConditionTrue) {
				return c.Type, true
			}
		}
	}
	return "", false
}

// TerminatingDeadline is when a terminating pod of the job is treated as
// failed under spec.terminatingTimeoutSeconds: that long after its deletion
// deadline. Zero for a pod that is not terminating or a job without it.
func TerminatingDeadline(job *ibjv1.IndexedBatchJob, p *Pod) time.Time {
	t := job.Spec.TerminatingTimeoutSeconds
	if t == nil || !p.Terminating() {
		return time.Time{}
	}
	return p.DeletionTimestamp.Add(time.Duration(*t) * time.Second)
}
