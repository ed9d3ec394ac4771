package controller

import (
	"fmt"
	"math"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// podToCreate is one pod the decision core asks the reconciler to create.
type podToCreate struct {
	index    int32
	attempt  int32
	failures int32 // earlier failures of the index that counted
	ignored  int32 // earlier failures of the index an Ignore rule matched
	oomKills int32 // earlier pods of the index OOM-killed (retryResources.onOOMKilled)
	// memoryCap is what the namespace's LimitRanges let a raise reach,
	// nil when they set no maximum.
	memoryCap *jobpod.MemoryCap
}

// podName is deterministic per (job, index, attempt). Together with the
// expectations store it guarantees one pod per index: the store stops a
// reconcile from acting on a cache that has not seen its own creates yet, and
// should anything slip past it (a second operator process, an expired
// expectation), the repeated create of the same name fails with AlreadyExists
// instead of starting a second pod.
func podName(job *ibjv1.IndexedBatchJob, index, attempt int32) string {
	return fmt.Sprintf("%s-%d-%d", job.Name, index, attempt)
}

// newPod builds the pod for one index from the job's template: the fixed
// labels and annotations of the API (api/v1alpha1), JOB_COMPLETION_INDEX in every container,
// hostname <job>-<index> (in the job's headless Service's subdomain with peer
// DNS), the job's PodGroup with gang scheduling, the owner reference and
// the tracking finalizer; for a job with
// retryResources.onOOMKilled, the memory raised for the index's OOM kills
// and the annotations that record them.
// podFinalizers are a new pod's finalizers: the tracking finalizer, and the
// index-retry finalizer when the job retries by index (heldForRetry).
func podFinalizers(job *ibjv1.IndexedBatchJob) []string {
	if job.Spec.BackoffLimitPerIndex != nil {
		return []string{ibjv1.TrackingFinalizer, ibjv1.IndexRetryFinalizer}
	}
	return []string{ibjv1.TrackingFinalizer}
}

func newPod(job *ibjv1.IndexedBatchJob, p podToCreate) *corev1.Pod {
	tmpl := job.Spec.Template.DeepCopy()
	index := strconv.Itoa(int(p.index))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            podName(job, p.index, p.attempt),
			Namespace:       job.Namespace,
			Labels:          tmpl.Labels,
			Annotations:     tmpl.Annotations,
			Finalizers:      podFinalizers(job),
			OwnerReferences: []metav1.OwnerReference{controllerRef(job)},
		},
		Spec: tmpl.Spec,
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	// What the operator writes and reads as its own record never comes
	// from the template (the webhook refuses it there; without the webhook
	// it is dropped): a template's discarded annotation would have every pod
	// let go as it starts, and replaced without end.
	for _, key := range ibjv1.ReservedPodLabels {
		delete(pod.Labels, key)
	}
	for _, key := range ibjv1.ReservedPodAnnotations {
		delete(pod.Annotations, key)
	}
	pod.Labels[ibjv1.JobNameLabel] = job.Name
	pod.Labels[ibjv1.ControllerUIDLabel] = string(job.UID)
	pod.Labels[ibjv1.CompletionIndexLabel] = index
	pod.Annotations[ibjv1.CompletionIndexLabel] = index
	pod.Annotations[ibjv1.AttemptAnnotation] = strconv.Itoa(int(p.attempt))
	if job.Spec.BackoffLimitPerIndex != nil {
		pod.Annotations[ibjv1.IndexFailureCountAnnotation] = strconv.Itoa(int(p.failures))
		pod.Annotations[ibjv1.IndexIgnoredFailureCountAnnotation] = strconv.Itoa(int(p.ignored))
	}
	if rr := job.Spec.RetryResources; rr != nil && rr.OnOOMKilled != nil {
		raiseMemory(job, &pod.Spec, p.oomKills, p.memoryCap)
		pod.Annotations[ibjv1.OOMKillsAnnotation] = strconv.Itoa(int(p.oomKills))
		pod.Annotations[ibjv1.MemoryAnnotation] = memoryRecord(&pod.Spec)
	}
	pod.Spec.Hostname = fmt.Sprintf("%s-%d", job.Name, p.index)
	pod.Spec.Subdomain = podSubdomain(job)
	pod.Spec.SchedulingGroup = schedulingGroup(job)
	for i := range pod.Spec.InitContainers {
		pod.Spec.InitContainers[i].Env = withIndexEnv(pod.Spec.InitContainers[i].Env, index)
	}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Env = withIndexEnv(pod.Spec.Containers[i].Env, index)
	}
	return pod
}

// FirstPod is the pod the controller creates first for index: attempt 0,
// no earlier failures. The admission webhook has the API server dry-run it,
// so that a job is judged by exactly the pods it would get.
func FirstPod(job *ibjv1.IndexedBatchJob, index int32) *corev1.Pod {
	return newPod(job, podToCreate{index: index})
}

// MostMemoryPod is the pod of index with the most memory
// retryResources.onOOMKilled can give it (every raised container at
// maxMemory, or at the namespace's cap, or as near as its queue allows),
// nil for a job without onOOMKilled. The admission webhook dry-runs it
// beside FirstPod, so that a raise is never what the API server refuses.
func MostMemoryPod(job *ibjv1.IndexedBatchJob, index int32, memoryCap *jobpod.MemoryCap) *corev1.Pod {
	if rr := job.Spec.RetryResources; rr == nil || rr.OnOOMKilled == nil {
		return nil
	}
	return newPod(job, podToCreate{index: index, oomKills: math.MaxInt32, memoryCap: memoryCap})
}

// controllerRef makes the job the controller of a pod or Service it
// creates: the garbage collector deletes them with the job, and
// BlockOwnerDeletion keeps a foreground deletion of the job waiting for them.
func controllerRef(job *ibjv1.IndexedBatchJob) metav1.OwnerReference {
	return *metav1.NewControllerRef(job, ibjv1.GroupVersion.WithKind("IndexedBatchJob"))
}

// withIndexEnv puts JOB_COMPLETION_INDEX first, so that later variables of
// the template may refer to it with $(JOB_COMPLETION_INDEX).
func withIndexEnv(env []corev1.EnvVar, index string) []corev1.EnvVar {
	out := make([]corev1.EnvVar, 0, len(env)+1)
	out = append(out, corev1.EnvVar{Name: ibjv1.CompletionIndexEnvName, Value: index})
	for _, e := range env {
		if e.Name != ibjv1.CompletionIndexEnvName {
			out = append(out, e)
		}
	}
	return out
}
