package kueue

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// Reasons of the events the integration records about the operator.
const (
	// ReasonStarted: Kueue's reconciler runs in this replica.
	ReasonStarted = "KueueIntegrationStarted"
	// ReasonFailed: setting up or running it failed; the note says why and
	// when it is tried again.
	ReasonFailed = "KueueIntegrationFailed"
	// eventAction is the events' action (events.k8s.io requires one).
	eventAction = "StartKueueIntegration"
)

// The events.k8s.io API refuses a note over 1 KiB; an error is cut to
// maxErrorInNote bytes to leave room for the rest.
const maxErrorInNote = 640

// crdName names the IndexedBatchJob CRD, which the integration's events are
// about when the operator does not run in a Pod it knows.
var crdName = "indexedbatchjobs." + ibjv1.GroupVersion.Group

var (
	podGVK = corev1.SchemeGroupVersion.WithKind("Pod")
	crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
)

// eventReporter records the integration's events about the operator's own
// Pod, which `kubectl describe pod` and `kubectl events` show beside the
// Pod's own events, and which names the replica that failed. An operator
// that does not know its Pod (run outside the cluster, or without the
// downward API's POD_NAME and POD_NAMESPACE) records them about the
// IndexedBatchJob CRD, the operator's one cluster-wide object.
type eventReporter struct {
	recorder              events.EventRecorder
	reader                client.Reader
	podName, podNamespace string
	// regarding is found on first use (its UID takes a read).
	regarding *corev1.ObjectReference
}

func (e *eventReporter) started(ctx context.Context) {
	e.record(ctx, corev1.EventTypeNormal, ReasonStarted,
		"The Kueue integration runs in this replica: Kueue queues IndexedBatchJobs labelled kueue.x-k8s.io/queue-name")
}

func (e *eventReporter) failed(ctx context.Context, err error, retryIn time.Duration) {
	msg := err.Error()
	if len(msg) > maxErrorInNote {
		msg = strings.ToValidUTF8(msg[:maxErrorInNote], "") + " [...]"
	}
	e.record(ctx, corev1.EventTypeWarning, ReasonFailed,
		"The Kueue integration failed in this replica, retrying in %s: %s. IndexedBatchJobs without "+
			"kueue.x-k8s.io/queue-name run as usual; those with one wait suspended until it runs", retryIn, msg)
}

func (e *eventReporter) record(ctx context.Context, eventtype, reason, note string, args ...any) {
	if ref := e.target(ctx); ref != nil {
		e.recorder.Eventf(ref, nil, eventtype, reason, eventAction, note, args...)
	}
}

// target is the object the events are about, or nil (logged) if neither
// the Pod nor the CRD can be read.
func (e *eventReporter) target(ctx context.Context) *corev1.ObjectReference {
	if e.regarding != nil {
		return e.regarding
	}
	log := ctrl.LoggerFrom(ctx).WithName("kueue")
	if e.podName != "" && e.podNamespace != "" {
		ref, err := e.reference(ctx, podGVK, types.NamespacedName{Namespace: e.podNamespace, Name: e.podName})
		if err == nil {
			e.regarding = ref
			return ref
		}
		log.Error(err, "Reading the operator's Pod, which the Kueue integration's events are about; "+
			"they are about the IndexedBatchJob CRD instead", "pod", klog.KRef(e.podNamespace, e.podName))
	}
	ref, err := e.reference(ctx, crdGVK, types.NamespacedName{Name: crdName})
	if err != nil {
		log.Error(err, "Reading the IndexedBatchJob CRD, which the Kueue integration's events are about; recording none",
			"crd", crdName)
		return nil
	}
	e.regarding = ref
	return ref
}

// reference reads the metadata of the object gvk and key name, for its UID,
// by which `kubectl describe` finds an object's events.
func (e *eventReporter) reference(ctx context.Context, gvk schema.GroupVersionKind, key types.NamespacedName) (*corev1.ObjectReference, error) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	if err := e.reader.Get(ctx, key, m); err != nil {
		return nil, err
	}
	apiVersion, kind := gvk.ToAPIVersionAndKind()
	return &corev1.ObjectReference{
		APIVersion: apiVersion, Kind: kind, Namespace: m.Namespace, Name: m.Name, UID: m.UID,
	}, nil
}
