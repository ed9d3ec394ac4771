package controller

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/failrecord"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// The failure record in a sync: each failed pod the sync sees becomes an
// attempt of the job's record (noteFailure), which the reconciler writes
// once the status is (failure_record_store.go). spec.nodeAvoidance reads
// it: a new pod avoids the nodes where its index failed and those where
// failedIndexesPerNode of the job's indexes did (avoidFor).

// attemptOf is what the record keeps of a failed pod of job and how its
// failure counted (f). Its exit is a container of the job's template: an
// injected sidecar's is not the job's failure (jobpod.OwnExits).
func attemptOf(job *ibjv1.IndexedBatchJob, pod *jobpod.Pod, f jobpod.Failure) failrecord.Attempt {
	a := failrecord.Attempt{
		Index: pod.Index, Attempt: pod.Attempt, Time: pod.FinishedAt, Node: pod.NodeName,
		Action: failrecord.ActionCount,
	}
	if a.Time.IsZero() && pod.DeletionTimestamp != nil {
		a.Time = pod.DeletionTimestamp.Time
	}
	exit := firstExit(jobpod.OwnExits(job, pod), f)
	switch {
	case exit != nil && exit.OOMKilled:
		a.Container, a.ExitCode, a.HasExit, a.Reason = exit.Container, exit.Code, true, "OOMKilled"
	case exit != nil:
		a.Container, a.ExitCode, a.HasExit, a.Reason = exit.Container, exit.Code, true, "Error"
	case hasCondition(pod, corev1.DisruptionTarget):
		a.Reason = failrecord.ReasonDisruption
	case pod.Reason != "":
		a.Reason = pod.Reason
	case pod.DeletionTimestamp != nil:
		a.Reason = "Deleted"
	default:
		a.Reason = "Failed"
	}
	if hasCondition(pod, corev1.DisruptionTarget) {
		a.Reason = failrecord.ReasonDisruption
	}
	if m := f.Match; m != nil {
		a.Rule = cmp.Or(m.Name, fmt.Sprintf("#%d", m.Rule))
		a.Action = failrecord.Action(m.Action)
	}
	if f.Ignored {
		a.Action = failrecord.ActionIgnore
	}
	return a
}

// firstExit is the container exit the matched rule read, else the first
// of exits.
func firstExit(exits []jobpod.Exit, f jobpod.Failure) *jobpod.Exit {
	if f.Match != nil && f.Match.Exit != nil {
		return f.Match.Exit
	}
	if len(exits) > 0 {
		return &exits[0]
	}
	return nil
}

func hasCondition(pod *jobpod.Pod, t corev1.PodConditionType) bool {
	for _, c := range pod.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// noteFailure adds a failed pod to the job's record (once: the record
// knows each index's attempts). A node it makes avoided by the whole job
// gets a NodeAvoided event.
func (s *syncState) noteFailure(pod *jobpod.Pod, f jobpod.Failure) {
	if s.failures == nil || !f.Failed {
		return
	}
	threshold := s.avoidThreshold()
	var before []string
	if threshold > 0 && s.jobAvoided == nil {
		before = s.failures.Avoided(threshold)
	} else {
		before = s.jobAvoided
	}
	a := attemptOf(s.job, pod, f)
	if !s.failures.Add(a) {
		return
	}
	s.plan.failuresNoted++
	if threshold == 0 || !a.Blames() {
		return
	}
	after := s.failures.Avoided(threshold)
	s.jobAvoided = after
	for _, n := range after {
		if !slices.Contains(before, n) {
			s.plan.nodesAvoided = append(s.plan.nodesAvoided, n)
			s.plan.warn("NodeAvoided", "Node %s: %d of the job's indexes failed there (the last: index %d, %s); every later pod of the job avoids it (nodeAvoidance %s)",
				n, threshold, a.Index, describeAttempt(a), s.job.Spec.NodeAvoidance.Mode)
		}
	}
}

// describeAttempt says in words how an attempt failed.
func describeAttempt(a failrecord.Attempt) string {
	var b strings.Builder
	if a.HasExit {
		fmt.Fprintf(&b, "exit code %d of container %s", a.ExitCode, a.Container)
		if a.Reason == "OOMKilled" {
			b.WriteString(" (OOMKilled)")
		}
	} else {
		b.WriteString(a.Reason)
	}
	if a.Rule != "" {
		fmt.Fprintf(&b, ", rule %s (%s)", a.Rule, a.Action)
	}
	return b.String()
}

// avoidThreshold is spec.nodeAvoidance.failedIndexesPerNode, 0 when unset.
func (s *syncState) avoidThreshold() int {
	if na := s.job.Spec.NodeAvoidance; na != nil {
		return int(ptr.Deref(na.FailedIndexesPerNode, 0))
	}
	return 0
}

// avoidFor are the nodes the next pod of index ix avoids, nil for a job
// without spec.nodeAvoidance.
func (s *syncState) avoidFor(ix int32) []string {
	if s.job.Spec.NodeAvoidance == nil || s.failures == nil {
		return nil
	}
	if s.jobAvoided == nil {
		s.jobAvoided = s.failures.Avoided(s.avoidThreshold())
		if s.jobAvoided == nil {
			s.jobAvoided = []string{}
		}
	}
	return s.failures.AvoidFor(ix, s.jobAvoided)
}

// reportUnschedulable sets condition PodsUnschedulable while a pod that
// avoids nodes with mode Required is unschedulable: the index, the nodes
// it avoids and the scheduler's message, for the lowest such index. A pod
// that avoids nothing and cannot be scheduled is the cluster's matter, as
// under batch/v1, and sets nothing.
func (s *syncState) reportUnschedulable() {
	na := s.job.Spec.NodeAvoidance
	var pod *jobpod.Pod
	var avoided []string
	if na != nil && na.Mode == ibjv1.NodeAvoidanceRequired && s.failures != nil {
		for _, p := range s.pods {
			if p.Unschedulable == "" || p.DeletionTimestamp != nil || !p.IndexOK || (pod != nil && p.Index > pod.Index) {
				continue
			}
			if nodes := s.failures.AvoidFor(p.Index, s.failures.Avoided(s.avoidThreshold())); len(nodes) > 0 {
				pod, avoided = p, nodes
			}
		}
	}
	if pod == nil {
		meta.RemoveStatusCondition(&s.status.Conditions, ibjv1.ConditionPodsUnschedulable)
		return
	}
	msg := fmt.Sprintf("Pod %s of index %d avoids node(s) %s (nodeAvoidance Required) and the scheduler finds no other: %s",
		pod.Name, pod.Index, strings.Join(avoided, ", "), pod.Unschedulable)
	if setCondition(s.status, s.job.Generation, s.now, ibjv1.ConditionPodsUnschedulable, metav1.ConditionTrue, ibjv1.ReasonAvoidedNodes, msg) {
		s.plan.warn(ibjv1.ReasonAvoidedNodes, "%s", msg)
	}
}

// reportRecordRefused sets condition FailureRecorded False while the API
// server refuses the job's failure record (recordRefused), and removes it
// once a write goes through.
func (s *syncState) reportRecordRefused() {
	if s.recordRefused == "" {
		meta.RemoveStatusCondition(&s.status.Conditions, ibjv1.ConditionFailureRecorded)
		return
	}
	setCondition(s.status, s.job.Generation, s.now, ibjv1.ConditionFailureRecorded, metav1.ConditionFalse,
		ibjv1.ReasonFailureRecordRefused, s.recordRefused)
}

// failureRecordRecheck is how long the reconciler waits before it writes a
// record the API server refused again.
const failureRecordRecheck = 30 * time.Second
