package harness

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// PodWrapper builds a pod of a job for a test, then lets the test play the
// kubelet and the API server on it: its phase, container ends, conditions,
// deletion and finalizer.
type PodWrapper struct {
	*corev1.Pod
}

// WrapPod wraps a pod built elsewhere (the controller's own pod
// construction, in its unit tests).
func WrapPod(pod *corev1.Pod) *PodWrapper { return &PodWrapper{Pod: pod} }

// MakePod is the pending pod of the job's index and attempt as the operator
// creates it: its name, labels, annotations, tracking finalizer, controller
// reference and the template's containers, with a UID derived from its
// name, created at created.
func MakePod(job *v1alpha1.IndexedBatchJob, index, attempt int32, created time.Time) *PodWrapper {
	ix := strconv.Itoa(int(index))
	name := job.Name + "-" + ix + "-" + strconv.Itoa(int(attempt))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: job.Namespace,
			UID:       types.UID("uid-" + name),
			Labels: map[string]string{
				v1alpha1.CompletionIndexLabel: ix,
				v1alpha1.JobNameLabel:         job.Name,
				v1alpha1.ControllerUIDLabel:   string(job.UID),
			},
			Annotations: map[string]string{
				v1alpha1.CompletionIndexLabel: ix,
				v1alpha1.AttemptAnnotation:    strconv.Itoa(int(attempt)),
			},
			Finalizers:        []string{v1alpha1.TrackingFinalizer},
			CreationTimestamp: metav1.NewTime(created),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "IndexedBatchJob", Name: job.Name, UID: job.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec:   *job.Spec.Template.Spec.DeepCopy(),
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	return &PodWrapper{Pod: pod}
}

// Obj is the pod.
func (w *PodWrapper) Obj() *corev1.Pod { return w.Pod }

// UID sets the pod's UID.
func (w *PodWrapper) UID(uid types.UID) *PodWrapper {
	w.Pod.UID = uid
	return w
}

// Running: scheduled, its containers started.
func (w *PodWrapper) Running() *PodWrapper {
	w.Status.Phase = corev1.PodRunning
	w.Status.ContainerStatuses = nil
	for _, c := range w.Spec.Containers {
		w.Status.ContainerStatuses = append(w.Status.ContainerStatuses, corev1.ContainerStatus{
			Name:  c.Name,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: w.CreationTimestamp}},
		})
	}
	return w
}

// Ready: running, and its Ready condition true.
func (w *PodWrapper) Ready() *PodWrapper {
	w.Running()
	return w.Condition(corev1.PodReady, corev1.ConditionTrue)
}

// SucceededAt: every container exited 0 at t.
func (w *PodWrapper) SucceededAt(t time.Time) *PodWrapper {
	w.Status.Phase = corev1.PodSucceeded
	w.Status.ContainerStatuses = nil
	for _, c := range w.Spec.Containers {
		w.Status.ContainerStatuses = append(w.Status.ContainerStatuses, terminated(c.Name, 0, t))
	}
	return w
}

// FailedAt: the first container exited with code at t, the others with 0.
func (w *PodWrapper) FailedAt(t time.Time, code int32) *PodWrapper {
	w.Status.Phase = corev1.PodFailed
	w.Status.ContainerStatuses = nil
	for i, c := range w.Spec.Containers {
		exit := int32(0)
		if i == 0 {
			exit = code
		}
		w.Status.ContainerStatuses = append(w.Status.ContainerStatuses, terminated(c.Name, exit, t))
	}
	return w
}

// OOMKilledAt: the first container was OOM-killed at t (exit code 137,
// reason OOMKilled), the others exited with 0.
func (w *PodWrapper) OOMKilledAt(t time.Time) *PodWrapper {
	w.FailedAt(t, 137)
	if len(w.Status.ContainerStatuses) > 0 {
		w.Status.ContainerStatuses[0].State.Terminated.Reason = "OOMKilled"
	}
	return w
}

// FailedWithoutStatus: phase Failed with no container status, as a pod the
// kubelet rejected or a pod GC'd from a lost node.
func (w *PodWrapper) FailedWithoutStatus() *PodWrapper {
	w.Status.Phase = corev1.PodFailed
	w.Status.ContainerStatuses = nil
	return w
}

// InitFailedAt: the named init container exited with code at t.
func (w *PodWrapper) InitFailedAt(t time.Time, name string, code int32) *PodWrapper {
	w.Status.Phase = corev1.PodFailed
	w.Status.InitContainerStatuses = append(w.Status.InitContainerStatuses, terminated(name, code, t))
	return w
}

// ContainerExit sets (or adds) a terminated status of the named container.
func (w *PodWrapper) ContainerExit(name string, code int32, t time.Time) *PodWrapper {
	for i := range w.Status.ContainerStatuses {
		if w.Status.ContainerStatuses[i].Name == name {
			w.Status.ContainerStatuses[i] = terminated(name, code, t)
			return w
		}
	}
	w.Status.ContainerStatuses = append(w.Status.ContainerStatuses, terminated(name, code, t))
	return w
}

// DeletedAt sets the pod's deletion timestamp.
func (w *PodWrapper) DeletedAt(t time.Time) *PodWrapper {
	w.DeletionTimestamp = &metav1.Time{Time: t}
	return w
}

// WithoutFinalizer takes the pod's finalizers off.
func (w *PodWrapper) WithoutFinalizer() *PodWrapper {
	w.Finalizers = nil
	return w
}

// Discarded is what the operator does to a pod it lets go of without
// counting its end: finalizer gone, discarded annotation set, in one patch.
func (w *PodWrapper) Discarded() *PodWrapper {
	w.Finalizers = nil
	w.Annotations[v1alpha1.DiscardedAnnotation] = "true"
	return w
}

// Condition adds a pod condition, changed an hour after the pod's creation.
func (w *PodWrapper) Condition(typ corev1.PodConditionType, status corev1.ConditionStatus) *PodWrapper {
	w.Status.Conditions = append(w.Status.Conditions, corev1.PodCondition{
		Type: typ, Status: status, LastTransitionTime: w.CreationTimestamp,
	})
	return w
}

// Label sets a label.
func (w *PodWrapper) Label(key, value string) *PodWrapper {
	w.Labels[key] = value
	return w
}

// Annotation sets an annotation.
func (w *PodWrapper) Annotation(key, value string) *PodWrapper {
	w.Annotations[key] = value
	return w
}

// terminated is the status of a container that exited with code at t.
func terminated(name string, code int32, t time.Time) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name: name,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode:   code,
			FinishedAt: metav1.NewTime(t),
		}},
	}
}
