// Package harness holds the test support shared by the unit, integration
// and e2e tests and the benchmark: builders that let a test read as its
// scenario,
//
//	MakeIndexedBatchJob("a", ns).Completions(8).Parallelism(2).Obj()
//
// an integration suite's control plane (StartEnvtest), throwaway serving
// certificates, and a watch of a job's pods. Its subpackages are the pod
// simulator that plays the kubelet (podsim) and the kwok cluster of the e2e
// suite and the demo (kwokcluster).
package harness

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// DefaultImage is the image of the builder's only container.
const DefaultImage = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"

// succeedCommand is the command of the containers the builders add: one
// that exits 0 at once.
func succeedCommand() []string { return []string{"sh", "-c", "exit 0"} }

// JobWrapper builds an IndexedBatchJob. Its zero-configuration job is valid:
// one completion, one container named "main", restartPolicy Never.
type JobWrapper struct {
	job v1alpha1.IndexedBatchJob
}

// MakeIndexedBatchJob starts a valid job with the given name and namespace.
func MakeIndexedBatchJob(name, namespace string) *JobWrapper {
	return &JobWrapper{job: v1alpha1.IndexedBatchJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: v1alpha1.IndexedBatchJobSpec{
			Completions: 1,
			Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{
						Name:    "main",
						Image:   DefaultImage,
						Command: succeedCommand(),
					}},
				},
			},
		},
	}}
}

// Obj returns a deep copy of the built job, so one wrapper can build several.
func (w *JobWrapper) Obj() *v1alpha1.IndexedBatchJob {
	return w.job.DeepCopy()
}

// Clone returns an independent wrapper, to derive variants from a common base.
func (w *JobWrapper) Clone() *JobWrapper {
	return &JobWrapper{job: *w.job.DeepCopy()}
}

// Name sets metadata.name.
func (w *JobWrapper) Name(name string) *JobWrapper {
	w.job.Name = name
	return w
}

// Completions sets spec.completions.
func (w *JobWrapper) Completions(n int32) *JobWrapper {
	w.job.Spec.Completions = n
	return w
}

// Parallelism sets spec.parallelism.
func (w *JobWrapper) Parallelism(n int32) *JobWrapper {
	w.job.Spec.Parallelism = ptr.To(n)
	return w
}

// BackoffLimit sets spec.backoffLimit.
func (w *JobWrapper) BackoffLimit(n int32) *JobWrapper {
	w.job.Spec.BackoffLimit = ptr.To(n)
	return w
}

// BackoffLimitPerIndex sets spec.backoffLimitPerIndex.
func (w *JobWrapper) BackoffLimitPerIndex(n int32) *JobWrapper {
	w.job.Spec.BackoffLimitPerIndex = ptr.To(n)
	return w
}

// MaxFailedIndexes sets spec.maxFailedIndexes.
func (w *JobWrapper) MaxFailedIndexes(n int32) *JobWrapper {
	w.job.Spec.MaxFailedIndexes = ptr.To(n)
	return w
}

// ActiveDeadlineSeconds sets spec.activeDeadlineSeconds.
func (w *JobWrapper) ActiveDeadlineSeconds(s int64) *JobWrapper {
	w.job.Spec.ActiveDeadlineSeconds = ptr.To(s)
	return w
}

// TTLSecondsAfterFinished sets spec.ttlSecondsAfterFinished.
func (w *JobWrapper) TTLSecondsAfterFinished(s int32) *JobWrapper {
	w.job.Spec.TTLSecondsAfterFinished = ptr.To(s)
	return w
}

// Suspend sets spec.suspend.
func (w *JobWrapper) Suspend(suspend bool) *JobWrapper {
	w.job.Spec.Suspend = ptr.To(suspend)
	return w
}

// Indexes sets spec.indexes, the subset of indexes the job runs.
func (w *JobWrapper) Indexes(indexes string) *JobWrapper {
	w.job.Spec.Indexes = ptr.To(indexes)
	return w
}

// RetryBackoff sets spec.retryBackoff in seconds.
func (w *JobWrapper) RetryBackoff(initialDelaySeconds, maxDelaySeconds int32) *JobWrapper {
	w.job.Spec.RetryBackoff = &v1alpha1.RetryBackoff{
		InitialDelaySeconds: ptr.To(initialDelaySeconds),
		MaxDelaySeconds:     ptr.To(maxDelaySeconds),
	}
	return w
}

// PeerDNS sets spec.network.enableDNSHostnames, and network.subdomain when
// subdomain is not empty (the headless Service takes the job's name
// otherwise).
func (w *JobWrapper) PeerDNS(subdomain string) *JobWrapper {
	w.job.Spec.Network = &v1alpha1.Network{EnableDNSHostnames: ptr.To(true)}
	if subdomain != "" {
		w.job.Spec.Network.Subdomain = ptr.To(subdomain)
	}
	return w
}

// GangScheduling sets spec.gangScheduling, with minCount when it is above
// 0 (the gang is parallelism pods otherwise).
func (w *JobWrapper) GangScheduling(minCount int32) *JobWrapper {
	w.job.Spec.GangScheduling = &v1alpha1.GangScheduling{}
	if minCount > 0 {
		w.job.Spec.GangScheduling.MinCount = ptr.To(minCount)
	}
	return w
}

// Gang sets spec.scheduling.schedulingPolicy.gang, with minCount when it
// is above 0 (the gang is parallelism pods otherwise).
func (w *JobWrapper) Gang(minCount int32) *JobWrapper {
	gang := &v1alpha1.WorkloadPodGroupGangSchedulingPolicy{}
	if minCount > 0 {
		gang.MinCount = ptr.To(minCount)
	}
	w.scheduling().SchedulingPolicy = &v1alpha1.WorkloadPodGroupSchedulingPolicy{Gang: gang}
	return w
}

// BasicScheduling sets spec.scheduling.schedulingPolicy.basic.
func (w *JobWrapper) BasicScheduling() *JobWrapper {
	w.scheduling().SchedulingPolicy = &v1alpha1.WorkloadPodGroupSchedulingPolicy{Basic: &v1alpha1.WorkloadPodGroupBasicSchedulingPolicy{}}
	return w
}

// Topology sets spec.scheduling.schedulingConstraints to one topology
// constraint on the node label key.
func (w *JobWrapper) Topology(key string) *JobWrapper {
	w.scheduling().SchedulingConstraints = &v1alpha1.WorkloadPodGroupSchedulingConstraints{
		Topology: []v1alpha1.WorkloadTopologyConstraint{{Key: key}},
	}
	return w
}

// DisruptTogether sets spec.scheduling.disruptionMode to all (true) or
// single (false).
func (w *JobWrapper) DisruptTogether(all bool) *JobWrapper {
	mode := &v1alpha1.WorkloadPodGroupDisruptionMode{Single: &v1alpha1.WorkloadPodGroupSingleDisruptionMode{}}
	if all {
		mode = &v1alpha1.WorkloadPodGroupDisruptionMode{All: &v1alpha1.WorkloadPodGroupAllDisruptionMode{}}
	}
	w.scheduling().DisruptionMode = mode
	return w
}

// SharedClaim adds to spec.scheduling.resourceClaims a claim of the given
// name on the ResourceClaim claimName, or, with fromTemplate, on the
// ResourceClaimTemplate of that name.
func (w *JobWrapper) SharedClaim(name, claimName string, fromTemplate bool) *JobWrapper {
	c := v1alpha1.WorkloadPodGroupResourceClaim{Name: name, ResourceClaimName: ptr.To(claimName)}
	if fromTemplate {
		c.ResourceClaimName, c.ResourceClaimTemplateName = nil, ptr.To(claimName)
	}
	s := w.scheduling()
	s.ResourceClaims = append(s.ResourceClaims, c)
	return w
}

// scheduling is the job's spec.scheduling, made empty if unset.
func (w *JobWrapper) scheduling() *v1alpha1.JobSchedulingConfiguration {
	if w.job.Spec.Scheduling == nil {
		w.job.Spec.Scheduling = &v1alpha1.JobSchedulingConfiguration{}
	}
	return w.job.Spec.Scheduling
}

// ManagedBy sets spec.managedBy.
func (w *JobWrapper) ManagedBy(controller string) *JobWrapper {
	w.job.Spec.ManagedBy = ptr.To(controller)
	return w
}

// PodReplacementPolicy sets spec.podReplacementPolicy.
func (w *JobWrapper) PodReplacementPolicy(p batchv1.PodReplacementPolicy) *JobWrapper {
	w.job.Spec.PodReplacementPolicy = ptr.To(p)
	return w
}

// TerminatingTimeoutSeconds sets spec.terminatingTimeoutSeconds.
func (w *JobWrapper) TerminatingTimeoutSeconds(s int32) *JobWrapper {
	w.job.Spec.TerminatingTimeoutSeconds = &s
	return w
}

// MaxRestarts sets spec.maxRestarts.
func (w *JobWrapper) MaxRestarts(n int32) *JobWrapper {
	w.job.Spec.MaxRestarts = &n
	return w
}

// EditRules changes the podFailurePolicy rules set so far (to give them a
// field batch/v1 has not, such as retry or restartIndexes).
func (w *JobWrapper) EditRules(edit func(rules []v1alpha1.PodFailurePolicyRule)) *JobWrapper {
	edit(w.job.Spec.PodFailurePolicy.Rules)
	return w
}

// RetryInPlace sets retry InPlace on the podFailurePolicy rules at the
// given positions (Count rules with onExitCodes).
func (w *JobWrapper) RetryInPlace(rules ...int) *JobWrapper {
	for _, i := range rules {
		w.job.Spec.PodFailurePolicy.Rules[i].Retry = v1alpha1.RetryInPlace
	}
	return w
}

// PodFailurePolicy sets spec.podFailurePolicy to the given batch/v1 rules,
// in order (unnamed, without retry delays). Called with no rules it sets a
// policy with an empty rule list.
func (w *JobWrapper) PodFailurePolicy(rules ...batchv1.PodFailurePolicyRule) *JobWrapper {
	policy := &v1alpha1.PodFailurePolicy{Rules: make([]v1alpha1.PodFailurePolicyRule, 0, len(rules))}
	for _, r := range rules {
		policy.Rules = append(policy.Rules, v1alpha1.PodFailurePolicyRule{Action: r.Action, OnExitCodes: r.OnExitCodes, OnPodConditions: r.OnPodConditions})
	}
	w.job.Spec.PodFailurePolicy = policy
	return w
}

// SuccessPolicy sets spec.successPolicy to the given rules. Called with no
// rules it sets a policy with an empty rule list.
func (w *JobWrapper) SuccessPolicy(rules ...batchv1.SuccessPolicyRule) *JobWrapper {
	w.job.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: append([]batchv1.SuccessPolicyRule{}, rules...)}
	return w
}

// RestartPolicy sets the template's restartPolicy; "" leaves it unset.
func (w *JobWrapper) RestartPolicy(p corev1.RestartPolicy) *JobWrapper {
	w.job.Spec.Template.Spec.RestartPolicy = p
	return w
}

// Image sets the image of the template's first container.
func (w *JobWrapper) Image(image string) *JobWrapper {
	w.job.Spec.Template.Spec.Containers[0].Image = image
	return w
}

// InitContainer appends an init container with the given name.
func (w *JobWrapper) InitContainer(name string) *JobWrapper {
	w.job.Spec.Template.Spec.InitContainers = append(w.job.Spec.Template.Spec.InitContainers, corev1.Container{
		Name:    name,
		Image:   DefaultImage,
		Command: succeedCommand(),
	})
	return w
}

// PodLabel sets a label on the template's metadata.
func (w *JobWrapper) PodLabel(key, value string) *JobWrapper {
	if w.job.Spec.Template.Labels == nil {
		w.job.Spec.Template.Labels = map[string]string{}
	}
	w.job.Spec.Template.Labels[key] = value
	return w
}

// NodeAvoidance sets spec.nodeAvoidance: mode, and failedIndexesPerNode
// when above 0.
func (w *JobWrapper) NodeAvoidance(mode v1alpha1.NodeAvoidanceMode, failedIndexesPerNode int32) *JobWrapper {
	w.job.Spec.NodeAvoidance = &v1alpha1.NodeAvoidance{Mode: mode}
	if failedIndexesPerNode > 0 {
		w.job.Spec.NodeAvoidance.FailedIndexesPerNode = &failedIndexesPerNode
	}
	return w
}

// NodeSelector sets a key of the template's nodeSelector.
func (w *JobWrapper) NodeSelector(key, value string) *JobWrapper {
	if w.job.Spec.Template.Spec.NodeSelector == nil {
		w.job.Spec.Template.Spec.NodeSelector = map[string]string{}
	}
	w.job.Spec.Template.Spec.NodeSelector[key] = value
	return w
}

// Toleration appends a toleration to the template.
func (w *JobWrapper) Toleration(t corev1.Toleration) *JobWrapper {
	w.job.Spec.Template.Spec.Tolerations = append(w.job.Spec.Template.Spec.Tolerations, t)
	return w
}

// OnExitCodes is a podFailurePolicy rule matching exit codes of any
// container, or of containerName when it is not empty.
func OnExitCodes(action batchv1.PodFailurePolicyAction, containerName string, op batchv1.PodFailurePolicyOnExitCodesOperator, values ...int32) batchv1.PodFailurePolicyRule {
	r := batchv1.PodFailurePolicyRule{
		Action: action,
		// An empty, non-nil list, so that a rule without values is sent as
		// `values: []` and not dropped as null.
		OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: op, Values: append([]int32{}, values...)},
	}
	if containerName != "" {
		r.OnExitCodes.ContainerName = ptr.To(containerName)
	}
	return r
}

// OnPodCondition is a podFailurePolicy rule matching one pod condition.
func OnPodCondition(action batchv1.PodFailurePolicyAction, condition corev1.PodConditionType, status corev1.ConditionStatus) batchv1.PodFailurePolicyRule {
	return batchv1.PodFailurePolicyRule{
		Action:          action,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: condition, Status: status}},
	}
}

// SucceededIndexes is a successPolicy rule on an interval string such as "0,2-5".
func SucceededIndexes(indexes string) batchv1.SuccessPolicyRule {
	return batchv1.SuccessPolicyRule{SucceededIndexes: ptr.To(indexes)}
}

// SucceededCount is a successPolicy rule on a number of succeeded indexes.
func SucceededCount(n int32) batchv1.SuccessPolicyRule {
	return batchv1.SuccessPolicyRule{SucceededCount: ptr.To(n)}
}

// UID sets metadata.uid, which a unit test needs where no API server assigns one.
func (w *JobWrapper) UID(uid types.UID) *JobWrapper {
	w.job.UID = uid
	return w
}

// Generation sets metadata.generation.
func (w *JobWrapper) Generation(g int64) *JobWrapper {
	w.job.Generation = g
	return w
}

// Subdomain sets the template's subdomain.
func (w *JobWrapper) Subdomain(subdomain string) *JobWrapper {
	w.job.Spec.Template.Spec.Subdomain = subdomain
	return w
}

// Container appends a container with the given name to the template.
func (w *JobWrapper) Container(name string) *JobWrapper {
	w.job.Spec.Template.Spec.Containers = append(w.job.Spec.Template.Spec.Containers, corev1.Container{
		Name:    name,
		Image:   DefaultImage,
		Command: succeedCommand(),
	})
	return w
}

// Env appends an environment variable to every container and init container
// of the template.
func (w *JobWrapper) Env(name, value string) *JobWrapper {
	spec := &w.job.Spec.Template.Spec
	for i := range spec.InitContainers {
		spec.InitContainers[i].Env = append(spec.InitContainers[i].Env, corev1.EnvVar{Name: name, Value: value})
	}
	for i := range spec.Containers {
		spec.Containers[i].Env = append(spec.Containers[i].Env, corev1.EnvVar{Name: name, Value: value})
	}
	return w
}

// PodAnnotation sets an annotation on the template's metadata.
func (w *JobWrapper) PodAnnotation(key, value string) *JobWrapper {
	if w.job.Spec.Template.Annotations == nil {
		w.job.Spec.Template.Annotations = map[string]string{}
	}
	w.job.Spec.Template.Annotations[key] = value
	return w
}

// ConditionReason is the reason of the job's condition typ when it is True,
// and "" otherwise.
func ConditionReason(job *v1alpha1.IndexedBatchJob, typ string) string {
	for _, c := range job.Status.Conditions {
		if c.Type == typ && c.Status == metav1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

// Label sets a label on the job itself.
func (w *JobWrapper) Label(key, value string) *JobWrapper {
	if w.job.Labels == nil {
		w.job.Labels = map[string]string{}
	}
	w.job.Labels[key] = value
	return w
}

// Annotation sets an annotation on the job itself.
func (w *JobWrapper) Annotation(key, value string) *JobWrapper {
	if w.job.Annotations == nil {
		w.job.Annotations = map[string]string{}
	}
	w.job.Annotations[key] = value
	return w
}

// Limits sets the resource limits of the template's first container.
func (w *JobWrapper) Limits(limits corev1.ResourceList) *JobWrapper {
	w.job.Spec.Template.Spec.Containers[0].Resources.Limits = limits
	return w
}

// RetryOnOOMKilled sets spec.retryResources.onOOMKilled.
func (w *JobWrapper) RetryOnOOMKilled(factorPercent int32, maxMemory string) *JobWrapper {
	w.job.Spec.RetryResources = &v1alpha1.RetryResources{OnOOMKilled: &v1alpha1.OOMKilledResources{
		FactorPercent: factorPercent, MaxMemory: resource.MustParse(maxMemory),
	}}
	return w
}

// Requests sets the resource requests of the template's first container.
func (w *JobWrapper) Requests(requests corev1.ResourceList) *JobWrapper {
	w.job.Spec.Template.Spec.Containers[0].Resources.Requests = requests
	return w
}
