package plugin_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// at is the moment d before the plugin's now (after it for a negative d).
func at(ago time.Duration) metav1.Time {
	return metav1.NewTime(now.Add(-ago))
}

// createJob creates the job and writes the status the operator would have,
// and returns the job as the API server has it.
func createJob(t *testing.T, job *ibjv1.IndexedBatchJob, status ibjv1.IndexedBatchJobStatus) *ibjv1.IndexedBatchJob {
	t.Helper()
	ctx := context.Background()
	if err := k8sClient.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	if status.ObservedGeneration == 0 {
		status.ObservedGeneration = job.Generation
	}
	job.Status = status
	if err := k8sClient.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}
	return job
}

// condition is a True condition of the job that changed `ago` before now.
func condition(typ, reason, message string, ago time.Duration) metav1.Condition {
	return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: message,
		ObservedGeneration: 1, LastTransitionTime: at(ago)}
}

// scriptedPod is a pod of the job as the operator created it and a kubelet
// ran it, at fixed times.
type scriptedPod struct {
	index, attempt    int
	failures, ignored int // the index-failure-count annotations
	node              string
	phase             corev1.PodPhase
	// started and finished are how long before now the pod started and
	// its container ended (finished 0: it has not).
	started, finished time.Duration
	exitCode          int32
	container         string // "main" unless set
	// conditions are added to the pod's status, e.g. DisruptionTarget.
	conditions []corev1.PodCondition
	// waiting is a pending pod's PodScheduled=False reason.
	waiting string
	// deleted deletes the pod once written; the tracking finalizer keeps it.
	deleted bool
	// oomKills and memory are the annotations of a job with
	// retryResources.onOOMKilled; reason replaces the terminated
	// container's reason (OOMKilled).
	oomKills int
	memory   string
	reason   string
	// generation is the restart-attempt label of a job with maxRestarts;
	// restarts is the container's restart count (restarts in place).
	generation int
	restarts   int32
}

// createPod writes the pod, its status, and deletes it if it is to be
// deleted.
func createPod(t *testing.T, job *ibjv1.IndexedBatchJob, sp scriptedPod) {
	t.Helper()
	ctx := context.Background()
	ix := strconv.Itoa(sp.index)
	container := sp.container
	if container == "" {
		container = "main"
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s-%d-%d", job.Name, sp.index, sp.attempt),
			Namespace: job.Namespace,
			Labels: map[string]string{
				ibjv1.JobNameLabel: job.Name, ibjv1.ControllerUIDLabel: string(job.UID), ibjv1.CompletionIndexLabel: ix,
			},
			Annotations: map[string]string{
				ibjv1.CompletionIndexLabel: ix, ibjv1.AttemptAnnotation: strconv.Itoa(sp.attempt),
			},
			Finalizers:      []string{ibjv1.TrackingFinalizer},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, ibjv1.GroupVersion.WithKind("IndexedBatchJob"))},
		},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			NodeName:      sp.node,
			Containers:    []corev1.Container{{Name: container, Image: "busybox:1.36"}},
		},
	}
	if job.Spec.BackoffLimitPerIndex != nil {
		pod.Annotations[ibjv1.IndexFailureCountAnnotation] = strconv.Itoa(sp.failures)
		pod.Annotations[ibjv1.IndexIgnoredFailureCountAnnotation] = strconv.Itoa(sp.ignored)
	}
	if job.Spec.MaxRestarts != nil {
		pod.Labels[ibjv1.RestartAttemptLabel] = strconv.Itoa(sp.generation)
	}
	if job.Spec.RetryResources != nil {
		pod.Annotations[ibjv1.OOMKillsAnnotation] = strconv.Itoa(sp.oomKills)
		pod.Annotations[ibjv1.MemoryAnnotation] = sp.memory
	}
	if err := k8sClient.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = sp.status(container)
	if err := k8sClient.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if sp.deleted {
		if err := k8sClient.Delete(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
}

// status is what a kubelet would have written.
func (sp scriptedPod) status(container string) corev1.PodStatus {
	st := corev1.PodStatus{Phase: sp.phase, Conditions: sp.conditions}
	if sp.waiting != "" {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: sp.waiting, LastTransitionTime: at(sp.started)})
		return st
	}
	if sp.started == 0 {
		return st
	}
	st.StartTime = ptr.To(at(sp.started))
	cs := corev1.ContainerStatus{Name: container, Image: "busybox:1.36", RestartCount: sp.restarts}
	switch {
	case sp.finished > 0:
		reason := "Completed"
		if sp.exitCode != 0 {
			reason = "Error"
		}
		if sp.reason != "" {
			reason = sp.reason
		}
		cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: sp.exitCode, Reason: reason,
			StartedAt: at(sp.started), FinishedAt: at(sp.finished)}
	default:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: at(sp.started)}
		cs.Ready = true
	}
	st.ContainerStatuses = []corev1.ContainerStatus{cs}
	return st
}

// disrupted is the condition an eviction leaves on a pod.
func disrupted(ago time.Duration) []corev1.PodCondition {
	return []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI",
		Message: "Eviction API: evicting", LastTransitionTime: at(ago)}}
}

// coreEvent records an event about the job through the core API, as
// kubectl and older recorders write them.
func coreEvent(t *testing.T, job *ibjv1.IndexedBatchJob, typ, reason, message string, count int32, first, last time.Duration) {
	t.Helper()
	e := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: job.Name + "-", Namespace: job.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "IndexedBatchJob", APIVersion: ibjv1.GroupVersion.String(),
			Namespace: job.Namespace, Name: job.Name, UID: job.UID},
		Type: typ, Reason: reason, Message: message, Count: count,
		Source:         corev1.EventSource{Component: "indexedbatchjob-controller"},
		FirstTimestamp: at(first), LastTimestamp: at(last),
	}
	if err := k8sClient.Create(context.Background(), e); err != nil {
		t.Fatal(err)
	}
}

// createdEvent records the operator's SuccessfulCreate event about the job
// through events.k8s.io/v1, as its recorder writes them.
func createdEvent(t *testing.T, job *ibjv1.IndexedBatchJob, note string, ago time.Duration) {
	t.Helper()
	e := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: job.Name + "-", Namespace: job.Namespace},
		Regarding: corev1.ObjectReference{Kind: "IndexedBatchJob", APIVersion: ibjv1.GroupVersion.String(),
			Namespace: job.Namespace, Name: job.Name, UID: job.UID},
		EventTime:           metav1.NewMicroTime(now.Add(-ago)),
		ReportingController: "indexedbatchjob-controller", ReportingInstance: "indexedbatchjob-controller-1",
		Action: "Sync", Type: corev1.EventTypeNormal, Reason: "SuccessfulCreate", Note: note,
	}
	if err := k8sClient.Create(context.Background(), e); err != nil {
		t.Fatal(err)
	}
}
