package webhook

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
)

// containerRestartRulesSince is the first Kubernetes minor whose kubelet
// honours container restart rules (feature gate ContainerRestartRules).
var containerRestartRulesSince = version.MajorMinor(1, 35)

// DefaultKubeletsRecheck is how long the webhook takes its read of the
// nodes' kubelet versions as current.
const DefaultKubeletsRecheck = 30 * time.Second

// inPlaceErrors refuses what a retry InPlace rule cannot work with and
// the CRD's rules could not afford to check: a rule whose containerName
// names an init container (the kubelet restarts only regular containers
// by the operator's rules), and a template whose containers set their own
// restartPolicy or restartPolicyRules, which the operator's rules would
// replace.
func inPlaceErrors(job *ibjv1.IndexedBatchJob) field.ErrorList {
	if !podbuild.HasRetryInPlace(job) {
		return nil
	}
	var errs field.ErrorList
	rules := field.NewPath("spec", "podFailurePolicy", "rules")
	for i, r := range job.Spec.PodFailurePolicy.Rules {
		if r.Retry != ibjv1.RetryInPlace || r.OnExitCodes == nil || r.OnExitCodes.ContainerName == nil {
			continue
		}
		for _, c := range job.Spec.Template.Spec.InitContainers {
			if c.Name == *r.OnExitCodes.ContainerName {
				errs = append(errs, field.Invalid(rules.Index(i).Child("onExitCodes", "containerName"), c.Name,
					"names an init container: retry InPlace restarts regular containers only"))
			}
		}
	}
	containers := field.NewPath("spec", "template", "spec", "containers")
	for i, c := range job.Spec.Template.Spec.Containers {
		if c.RestartPolicy != nil {
			errs = append(errs, field.Forbidden(containers.Index(i).Child("restartPolicy"),
				"must not be set with a podFailurePolicy rule of retry InPlace: the operator writes the containers' restart rules"))
		}
		if len(c.RestartPolicyRules) > 0 {
			errs = append(errs, field.Forbidden(containers.Index(i).Child("restartPolicyRules"),
				"must not be set with a podFailurePolicy rule of retry InPlace: the operator writes the containers' restart rules"))
		}
	}
	return errs
}

// hasRestartRules: a container of the pod has restart rules.
func hasRestartRules(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if len(c.RestartPolicyRules) > 0 {
			return true
		}
	}
	return false
}

// droppedRestartRulesError is the refusal of a job with a retry InPlace
// rule whose dry-run pod came back without the container restart rules
// the operator wrote: the API server drops them silently where feature
// gate ContainerRestartRules is off, or it is older than 1.35 and does not
// know them, and the job's failures would never be retried in place.
func droppedRestartRulesError(job *ibjv1.IndexedBatchJob) error {
	var at *field.Path
	for i, r := range job.Spec.PodFailurePolicy.Rules {
		if r.Retry == ibjv1.RetryInPlace {
			at = field.NewPath("spec", "podFailurePolicy", "rules").Index(i).Child("retry")
			break
		}
	}
	return invalid(job, field.ErrorList{field.Invalid(at, ibjv1.RetryInPlace,
		"the API server dropped the container restart rules (restartPolicyRules) from this job's pods: "+
			"retry InPlace needs Kubernetes 1.35 or later with feature gate ContainerRestartRules enabled")})
}

// kubelets remembers how many nodes run a kubelet older than 1.35, read
// at most once every recheck.
type kubelets struct {
	mu      sync.Mutex
	recheck time.Duration
	readAt  time.Time
	old     int
}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=list

// oldKubeletWarnings warns, for a job with a retry InPlace rule, that
// nodes run a kubelet older than 1.35 (Node.status.nodeInfo.kubeletVersion):
// they ignore container restart rules, so the job's pods that run there
// fail and are replaced with a new pod instead. The nodes are read at most
// once every Validator.KubeletsRecheck; a read that fails warns of nothing.
func (v *Validator) oldKubeletWarnings(ctx context.Context, job *ibjv1.IndexedBatchJob) []string {
	if !podbuild.HasRetryInPlace(job) {
		return nil
	}
	n := v.kubelets.oldCount(ctx, v.client, v.timeout)
	if n == 0 {
		return nil
	}
	nodes := "1 node runs"
	if n > 1 {
		nodes = fmt.Sprintf("%d nodes run", n)
	}
	return []string{fmt.Sprintf("%s a kubelet older than v1.35, which does not restart containers in place: "+
		"a pod of this job that fails there fails and is replaced with a new pod instead (retry InPlace acts as NewPod)", nodes)}
}

// oldCount is the number of nodes whose kubelet is older than 1.35, as
// last read.
func (k *kubelets) oldCount(ctx context.Context, c client.Client, timeout time.Duration) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	recheck := k.recheck
	if recheck == 0 {
		recheck = DefaultKubeletsRecheck
	}
	if !k.readAt.IsZero() && time.Since(k.readAt) < recheck {
		return k.old
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var list corev1.NodeList
	if err := c.List(ctx, &list); err != nil {
		log.FromContext(ctx).Info("Could not read the nodes' kubelet versions", "error", err)
		return 0
	}
	k.readAt, k.old = time.Now(), 0
	for _, n := range list.Items {
		if ver, err := version.ParseGeneric(n.Status.NodeInfo.KubeletVersion); err == nil && ver.LessThan(containerRestartRulesSince) {
			k.old++
		}
	}
	return k.old
}
