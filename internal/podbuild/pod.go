// Package podbuild builds the pods of an IndexedBatchJob from its template,
// as the controller creates them and the admission webhook dry-runs them:
// the fixed labels and annotations, JOB_COMPLETION_INDEX, the hostname and
// subdomain, the PodGroup's scheduling group, the owner reference, the
// finalizers, the memory raised after OOM kills, and the container restart
// rules of podFailurePolicy retry InPlace. It decides nothing
// about when a pod is made; the controller does (internal/controller).
package podbuild

import (
	"fmt"
	"math"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/workloadapi"
)

// Spec says which pod of the job to build: the controller's decision names
// each pod it creates with one, which New then builds.
type Spec struct {
	Index    int32
	Attempt  int32
	Failures int32 // earlier failures of the index that counted
	Ignored  int32 // earlier failures of the index an Ignore rule matched
	OOMKills int32 // earlier pods of the index OOM-killed (retryResources.onOOMKilled)
	// Generation is the restarts of the job's pods made before this one
	// (status.restarts); it is written for a job with spec.maxRestarts.
	Generation int32
	// MemoryCap is what the namespace's LimitRanges let a raise reach,
	// nil when they set no maximum.
	MemoryCap *jobpod.MemoryCap
	// Avoid are the nodes the pod avoids (spec.nodeAvoidance), as its node
	// affinity says (avoidNodes).
	Avoid []string
}

// Name is deterministic per (job, index, attempt). Together with the
// controller's expectations it guarantees one pod per index: should a
// create be repeated (a second operator process, an expired expectation),
// it fails with AlreadyExists instead of starting a second pod.
func Name(job *ibjv1.IndexedBatchJob, index, attempt int32) string {
	return fmt.Sprintf("%s-%d-%d", job.Name, index, attempt)
}

// New builds the pod for one index from the job's template: the fixed
// labels and annotations of the API (api/v1alpha1), JOB_COMPLETION_INDEX in every container,
// hostname <job>-<index> (in the job's headless Service's subdomain with peer
// DNS), the job's PodGroup with spec.scheduling, the owner reference and
// the tracking finalizer; for a job with spec.maxRestarts, the pod's
// generation; the container restart rules of retry InPlace rules
// (setRestartRules); for a job with
// retryResources.onOOMKilled, the memory raised for the index's OOM kills
// and the annotations that record them.
func New(job *ibjv1.IndexedBatchJob, p Spec) *corev1.Pod {
	tmpl := job.Spec.Template.DeepCopy()
	index := strconv.Itoa(int(p.Index))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            Name(job, p.Index, p.Attempt),
			Namespace:       job.Namespace,
			Labels:          tmpl.Labels,
			Annotations:     tmpl.Annotations,
			Finalizers:      finalizers(job),
			OwnerReferences: []metav1.OwnerReference{ControllerRef(job)},
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
	pod.Annotations[ibjv1.AttemptAnnotation] = strconv.Itoa(int(p.Attempt))
	if job.Spec.MaxRestarts != nil {
		pod.Labels[ibjv1.RestartAttemptLabel] = strconv.Itoa(int(p.Generation))
	}
	if job.Spec.BackoffLimitPerIndex != nil {
		pod.Annotations[ibjv1.IndexFailureCountAnnotation] = strconv.Itoa(int(p.Failures))
		pod.Annotations[ibjv1.IndexIgnoredFailureCountAnnotation] = strconv.Itoa(int(p.Ignored))
	}
	if rr := job.Spec.RetryResources; rr != nil && rr.OnOOMKilled != nil {
		RaiseMemory(job, &pod.Spec, p.OOMKills, p.MemoryCap)
		pod.Annotations[ibjv1.OOMKillsAnnotation] = strconv.Itoa(int(p.OOMKills))
		pod.Annotations[ibjv1.MemoryAnnotation] = MemoryRecord(&pod.Spec)
	}
	setRestartRules(job, &pod.Spec)
	avoidNodes(job, &pod.Spec, p.Avoid)
	pod.Spec.Hostname = fmt.Sprintf("%s-%d", job.Name, p.Index)
	pod.Spec.Subdomain = Subdomain(job)
	pod.Spec.SchedulingGroup = SchedulingGroup(job)
	for i := range pod.Spec.InitContainers {
		pod.Spec.InitContainers[i].Env = withIndexEnv(pod.Spec.InitContainers[i].Env, index)
	}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Env = withIndexEnv(pod.Spec.Containers[i].Env, index)
	}
	return pod
}

// finalizers are a new pod's finalizers: the tracking finalizer, and the
// index-retry finalizer when the job retries by index (the controller holds a failed pod for its retry by it).
func finalizers(job *ibjv1.IndexedBatchJob) []string {
	if job.Spec.BackoffLimitPerIndex != nil {
		return []string{ibjv1.TrackingFinalizer, ibjv1.IndexRetryFinalizer}
	}
	return []string{ibjv1.TrackingFinalizer}
}

// First is the pod the controller creates first for index: attempt 0,
// no earlier failures. The admission webhook has the API server dry-run it,
// so that a job is judged by exactly the pods it would get.
func First(job *ibjv1.IndexedBatchJob, index int32) *corev1.Pod {
	return New(job, Spec{Index: index})
}

// MostMemory is the pod of index with the most memory
// retryResources.onOOMKilled can give it (every raised container at
// maxMemory, or at the namespace's cap, or as near as its queue allows),
// nil for a job without onOOMKilled. The admission webhook dry-runs it
// beside First, so that a raise is never what the API server refuses.
func MostMemory(job *ibjv1.IndexedBatchJob, index int32, memoryCap *jobpod.MemoryCap) *corev1.Pod {
	if rr := job.Spec.RetryResources; rr == nil || rr.OnOOMKilled == nil {
		return nil
	}
	return New(job, Spec{Index: index, OOMKills: math.MaxInt32, MemoryCap: memoryCap})
}

// ControllerRef makes the job the controller of a pod or Service it
// creates: the garbage collector deletes them with the job, and
// BlockOwnerDeletion keeps a foreground deletion of the job waiting for them.
func ControllerRef(job *ibjv1.IndexedBatchJob) metav1.OwnerReference {
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

// ServiceName is the name of the job's headless Service, and whether the
// job asks for one (network.enableDNSHostnames).
func ServiceName(job *ibjv1.IndexedBatchJob) (string, bool) {
	n := job.Spec.Network
	if n == nil || !ptr.Deref(n.EnableDNSHostnames, false) {
		return "", false
	}
	return ptr.Deref(n.Subdomain, job.Name), true
}

// Subdomain is the pods' spec.subdomain: the headless Service's name with
// peer DNS (admission allows a template subdomain only if it is that name),
// the template's otherwise.
func Subdomain(job *ibjv1.IndexedBatchJob) string {
	if name, ok := ServiceName(job); ok {
		return name
	}
	return job.Spec.Template.Spec.Subdomain
}

// PodGroupName is the name of the job's PodGroup when it has one (it sets
// scheduling or gangScheduling: workloadapi.Wanted), nil otherwise.
func PodGroupName(job *ibjv1.IndexedBatchJob) *string {
	if !workloadapi.Wanted(job) {
		return nil
	}
	return ptr.To(workloadapi.Name(job))
}

// SchedulingGroup points a pod at the job's PodGroup when it has one, as
// batch/v1's Job controller does (only that: the pods share the group's
// ResourceClaims through the template's own spec.resourceClaims), and is
// the template's otherwise.
func SchedulingGroup(job *ibjv1.IndexedBatchJob) *corev1.PodSchedulingGroup {
	if name := PodGroupName(job); name != nil {
		return &corev1.PodSchedulingGroup{PodGroupName: name}
	}
	return job.Spec.Template.Spec.SchedulingGroup
}
