package kubectlibj

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ReportGroupVersion is the apiVersion of what `kubectl ibj indexes -o
// json|yaml` prints. No API server serves it: it names the document's shape
// for the tools that read it, as kubectl's own client-side kinds do.
var ReportGroupVersion = schema.GroupVersion{Group: "kubectl-ibj.indexedjob.dev", Version: "v1alpha1"}

// Index states, as the STATE column and IndexStatus.State spell them.
const (
	// StatePending: the index has no pod yet, or its pod has not started.
	StatePending = "pending"
	// StateRunning: the index's pod is running.
	StateRunning = "running"
	// StateRetrying: the index's latest pod failed and a replacement will
	// be created once the backoff delay has passed.
	StateRetrying = "retrying"
	// StateTerminating: the index's latest pod is being deleted.
	StateTerminating = "terminating"
	// StateSucceeded: the index succeeded.
	StateSucceeded = "succeeded"
	// StateFailed: the index failed for good (status.failedIndexes, or the
	// job failed while its latest pod had failed or was being stopped).
	StateFailed = "failed"
	// StateStopped: the job ended (it failed, or succeeded by its success
	// policy) before the index ran to an end of its own.
	StateStopped = "stopped"
)

// IndexReport is `kubectl ibj indexes -o json|yaml`: the selected indexes
// of one job, one item each.
//
// +kubebuilder:object:root=true
type IndexReport struct {
	metav1.TypeMeta `json:",inline"`

	// Job is the job the indexes belong to.
	Job JobReference `json:"job"`
	// Time is the moment the report describes: retry times and durations
	// are relative to it.
	Time metav1.Time `json:"time"`
	// Counts is the number of selected indexes in each state.
	Counts map[string]int32 `json:"counts"`
	// Items are the selected indexes, in ascending order: one item for
	// each index that has a pod, one for each run of three or more indexes
	// without pods in the same state for the same reason (LastIndex set).
	Items []IndexStatus `json:"items"`
}

// JobReference names the job of a report.
//
// +kubebuilder:object:generate=true
type JobReference struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// IndexStatus is what is known of one completion index: from its latest pod
// when one is left, from the job's status otherwise. An item with LastIndex
// stands for the run of indexes Index..LastIndex (three or more), none of
// which has a pod, all in the same state for the same reason.
//
// +kubebuilder:object:generate=true
type IndexStatus struct {
	Index int32 `json:"index"`
	// LastIndex is set on an item that stands for several indexes without
	// pods: the last of them.
	LastIndex *int32 `json:"lastIndex,omitempty"`
	// State is one of the State constants.
	State string `json:"state"`
	// RetryAt is when a retrying index's next pod is due, when known.
	RetryAt *metav1.Time `json:"retryAt,omitempty"`
	// Attempts is the number of pods the index has had, from the latest
	// pod's attempt number; unset when no pod of the index is left.
	Attempts *int32 `json:"attempts,omitempty"`
	// RetriesLeft is backoffLimitPerIndex minus the index's counted
	// failures; unset without backoffLimitPerIndex or without pods.
	RetriesLeft *int32 `json:"retriesLeft,omitempty"`
	// Generation is the latest pod's generation, its restart-attempt
	// label: how many times a RestartJob rule had restarted the job's pods
	// together when it was created. Set for a job with spec.maxRestarts
	// and a pod.
	Generation *int32 `json:"generation,omitempty"`
	// InPlaceRestarts is how many times the kubelet restarted the latest
	// pod's containers in place (a Count rule with retry InPlace); each is
	// a failure of the index. Set for a job with such a rule and a pod.
	InPlaceRestarts *int32 `json:"inPlaceRestarts,omitempty"`
	// ExitCode and Container are the exit that ended the latest pod: the
	// container a failure-policy rule matched, else the first that failed,
	// else (for a pod that succeeded) its last container.
	ExitCode  *int32 `json:"exitCode,omitempty"`
	Container string `json:"container,omitempty"`
	// Reason says why the latest pod failed (disruption, deletion, the
	// job's reason when the job's end stopped it, the container's reason)
	// and which podFailurePolicy rule matched it; or why a pending pod has
	// not started; or where a row without pods comes from.
	Reason string `json:"reason,omitempty"`
	// Rule is the index in podFailurePolicy.rules of the rule that matched
	// the latest pod, RuleName its name (if it has one) and Action its
	// action. FailureReason is the reason a FailIndex or FailJob match
	// gives: PodFailurePolicy_<name> for a named rule, PodFailurePolicy
	// for an unnamed one.
	Rule          *int32 `json:"rule,omitempty"`
	RuleName      string `json:"ruleName,omitempty"`
	Action        string `json:"action,omitempty"`
	FailureReason string `json:"failureReason,omitempty"`
	// Message is the failure-policy match in words, or the pod's status
	// message.
	Message string `json:"message,omitempty"`
	// Pod, Node, StartTime and FinishTime describe the latest pod.
	Pod        string       `json:"pod,omitempty"`
	Node       string       `json:"node,omitempty"`
	StartTime  *metav1.Time `json:"startTime,omitempty"`
	FinishTime *metav1.Time `json:"finishTime,omitempty"`
	// Memory is the latest pod's memory per container as the operator
	// recorded it (container=limit, or request without a limit), and
	// OOMKills the OOM kills of the index before that pod, for a job with
	// retryResources.onOOMKilled; unset otherwise.
	Memory   string `json:"memory,omitempty"`
	OOMKills *int32 `json:"oomKills,omitempty"`
	// RecordedFailures is how many failed attempts of the index the job's
	// failure record holds (the operator keeps the last 8 of each index),
	// and LastFailure the latest of them. Unlike the fields above, they
	// outlive the pods. Unset when the record holds none.
	RecordedFailures *int32           `json:"recordedFailures,omitempty"`
	LastFailure      *RecordedFailure `json:"lastFailure,omitempty"`
}

// RecordedFailure is one failed attempt of an index, as the job's failure
// record (ConfigMaps labelled batch.indexedjob.dev/failure-record) keeps
// it.
//
// +kubebuilder:object:generate=true
type RecordedFailure struct {
	// Attempt is the attempt number of the pod that failed.
	Attempt int32 `json:"attempt"`
	// Time is when it failed.
	Time metav1.Time `json:"time"`
	// Node is the node it ran on, empty when it never had one.
	Node string `json:"node,omitempty"`
	// ExitCode and Container are the first container that exited
	// non-zero, unset when none did (an eviction, a deadline).
	ExitCode  *int32 `json:"exitCode,omitempty"`
	Container string `json:"container,omitempty"`
	// Reason is the container's termination reason (Error, OOMKilled),
	// else the pod's (Evicted, DeadlineExceeded), else DisruptionTarget.
	Reason string `json:"reason,omitempty"`
	// Rule is the name of the podFailurePolicy rule that matched, or its
	// position as "#i" when it has none; Action is what it made of the
	// failure (Count when no rule matched).
	Rule   string `json:"rule,omitempty"`
	Action string `json:"action,omitempty"`
}

// span is the number of indexes the item stands for.
func (s *IndexStatus) span() int32 {
	if s.LastIndex == nil {
		return 1
	}
	return *s.LastIndex - s.Index + 1
}
