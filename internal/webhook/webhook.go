// Package webhook is the IndexedBatchJob admission webhook: a defaulting
// webhook for the defaults a CRD cannot express (defaulter.go), a
// validating webhook that has the API server judge the pods a job would
// get (validator.go), and the serving certificates the operator manages
// itself with open-policy-agent's cert-controller (certs.go), so that an
// install needs no cert-manager. The third party's API stays inside this
// package.
package webhook

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// The paths the webhook configurations call, as kubebuilder names them.
const (
	MutatePath   = "/mutate-batch-indexedjob-dev-v1alpha1-indexedbatchjob"
	ValidatePath = "/validate-batch-indexedjob-dev-v1alpha1-indexedbatchjob"
)

// failurePolicy Fail and timeoutSeconds 10, as JobSet and Kueue: a job is
// never admitted unjudged because the operator is down (the API server
// refuses creates, and updates that change the template, of
// IndexedBatchJobs until a replica serves the webhook again), and the
// validating webhook's own dry run is bounded by DefaultDryRunTimeout, well
// inside the 10 s. The validating webhook's matchCondition sends it only
// creates and what the Validator judges of an update: a change of the
// template, of retryResources (which makes the pods' memory) or of
// nodeAvoidance (nodeAvoidanceErrors), and what
// Kueue's rules judge (Validator.Queue): a change of one of Kueue's labels
// and annotations on the job, or of the parallelism of a job with
// kueue.x-k8s.io/job-min-parallelism. An update that leaves them alone (a
// queueing system's suspend or resume, Kueue's stopping annotation, another
// label) neither waits for the webhook nor fails while it is down; keep the
// key lists in step with internal/kueue's validation.go. The namespaceSelector that
// leaves out the operator's own namespace is added in config/default and
// the chart, which know that namespace.
//
// +kubebuilder:webhook:path=/mutate-batch-indexedjob-dev-v1alpha1-indexedbatchjob,mutating=true,failurePolicy=fail,sideEffects=None,groups=batch.indexedjob.dev,resources=indexedbatchjobs,verbs=create,versions=v1alpha1,name=mindexedbatchjob-v1alpha1.kb.io,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-batch-indexedjob-dev-v1alpha1-indexedbatchjob,mutating=false,failurePolicy=fail,sideEffects=None,groups=batch.indexedjob.dev,resources=indexedbatchjobs,verbs=create;update,versions=v1alpha1,name=vindexedbatchjob-v1alpha1.kb.io,admissionReviewVersions=v1,timeoutSeconds=10,patch=`{"matchConditions":[{"name":"creates-and-changes-the-validator-judges","expression":"request.operation == 'CREATE' || object.spec.template != oldObject.spec.template || (has(object.spec.retryResources) ? !has(oldObject.spec.retryResources) || object.spec.retryResources != oldObject.spec.retryResources : has(oldObject.spec.retryResources)) || (has(object.spec.nodeAvoidance) ? !has(oldObject.spec.nodeAvoidance) || object.spec.nodeAvoidance != oldObject.spec.nodeAvoidance : has(oldObject.spec.nodeAvoidance)) || ['kueue.x-k8s.io/queue-name','kueue.x-k8s.io/priority-class','kueue.x-k8s.io/max-exec-time-seconds','kueue.x-k8s.io/prebuilt-workload-name'].exists(k, (has(object.metadata.labels) && k in object.metadata.labels ? object.metadata.labels[k] : '') != (has(oldObject.metadata.labels) && k in oldObject.metadata.labels ? oldObject.metadata.labels[k] : '')) || ['kueue.x-k8s.io/job-min-parallelism','kueue.x-k8s.io/prebuilt-workload-name','kueue.x-k8s.io/elastic-job','kueue.x-k8s.io/admission-gated-by'].exists(k, (has(object.metadata.annotations) && k in object.metadata.annotations ? object.metadata.annotations[k] : '') != (has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations ? oldObject.metadata.annotations[k] : '')) || (has(oldObject.metadata.annotations) && 'kueue.x-k8s.io/job-min-parallelism' in oldObject.metadata.annotations && object.spec.parallelism != oldObject.spec.parallelism)"}]}`

// Register serves the defaulting and validating webhooks on srv.
func Register(srv ctrlwebhook.Server, scheme *runtime.Scheme, d Defaulter, v *Validator) {
	srv.Register(MutatePath, &admission.Webhook{Handler: defaulting{decoder: admission.NewDecoder(scheme), defaulter: d}})
	srv.Register(ValidatePath, admission.WithValidator[*ibjv1.IndexedBatchJob](scheme, v))
}

// defaulting is the mutating webhook: on create only (see Defaulter), it
// answers with a patch of the fields Defaulter set, and nothing else.
//
// Not controller-runtime's defaulting handler: that one patches the
// difference between the request and the job marshalled back from the Go
// type, which adds every field the reused batch/v1 and core/v1 types
// marshal without omitempty (a podFailurePolicy rule's
// onPodConditions[].status, left out by the user, as "") and so turns a
// valid job into one the CRD's schema refuses.
type defaulting struct {
	decoder   admission.Decoder
	defaulter Defaulter
}

// Handle defaults the job of a create request.
func (h defaulting) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	job := &ibjv1.IndexedBatchJob{}
	if err := h.decoder.Decode(req, job); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	before := job.Spec.DeepCopy()
	labelsBefore := maps.Clone(job.Labels)
	if err := h.defaulter.Default(ctx, job); err != nil {
		return admission.Denied(err.Error())
	}
	var patches []jsonpatch.JsonPatchOperation
	if before.BackoffLimit == nil && job.Spec.BackoffLimit != nil {
		patches = append(patches, jsonpatch.NewOperation("add", "/spec/backoffLimit", *job.Spec.BackoffLimit))
	}
	if before.PodReplacementPolicy == nil && job.Spec.PodReplacementPolicy != nil {
		patches = append(patches, jsonpatch.NewOperation("add", "/spec/podReplacementPolicy", *job.Spec.PodReplacementPolicy))
	}
	if ptr.Deref(job.Spec.Suspend, false) && !ptr.Deref(before.Suspend, false) {
		patches = append(patches, jsonpatch.NewOperation("add", "/spec/suspend", true))
	}
	if m := job.Spec.ManagedBy; m != nil && ptr.Deref(before.ManagedBy, "") != *m {
		patches = append(patches, jsonpatch.NewOperation("add", "/spec/managedBy", *m))
	}
	return admission.Patched("", append(patches, addedLabels(labelsBefore, job.Labels)...)...)
}

// addedLabels patches in the labels of after that before lacks (a queue
// name the queueing system gave the job), in key order.
func addedLabels(before, after map[string]string) []jsonpatch.JsonPatchOperation {
	var added []string
	for k := range after {
		if _, ok := before[k]; !ok {
			added = append(added, k)
		}
	}
	if len(added) == 0 {
		return nil
	}
	if len(before) == 0 {
		return []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", "/metadata/labels", after)}
	}
	slices.Sort(added)
	patches := make([]jsonpatch.JsonPatchOperation, 0, len(added))
	for _, k := range added {
		// A JSON pointer writes "~" as "~0" and "/" as "~1".
		key := strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
		patches = append(patches, jsonpatch.NewOperation("add", "/metadata/labels/"+key, after[k]))
	}
	return patches
}

// DelayedServer is a webhook server that starts serving only once ready is
// closed: the certificates it serves are written by the certificate
// rotator after the manager started, and controller-runtime's server
// refuses to start without them. It runs on every replica, leader or not.
type DelayedServer struct {
	ctrlwebhook.Server
	Ready <-chan struct{}
}

// Start waits for Ready, then serves until ctx is done.
func (s DelayedServer) Start(ctx context.Context) error {
	select {
	case <-s.Ready:
	case <-ctx.Done():
		return nil
	}
	return s.Server.Start(ctx)
}

// NeedLeaderElection is false: every replica serves the webhook.
func (s DelayedServer) NeedLeaderElection() bool { return false }

// StartedChecker is a readiness check: ready once the certificates are
// ready and the server listens.
func (s DelayedServer) StartedChecker() healthz.Checker {
	started := s.Server.StartedChecker()
	return func(req *http.Request) error {
		select {
		case <-s.Ready:
			return started(req)
		default:
			return errNotReady
		}
	}
}
