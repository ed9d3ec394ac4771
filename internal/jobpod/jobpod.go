// Package jobpod holds what the operator and the kubectl plugin both read
// off one pod of an IndexedBatchJob and decide from it: the completion index
// and the counts the operator writes on the pod, when the pod ended, how its
// failure counts under the job's podFailurePolicy and limits, and the delay
// before its index is retried. The plugin's view of a pod is the operator's
// because it is the same code.
package jobpod

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// Index reads the completion index of a pod from its label, or from the
// annotation of the same name when the label is missing. ok is false for a
// missing, malformed (leading zero, sign, spaces) or negative index, and
// for a malformed label whatever the annotation says: the label is what
// selects the pod. A label and an annotation that disagree (one of them
// was edited after the pod was made with its index in both) name no valid
// index either: the pod runs with the index it was made with, which the
// edit hides, so it must not count for either.
func Index(pod *corev1.Pod) (index int32, ok bool) {
	v, found := pod.Labels[ibjv1.CompletionIndexLabel]
	if a, annotated := pod.Annotations[ibjv1.CompletionIndexLabel]; !found {
		v, found = a, annotated
	} else if annotated && a != v {
		return 0, false
	}
	if !found {
		return 0, false
	}
	i, err := strconv.ParseInt(v, 10, 32)
	if err != nil || i < 0 || strconv.FormatInt(i, 10) != v {
		return 0, false
	}
	return int32(i), true
}

// Count reads a non-negative count annotation (the attempt, the index's
// failure counts); 0 when it is absent or malformed.
func Count(annotations map[string]string, key string) int32 {
	i, err := strconv.ParseInt(annotations[key], 10, 32)
	if err != nil || i < 0 {
		return 0
	}
	return int32(i)
}

// FinishTime is when a pod finished, for backoff: the latest container
// termination, else when it stopped being Ready, else its deletion, else
// its creation. Pods from a kubelet always have the first. As upstream's
// getFinishedTime, a Ready condition that is still True says when the pod
// started, not when it ended.
func FinishTime(pod *corev1.Pod) time.Time {
	var t time.Time
	for _, lists := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range lists {
			if term := cs.State.Terminated; term != nil && term.FinishedAt.After(t) {
				t = term.FinishedAt.Time
			}
		}
	}
	if !t.IsZero() {
		return t
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time
		}
	}
	if pod.DeletionTimestamp != nil {
		// A graceful deletion stamps the end of the grace period, not the
		// moment of deletion; count from the latter, as upstream does.
		return deletionRequested(pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds)
	}
	return pod.CreationTimestamp.Time
}

// deletionRequested is when a deletion was asked for: the deletion
// timestamp less the grace period, which a graceful deletion adds to it.
func deletionRequested(deletion *metav1.Time, graceSeconds *int64) time.Time {
	return deletion.Add(-time.Duration(ptr.Deref(graceSeconds, 0)) * time.Second)
}
