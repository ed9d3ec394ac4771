package v1alpha1

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names other tooling relies on (labels, annotations, finalizer, condition
// reasons): they are part of the API and must not change.
const (
	// CompletionIndexLabel is the pod label (and annotation) holding the pod's completion index.
	CompletionIndexLabel = "batch.indexedjob.dev/completion-index"
	// JobNameLabel is the pod label holding the owning IndexedBatchJob's name.
	JobNameLabel = "batch.indexedjob.dev/job-name"
	// ControllerUIDLabel is the pod label holding the owning IndexedBatchJob's UID.
	ControllerUIDLabel = "batch.indexedjob.dev/controller-uid"
	// IndexFailureCountAnnotation carries, on every pod, how many earlier pods of
	// its index failed. It is what makes per-index failure counts survive a
	// controller restart, as upstream's batch.kubernetes.io/job-index-failure-count.
	IndexFailureCountAnnotation = "batch.indexedjob.dev/job-index-failure-count"
	// IndexIgnoredFailureCountAnnotation carries, on every pod, how many earlier
	// pods of its index failed in a way a podFailurePolicy Ignore rule matched.
	// Neither the limits nor the backoff delay count them; it is a record.
	IndexIgnoredFailureCountAnnotation = "batch.indexedjob.dev/job-index-ignored-failure-count"
	// AttemptAnnotation numbers the pods of one index 0, 1, 2…; it is the
	// last part of the pod's deterministic name, <job>-<index>-<attempt>.
	AttemptAnnotation = "batch.indexedjob.dev/attempt"
	// DiscardedAnnotation marks a pod whose tracking finalizer the controller
	// removed without counting its end (suspend, excess, success reached). It
	// is set in the same patch that removes the finalizer, so a later sync
	// never takes the pod's end for a failure of its index.
	DiscardedAnnotation = "batch.indexedjob.dev/discarded"
	// OOMKillsAnnotation carries, on every pod of a job with
	// retryResources.onOOMKilled, how many earlier pods of its index were
	// OOM-killed: its memory is the template's raised that many times. A
	// restarted operator continues from it, as from the failure counts.
	OOMKillsAnnotation = "batch.indexedjob.dev/oom-kills"
	// MemoryAnnotation records, on every pod of a job with
	// retryResources.onOOMKilled, the memory its containers got, as
	// <container>=<limit, or request without a limit>, comma-separated, for
	// the containers that have one; kubectl ibj indexes shows it.
	MemoryAnnotation = "batch.indexedjob.dev/memory"
	// QueueNameLabel is the job label that has Kueue queue and admit a job.
	// Kueue admits the template's memory requests; the pods of such a job
	// never request more than that, whatever retryResources says.
	QueueNameLabel = "kueue.x-k8s.io/queue-name"
	// TrackingFinalizer keeps a finished pod until its result is in the job's status.
	TrackingFinalizer = "batch.indexedjob.dev/tracking"
	// IndexRetryFinalizer keeps a failed pod whose failure is already
	// counted while it is the latest pod of an index still to be retried
	// (backoffLimitPerIndex): it carries the index's failure counts and the
	// time its backoff runs from, which a deleted pod would take with it.
	// Every pod of such a job is created with it, since no finalizer can be
	// added to a pod being deleted; it goes with the tracking finalizer,
	// or once the index's next pod exists, the index finished or the job
	// ended. The tracking finalizer, and with it the count, never waits for
	// a replacement (a create a quota or a policy refuses).
	IndexRetryFinalizer = "batch.indexedjob.dev/index-retry"
	// RestartAttemptLabel carries, on every pod of a job with a RestartJob
	// rule (spec.maxRestarts set), its generation: status.restarts when it
	// was created. The pods of one generation are one group; the pods of
	// an earlier one are ended by the restart and counted for nothing. As
	// JobSet's jobset.sigs.k8s.io/restart-attempt.
	RestartAttemptLabel = "batch.indexedjob.dev/restart-attempt"
	// FailureRecordLabel marks the ConfigMaps that hold a job's failure
	// record (each failed attempt of each index: node, container, exit
	// code or reason, rule, time), with the job's UID as its value. They
	// are named <job>-failures-<shard>, controlled by the job, and go with
	// it; `kubectl ibj describe`, `indexes` and `nodes` read them.
	FailureRecordLabel = "batch.indexedjob.dev/failure-record"
	// CompletionIndexEnvName is set in every container and init container.
	CompletionIndexEnvName = "JOB_COMPLETION_INDEX"
	// ControllerName is this operator's name as spec.managedBy spells it. A job
	// whose managedBy is set to anything else is left alone.
	ControllerName = "batch.indexedjob.dev/indexedbatchjob-controller"
)

// ReservedPodLabels are the labels the operator writes on every pod it
// creates. A pod template may not set them: the admission webhook refuses
// it, and the controller overwrites or drops them when the webhook is off.
var ReservedPodLabels = []string{CompletionIndexLabel, JobNameLabel, ControllerUIDLabel, RestartAttemptLabel}

// ReservedPodAnnotations are the annotations the operator writes on the
// pods it creates, or reads from them as its own record (attempts, failure
// counts, a pod let go without counting). A pod template may not set them,
// as ReservedPodLabels.
var ReservedPodAnnotations = []string{
	CompletionIndexLabel, AttemptAnnotation, IndexFailureCountAnnotation,
	IndexIgnoredFailureCountAnnotation, DiscardedAnnotation, OOMKillsAnnotation, MemoryAnnotation,
}

// Condition types. They are those of batch/v1 Job.
const (
	// ConditionSuspended is True while the job is suspended.
	ConditionSuspended = string(batchv1.JobSuspended)
	// ConditionComplete is True once the job succeeded and every pod is accounted for.
	ConditionComplete = string(batchv1.JobComplete)
	// ConditionFailed is True once the job failed and every pod is accounted for.
	ConditionFailed = string(batchv1.JobFailed)
	// ConditionFailureTarget is True as soon as the job is known to fail, while
	// its pods may still be terminating.
	ConditionFailureTarget = string(batchv1.JobFailureTarget)
	// ConditionSuccessCriteriaMet is True as soon as the job is known to
	// succeed, while its pods may still be terminating.
	ConditionSuccessCriteriaMet = string(batchv1.JobSuccessCriteriaMet)
)

// Condition reasons. They are those of batch/v1 Job.
const (
	ReasonBackoffLimitExceeded     = batchv1.JobReasonBackoffLimitExceeded
	ReasonDeadlineExceeded         = batchv1.JobReasonDeadlineExceeded
	ReasonFailedIndexes            = batchv1.JobReasonFailedIndexes
	ReasonMaxFailedIndexesExceeded = batchv1.JobReasonMaxFailedIndexesExceeded
	ReasonPodFailurePolicy         = batchv1.JobReasonPodFailurePolicy
	ReasonSuccessPolicy            = batchv1.JobReasonSuccessPolicy
	ReasonCompletionsReached       = batchv1.JobReasonCompletionsReached
	ReasonJobSuspended             = "JobSuspended"
	ReasonJobResumed               = "JobResumed"
	// ReasonMaxRestartsExceeded: a RestartJob rule matched a failure after
	// spec.maxRestarts restarts (JobSet's reason for the same end is
	// ReachedMaxRestarts).
	ReasonMaxRestartsExceeded = "MaxRestartsExceeded"
	// ReasonTerminatingTimeout is the reason of the DisruptionTarget
	// condition the operator writes on a pod still terminating past
	// spec.terminatingTimeoutSeconds.
	ReasonTerminatingTimeout = "TerminatingTimeout"
)

// Condition PeerDNSReady and its reasons, for a job with
// network.enableDNSHostnames. batch/v1 has no such condition.
const (
	// ConditionPeerDNSReady is True while the job's headless Service exists
	// and is controlled by the job, so that its pods' hostnames resolve;
	// False when the Service's name is taken by a Service the job does not
	// control, or the Service could not be created.
	ConditionPeerDNSReady = "PeerDNSReady"
	// ReasonServiceCreated: the operator created the headless Service (in
	// this or an earlier sync) and the job controls it.
	ReasonServiceCreated = "ServiceCreated"
	// ReasonServiceNameTaken: a Service of the wanted name exists and is not
	// controlled by this job; the operator leaves it unchanged.
	ReasonServiceNameTaken = "ServiceNameTaken"
	// ReasonServiceCreateFailed: the API server refused to create the
	// Service (for example a quota); the message is its answer.
	ReasonServiceCreateFailed = "ServiceCreateFailed"
)

// Condition PodGroupReady and its reasons, for a job with scheduling (or
// gangScheduling). batch/v1 has no such condition.
const (
	// ConditionPodGroupReady is True while the job's Workload and PodGroup
	// exist with the job's scheduling settings (and the gang's minCount),
	// so that kube-scheduler places its pods by them; False while they
	// cannot be created, and then the operator creates no pod.
	ConditionPodGroupReady = "PodGroupReady"
	// ReasonPodGroupCreated: the operator created the job's Workload and
	// PodGroup (in this or an earlier sync).
	ReasonPodGroupCreated = "PodGroupCreated"
	// ReasonWorkloadAPINotServed: the cluster does not serve
	// scheduling.k8s.io/v1beta1 Workloads and PodGroups (Kubernetes before
	// 1.37, or feature gate GenericWorkload or the API version off).
	ReasonWorkloadAPINotServed = "WorkloadAPINotServed"
	// ReasonPodGroupCreateFailed: the API server refused the Workload or
	// the PodGroup for another reason; the message is its answer.
	ReasonPodGroupCreateFailed = "PodGroupCreateFailed"
)

// Condition PodCreationFailed and its reasons. batch/v1 has no such
// condition (the Job controller only emits FailedCreate events); it is True
// while the API server refuses the pods the job needs, with the API
// server's message, and is removed once a sync's creates all succeed.
const (
	// ConditionPodCreationFailed is True while pod creates fail.
	ConditionPodCreationFailed = "PodCreationFailed"
	// ReasonQuotaExceeded: a ResourceQuota of the namespace has no room for
	// the pod; it runs once the quota frees.
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonPodForbidden: the API server forbade the pod for another reason
	// (Pod Security admission, a policy engine's webhook, RBAC).
	ReasonPodForbidden = "PodForbidden"
	// ReasonPodInvalid: the API server found the pod invalid (only a job
	// admitted without the operator's webhook can get there).
	ReasonPodInvalid = "PodInvalid"
	// ReasonFailedCreate: any other error (a timeout, an unavailable
	// webhook, a namespace being deleted).
	ReasonFailedCreate = "FailedCreate"
	// ReasonPodMutated: the API server created the pod, but admission (a
	// mutating webhook or policy) changed it in what the operator relies
	// on (a label, an annotation or a finalizer it writes, its controller
	// reference, or what it writes into the spec); the message names the
	// field. The pod was deleted, uncounted, and the job creates no pod
	// until a create comes back as asked for.
	ReasonPodMutated = "PodMutated"
)

// Condition PodsUnschedulable and its reason, for a job with nodeAvoidance
// Required. batch/v1 has no such condition.
const (
	// ConditionPodsUnschedulable is True while a pod of the job that avoids
	// nodes (spec.nodeAvoidance) cannot be scheduled: its message names
	// the index, the nodes it avoids and the scheduler's answer. It is
	// removed once no such pod is left unschedulable.
	ConditionPodsUnschedulable = "PodsUnschedulable"
	// ReasonAvoidedNodes: the scheduler finds no node for a pod once the
	// nodes it avoids are left out.
	ReasonAvoidedNodes = "AvoidedNodes"
)

// Condition FailureRecorded and its reason. It is set only while the
// failure record (FailureRecordLabel) cannot be written: False, with the
// API server's answer. The pods' results are counted all the same.
const (
	// ConditionFailureRecorded is False while the API server refuses the
	// job's failure record.
	ConditionFailureRecorded = "FailureRecorded"
	// ReasonFailureRecordRefused: the API server refused a ConfigMap of
	// the record (a quota, a policy, a name taken by another object).
	ReasonFailureRecordRefused = "FailureRecordRefused"
)

// Phase is a one-word summary of the conditions, for `kubectl get ibj`.
// While pod creates fail it is the reason of condition PodCreationFailed
// (as kubectl shows a pod's CrashLoopBackOff), never Running.
// So is the reason of condition PodGroupReady while it is False: the
// job's pods wait for their PodGroup.
// +kubebuilder:validation:Enum=Pending;Running;Suspended;Complete;Failed;QuotaExceeded;PodForbidden;PodInvalid;FailedCreate;PodMutated;WorkloadAPINotServed;PodGroupCreateFailed
type Phase string

// Phases of an IndexedBatchJob.
const (
	PhasePending   Phase = "Pending"
	PhaseRunning   Phase = "Running"
	PhaseSuspended Phase = "Suspended"
	PhaseComplete  Phase = "Complete"
	PhaseFailed    Phase = "Failed"
	// The phases of a job whose pod creates fail: the reason of condition
	// PodCreationFailed.
	PhaseQuotaExceeded Phase = ReasonQuotaExceeded
	PhasePodForbidden  Phase = ReasonPodForbidden
	PhasePodInvalid    Phase = ReasonPodInvalid
	PhaseFailedCreate  Phase = ReasonFailedCreate
	PhasePodMutated    Phase = ReasonPodMutated
	// The phases of a gang job whose PodGroup is missing: the reason of
	// condition PodGroupReady.
	PhaseWorkloadAPINotServed Phase = ReasonWorkloadAPINotServed
	PhasePodGroupCreateFailed Phase = ReasonPodGroupCreateFailed
)

// IndexedBatchJobSpec describes the pods to run, one per completion index, and
// how their failures are handled. Field names and meanings are those of
// batch/v1 JobSpec with completionMode Indexed.
//
// +kubebuilder:validation:XValidation:rule="!has(self.maxFailedIndexes) || has(self.backoffLimitPerIndex)",message="maxFailedIndexes can only be set together with backoffLimitPerIndex"
// +kubebuilder:validation:XValidation:rule="!has(self.maxFailedIndexes) || self.maxFailedIndexes <= self.completions",message="maxFailedIndexes must be less than or equal to completions"
// +kubebuilder:validation:XValidation:rule="!has(self.backoffLimitPerIndex) || self.completions <= 100000 || (has(self.maxFailedIndexes) && self.maxFailedIndexes <= 10000)",message="when completions is greater than 100000 and backoffLimitPerIndex is set, maxFailedIndexes must be set and at most 10000"
// +kubebuilder:validation:XValidation:rule="!has(self.backoffLimitPerIndex) || self.completions <= 100000 || (has(self.parallelism) && self.parallelism <= 10000)",message="when completions is greater than 100000 and backoffLimitPerIndex is set, parallelism must be set and at most 10000"
// +kubebuilder:validation:XValidation:rule="has(self.template.spec.restartPolicy) && self.template.spec.restartPolicy in ['Never', 'OnFailure']",message="template.spec.restartPolicy must be Never or OnFailure"
// +kubebuilder:validation:XValidation:rule="!has(self.podFailurePolicy) || (has(self.template.spec.restartPolicy) && self.template.spec.restartPolicy == 'Never')",message="template.spec.restartPolicy must be Never when podFailurePolicy is set"
// +kubebuilder:validation:XValidation:rule="!has(self.podFailurePolicy) || !has(self.podReplacementPolicy) || self.podReplacementPolicy == 'Failed'",message="podReplacementPolicy must be Failed when podFailurePolicy is set"
// +kubebuilder:validation:XValidation:rule="!has(self.terminatingTimeoutSeconds) || has(self.podFailurePolicy) || (has(self.podReplacementPolicy) && self.podReplacementPolicy == 'Failed')",message="terminatingTimeoutSeconds needs podReplacementPolicy Failed (the default with a podFailurePolicy): under TerminatingOrFailed a terminating pod is replaced at once"
// +kubebuilder:validation:XValidation:rule="!has(self.podFailurePolicy) || has(self.backoffLimitPerIndex) || self.podFailurePolicy.rules.all(r, r.action != 'FailIndex')",message="podFailurePolicy action FailIndex can only be used together with backoffLimitPerIndex"
// +kubebuilder:validation:XValidation:rule="has(self.maxRestarts) == (has(self.podFailurePolicy) && self.podFailurePolicy.rules.exists(r, r.action == 'RestartJob'))",message="maxRestarts must be set exactly when a podFailurePolicy rule's action is RestartJob: it bounds the restarts such rules make"
// +kubebuilder:validation:XValidation:rule="has(self.maxRestarts) == has(oldSelf.maxRestarts) && (!has(self.maxRestarts) || self.maxRestarts == oldSelf.maxRestarts)",message="maxRestarts is immutable"
// +kubebuilder:validation:XValidation:rule="!has(self.podFailurePolicy) || [self.template.spec.containers.map(c, c.name) + (has(self.template.spec.initContainers) ? self.template.spec.initContainers.map(c, c.name) : [])].all(names, self.podFailurePolicy.rules.all(r, !has(r.onExitCodes) || !has(r.onExitCodes.containerName) || r.onExitCodes.containerName in names))",message="podFailurePolicy onExitCodes.containerName must name a container or init container of the template"
// +kubebuilder:validation:XValidation:rule="!has(self.successPolicy) || self.successPolicy.rules.all(r, !has(r.succeededCount) || r.succeededCount <= self.completions)",message="successPolicy rules' succeededCount must be less than or equal to completions"
// +kubebuilder:validation:XValidation:rule="self.completions == oldSelf.completions || (has(self.parallelism) && self.parallelism == self.completions)",message="completions can only be modified in tandem with spec.parallelism"
// +kubebuilder:validation:XValidation:rule="has(self.indexes) == has(oldSelf.indexes) && (!has(self.indexes) || self.indexes == oldSelf.indexes)",message="indexes is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.managedBy) == has(oldSelf.managedBy) && (!has(self.managedBy) || self.managedBy == oldSelf.managedBy)",message="managedBy is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.network) == has(oldSelf.network) && (!has(self.network) || self.network == oldSelf.network)",message="network is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.podFailurePolicy) == has(oldSelf.podFailurePolicy) && (!has(self.podFailurePolicy) || self.podFailurePolicy == oldSelf.podFailurePolicy)",message="podFailurePolicy is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.successPolicy) == has(oldSelf.successPolicy) && (!has(self.successPolicy) || self.successPolicy == oldSelf.successPolicy)",message="successPolicy is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.backoffLimitPerIndex) == has(oldSelf.backoffLimitPerIndex) && (!has(self.backoffLimitPerIndex) || self.backoffLimitPerIndex == oldSelf.backoffLimitPerIndex)",message="backoffLimitPerIndex is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.podReplacementPolicy) == has(oldSelf.podReplacementPolicy) && (!has(self.podReplacementPolicy) || self.podReplacementPolicy == oldSelf.podReplacementPolicy)",message="podReplacementPolicy is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.gangScheduling) == has(oldSelf.gangScheduling) && (!has(self.gangScheduling) || self.gangScheduling == oldSelf.gangScheduling)",message="gangScheduling is immutable"
// +kubebuilder:validation:XValidation:rule="!has(self.gangScheduling) || !has(self.gangScheduling.minCount) || !has(self.parallelism) || self.gangScheduling.minCount <= self.parallelism",message="gangScheduling.minCount must be less than or equal to parallelism: the gang is the pods that run at once"
// +kubebuilder:validation:XValidation:rule="!has(self.gangScheduling) || !has(self.gangScheduling.minCount) || self.gangScheduling.minCount <= self.completions",message="gangScheduling.minCount must be less than or equal to completions"
// +kubebuilder:validation:XValidation:rule="!has(self.gangScheduling) || !has(self.template.spec.schedulingGroup)",message="template.spec.schedulingGroup must be unset when gangScheduling is set: the operator points the pods at the job's own PodGroup"
// +kubebuilder:validation:XValidation:rule="!has(self.scheduling) || has(oldSelf.scheduling)",message="field cannot be set once created",fieldPath=".scheduling"
// +kubebuilder:validation:XValidation:rule="has(self.scheduling) || !has(oldSelf.scheduling)",message="field cannot be cleared once set",fieldPath=".scheduling"
// +kubebuilder:validation:XValidation:rule="!has(self.scheduling) || !has(self.gangScheduling)",message="must not be set together with scheduling: gangScheduling is deprecated, set scheduling.schedulingPolicy.gang.minCount instead",fieldPath=".gangScheduling"
// +kubebuilder:validation:XValidation:rule="!has(self.scheduling) || !has(self.template.spec.schedulingGroup)",message="must not be set together with template.spec.schedulingGroup",fieldPath=".scheduling"
// +kubebuilder:validation:XValidation:rule="!has(self.scheduling) || !has(self.scheduling.schedulingPolicy) || !has(self.scheduling.schedulingPolicy.gang) || !has(self.scheduling.schedulingPolicy.gang.minCount) || self.scheduling.schedulingPolicy.gang.minCount <= (has(self.parallelism) ? self.parallelism : 1)",message="must not be greater than parallelism",fieldPath=".scheduling.schedulingPolicy.gang.minCount"
type IndexedBatchJobSpec struct {
	// parallelism is the most pods that run at once. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	Parallelism *int32 `json:"parallelism,omitempty"`

	// completions is the number of indexes, 0 to completions-1; each must
	// succeed once. It may change only together with parallelism, to the same
	// value (an elastic job, as upstream's): scaling down removes the pods of
	// the indexes that no longer exist without counting them as failures and
	// drops those indexes from completedIndexes and failedIndexes; scaling up
	// starts the new indexes.
	// +required
	// +kubebuilder:validation:Minimum=0
	Completions int32 `json:"completions"`

	// activeDeadlineSeconds bounds, from status.startTime, how long the job may
	// run before it fails with reason DeadlineExceeded.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// backoffLimit is the number of failed pods beyond which the job fails with
	// reason BackoffLimitExceeded. Defaults to 6, or to unlimited when
	// backoffLimitPerIndex is set. The default is applied by the controller,
	// since a CRD default cannot depend on another field.
	// +optional
	// +kubebuilder:validation:Minimum=0
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`

	// backoffLimitPerIndex is the number of retries of each index; an index
	// whose failures exceed it is marked failed and never retried. Immutable.
	// +optional
	// +kubebuilder:validation:Minimum=0
	BackoffLimitPerIndex *int32 `json:"backoffLimitPerIndex,omitempty"`

	// maxFailedIndexes is the number of failed indexes beyond which the job
	// fails at once with reason MaxFailedIndexesExceeded. Needs
	// backoffLimitPerIndex.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	MaxFailedIndexes *int32 `json:"maxFailedIndexes,omitempty"`

	// podFailurePolicy decides, by ordered rules matching exit codes or pod
	// conditions, how a failed pod is handled: batch/v1's, whose rules may
	// also have a name and a retry delay. Immutable.
	// +optional
	PodFailurePolicy *PodFailurePolicy `json:"podFailurePolicy,omitempty"`

	// maxRestarts is how many times a podFailurePolicy RestartJob rule may
	// restart the job's pods together (status.restarts counts them). A
	// failure a RestartJob rule matches after that many restarts fails the
	// job with reason MaxRestartsExceeded; 0 makes the first one fail it.
	// Set exactly when a rule's action is RestartJob. As JobSet's
	// failurePolicy.maxRestarts.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	MaxRestarts *int32 `json:"maxRestarts,omitempty"`

	// successPolicy lets the job succeed before every index has. Immutable.
	// +optional
	SuccessPolicy *batchv1.SuccessPolicy `json:"successPolicy,omitempty"`

	// podReplacementPolicy says when a replacement pod is created:
	// TerminatingOrFailed (as soon as the old pod is terminating) or Failed
	// (only once it reached phase Failed). Defaults to TerminatingOrFailed,
	// or to Failed when podFailurePolicy is set. Immutable.
	// +optional
	// +kubebuilder:validation:Enum=TerminatingOrFailed;Failed
	PodReplacementPolicy *batchv1.PodReplacementPolicy `json:"podReplacementPolicy,omitempty"`

	// terminatingTimeoutSeconds, when set, treats a pod of this job that is
	// still terminating this many seconds after its deletion deadline (the
	// time by which its kubelet should have stopped it: metadata.
	// deletionTimestamp) as failed. Such a pod is one whose kubelet does not
	// answer, typically on a node the cluster lost: the node lifecycle
	// controller's taint eviction deletes it, but no kubelet confirms the
	// end, and under podReplacementPolicy Failed its index would never run
	// again until someone deletes the node or taints it out of service. The
	// operator writes the pod's status as pod garbage collection does for a
	// pod on an out-of-service node (phase Failed, and condition
	// DisruptionTarget with reason TerminatingTimeout unless the taint
	// eviction gave it one already), which counts as any such failure (a podFailurePolicy rule on DisruptionTarget matches it),
	// and the index is replaced on another node. Off when unset, as upstream.
	//
	// Risk: a node that is only partitioned, not dead, may still run the
	// pod's containers when its replacement starts, so for a while two pods
	// of the index may run (a split brain) until the node is back and its
	// kubelet stops the pod it finds Failed. Set it only for workloads that
	// tolerate that, or with a fencing mechanism of your own. Needs
	// podReplacementPolicy Failed (the default with a podFailurePolicy).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	TerminatingTimeoutSeconds *int32 `json:"terminatingTimeoutSeconds,omitempty"`

	// ttlSecondsAfterFinished deletes the job and its pods that many seconds
	// after it completed or failed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// suspend deletes the active pods and stops creating new ones while true.
	// +optional
	// +kubebuilder:default=false
	Suspend *bool `json:"suspend,omitempty"`

	// template is the pod to run for each index. Immutable, except while the
	// job is suspended: then its scheduling directives (labels, annotations,
	// node selector, affinity, tolerations, scheduling gates) and its
	// containers' and init containers' resources may change, as a queueing
	// system such as Kueue needs (the containers themselves, their names and
	// order, and every other field stay).
	// +required
	Template corev1.PodTemplateSpec `json:"template"`

	// managedBy names the controller that reconciles this job. Left empty or
	// set to "batch.indexedjob.dev/indexedbatchjob-controller", this operator
	// does; any other value (for example Kueue's MultiKueue) makes it leave the
	// job alone. Immutable.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$')",message="managedBy must be a domain-prefixed path such as example.com/my-controller"
	ManagedBy *string `json:"managedBy,omitempty"`

	// indexes limits the job to these completion indexes, written as
	// status.completedIndexes is: increasing, comma-separated indexes and
	// ranges such as "1,2,5-7", each below completions. Unset, every index 0
	// to completions-1 runs. A listed index keeps its number
	// (JOB_COMPLETION_INDEX, the pod hostname); the job succeeds once every
	// listed index succeeded (or its successPolicy is met), fails with
	// FailedIndexes once every listed index finished and some failed, and
	// maxFailedIndexes counts failed indexes among them. It is how the failed
	// indexes of an earlier job are rerun. Immutable.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=16384
	Indexes *string `json:"indexes,omitempty"`

	// retryBackoff sets the delay before a failed pod is replaced: the first
	// replacement waits initialDelaySeconds, each further one twice as long as
	// the one before, never more than maxDelaySeconds. Unset fields take the
	// operator's defaults (--pod-failure-backoff and --pod-failure-backoff-max,
	// 10 s and 10 min unless changed, as the built-in Job controller). A
	// failure an Ignore rule matched is retried at once and grows no delay;
	// a podFailurePolicy rule's retryDelaySeconds replaces the delay after
	// the failures it matched; createRefusedDelaySeconds is the wait after a
	// refused pod create.
	// +optional
	RetryBackoff *RetryBackoff `json:"retryBackoff,omitempty"`

	// retryResources raises the resources of an index's next pod after its
	// pod failed in a way more resources may cure. Unset, every pod gets the
	// template's resources.
	// +optional
	RetryResources *RetryResources `json:"retryResources,omitempty"`

	// network gives the pods stable DNS names through a headless Service
	// the operator creates for the job (peer DNS, as JobSet's spec.network).
	// Unset, the operator creates no Service and the pods get the template's
	// subdomain. Immutable.
	// +optional
	Network *Network `json:"network,omitempty"`

	// gangScheduling is deprecated: scheduling.schedulingPolicy.gang is
	// the same gang with batch/v1 Job's shape, and the two may not both be
	// set. It has kube-scheduler place the job's pods all or none, as
	// scheduling: {schedulingPolicy: {gang: {minCount: N}}} does, but
	// minCount cannot change. Immutable.
	// +optional
	GangScheduling *GangScheduling `json:"gangScheduling,omitempty"`

	// scheduling is the workload-aware scheduling of the job's pods, as
	// batch/v1 Job's spec.scheduling: a policy (basic, or gang: all or
	// none), topology constraints, a disruption mode and ResourceClaims
	// the pods share. When set, the operator creates a Workload and a
	// PodGroup (scheduling.k8s.io/v1beta1, Kubernetes 1.37 with feature
	// gate GenericWorkload) for the job, controlled by it, carrying these
	// settings, and points every pod at the PodGroup
	// (spec.schedulingGroup); kube-scheduler places the pods by it.
	// Condition PodGroupReady reports the PodGroup; where the cluster does
	// not serve the Workload API, it is False with reason
	// WorkloadAPINotServed and the operator creates no pod (it asks again
	// every 30 seconds). Unset, the pods are scheduled one by one. It may
	// not be set or cleared after creation, and only
	// schedulingPolicy.gang.minCount may change.
	// +optional
	Scheduling *JobSchedulingConfiguration `json:"scheduling,omitempty"`

	// nodeAvoidance keeps the job's pods away from the nodes where its pods
	// failed: an index's next pod avoids the nodes where that index failed,
	// and, with failedIndexesPerNode, every later pod of the job avoids a
	// node where that many of its indexes failed. A failure counts against
	// its node unless an Ignore rule matched it or the pod had the
	// DisruptionTarget condition (an eviction, a preemption, a node drained
	// or lost: the cluster ended it, not the node's fault). The operator
	// writes the avoided nodes into each new pod's node affinity, as a
	// match on metadata.name, at most 32 of them: the index's most recent
	// first, then the job's. Unset, pods go wherever the scheduler puts
	// them, as with batch/v1. Which nodes failed which indexes is in the
	// job's failure record (`kubectl ibj nodes`) whether or not this is set.
	// May be changed at any time; it applies to the pods created after.
	// +optional
	NodeAvoidance *NodeAvoidance `json:"nodeAvoidance,omitempty"`
}

// NodeAvoidanceMode says how strictly a pod avoids a node.
// +kubebuilder:validation:Enum=Preferred;Required
type NodeAvoidanceMode string

const (
	// NodeAvoidancePreferred adds a preferred scheduling term (weight 100)
	// against the avoided nodes: the scheduler places the pod elsewhere
	// when another node fits, and on an avoided node when none does.
	NodeAvoidancePreferred NodeAvoidanceMode = "Preferred"
	// NodeAvoidanceRequired adds the avoided nodes to every required node
	// selector term: the pod never runs on them. A pod left with no node
	// stays Pending, and condition PodsUnschedulable says so with the
	// scheduler's message.
	NodeAvoidanceRequired NodeAvoidanceMode = "Required"
)

// NodeAvoidance says which nodes the job's pods avoid, and how.
type NodeAvoidance struct {
	// mode is Preferred (the default: a scheduling preference) or Required
	// (a constraint). Required is refused with a template that names its
	// node (nodeName), pins its nodes by name or hostname to no more nodes
	// than an index may fail on, places its pods through Kueue's
	// topology-aware scheduling, or with a gang (scheduling's gang policy
	// or gangScheduling): each of those can leave a retry with no node at
	// all.
	// +optional
	// +kubebuilder:default=Preferred
	Mode NodeAvoidanceMode `json:"mode,omitempty"`

	// failedIndexesPerNode makes a node where this many distinct indexes of
	// the job failed avoided by every later pod of the job, and not only by
	// those indexes' retries. An event (NodeAvoided) says when a node first
	// is. Unset, each index avoids only the nodes where it failed. 1 to
	// 100000.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	FailedIndexesPerNode *int32 `json:"failedIndexesPerNode,omitempty"`
}

// GangScheduling is the size of the job's gang: how many of its pods the
// scheduler must be able to place at once before it binds any. It is
// deprecated in favour of spec.scheduling.schedulingPolicy.gang.
type GangScheduling struct {
	// minCount is the gang's size. Defaults to parallelism. At most
	// parallelism and at most completions. Once fewer of the job's indexes
	// are left unfinished, the operator lowers the PodGroup's minCount to
	// their number, so that the last pods of the job are not held waiting
	// for a gang that can no longer form.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MinCount *int32 `json:"minCount,omitempty"`
}

// Network is the job's peer DNS: a headless Service that makes the pod of
// index i reachable as <job>-<i>.<subdomain> within the namespace (and as
// <job>-<i>.<subdomain>.<namespace>.svc from anywhere in the cluster).
//
// +kubebuilder:validation:XValidation:rule="!has(self.subdomain) || (has(self.enableDNSHostnames) && self.enableDNSHostnames)",message="network.subdomain can only be set when network.enableDNSHostnames is true"
type Network struct {
	// enableDNSHostnames, when true, makes the operator create a headless
	// Service named subdomain in the job's namespace: clusterIP None,
	// selecting only this job's pods (by their
	// batch.indexedjob.dev/controller-uid label), publishing the addresses
	// of pods that are not Ready yet (so that workers can find each other
	// while they start), and controlled by the job, so that it is deleted
	// with the job by the garbage collector. Every pod's spec.subdomain is
	// set to the Service's name; its hostname is <job>-<index> as always.
	// If a Service of that name exists and the job does not control it, the
	// operator never changes or adopts it: it reports it in condition
	// PeerDNSReady (False, reason ServiceNameTaken) and a Warning event,
	// checks again every 30 seconds, and runs the pods all the same (as
	// JobSet does), since such a Service may be one the user made for them.
	// The operator does not undo changes made to its Service; it recreates
	// the Service if it is deleted while the job runs. Defaults to false.
	// +optional
	EnableDNSHostnames *bool `json:"enableDNSHostnames,omitempty"`

	// subdomain is the name of the headless Service, and so the pods' DNS
	// subdomain. It must be a DNS-1035 label, as every Service name: at most
	// 63 lowercase letters, digits and '-', starting with a letter. Only
	// with enableDNSHostnames. Defaults to the job's name (which must then
	// start with a letter).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="network.subdomain must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter and ending with a letter or digit"
	Subdomain *string `json:"subdomain,omitempty"`
}

// RetryBackoff is the exponential delay before a failed pod is replaced,
// and the wait after a refused pod create. Without backoffLimitPerIndex the
// exponential delay counts the job's failures since its last success; with
// it, each index's own failures. Failures an Ignore rule of the
// podFailurePolicy matched are never counted, and a Count or Ignore rule's
// retryDelaySeconds replaces the delay after the failures it matched.
//
// +kubebuilder:validation:XValidation:rule="!has(self.initialDelaySeconds) || !has(self.maxDelaySeconds) || self.initialDelaySeconds <= self.maxDelaySeconds",message="retryBackoff.initialDelaySeconds must be less than or equal to maxDelaySeconds"
type RetryBackoff struct {
	// initialDelaySeconds is the delay before the first replacement of a
	// failed pod. 0 replaces failed pods at once (for workloads whose failures
	// are not transient infrastructure ones). Defaults to the operator's
	// --pod-failure-backoff (10 s unless changed).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	InitialDelaySeconds *int32 `json:"initialDelaySeconds,omitempty"`

	// maxDelaySeconds caps the delay. Defaults to the operator's
	// --pod-failure-backoff-max (10 min unless changed).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	MaxDelaySeconds *int32 `json:"maxDelaySeconds,omitempty"`

	// createRefusedDelaySeconds is how long the operator waits, after the
	// API server refused one of the job's pod creates (a full
	// ResourceQuota, Pod Security admission, a policy webhook: condition
	// PodCreationFailed says which), before it tries to create the job's
	// pods again. Failed pods, the job's end and its status are handled as
	// usual meanwhile. Unset, a refused create is retried with the
	// operator's retry of a failed sync: 5 ms, doubling on each refusal up
	// to 60 s, and at once on any change of the job or its pods. The wait
	// is kept in the operator's memory: a restarted operator tries once at
	// once. 1 to 3600 (an hour; Kueue, not a longer wait, is the tool to
	// queue a job for quota). A create that admission changed in what the
	// operator relies on (reason PodMutated) waits this long too, but at
	// least a minute over parallelism+1; unset, it waits 10 s doubling to
	// 60 s.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	CreateRefusedDelaySeconds *int32 `json:"createRefusedDelaySeconds,omitempty"`
}

// RetryResources says how an index's next pod's resources grow after a
// failure of a given kind.
type RetryResources struct {
	// onOOMKilled raises the memory of an index's next pod after its latest
	// pod failed with a container OOM-killed (a container, or init
	// container, terminated with reason OOMKilled): each memory request and
	// limit of the template's containers and init containers is multiplied
	// by factorPercent/100 once per OOM kill of the index so far, each step
	// rounded up to a whole Mi, and capped at maxMemory. Containers with
	// neither a memory request nor a limit are left as they are. Other
	// indexes keep the template's resources; a pod of the index that fails
	// another way passes its memory on unchanged. For a job labelled
	// kueue.x-k8s.io/queue-name, requests stay at the template's (what Kueue
	// admitted) and only limits grow; an event says when that held an
	// increase back.
	// +optional
	OnOOMKilled *OOMKilledResources `json:"onOOMKilled,omitempty"`
}

// OOMKilledResources is how memory grows after an OOM kill.
//
// +kubebuilder:validation:XValidation:rule="quantity(string(self.maxMemory)).isGreaterThan(quantity('0'))",message="retryResources.onOOMKilled.maxMemory must be greater than 0"
// +kubebuilder:validation:XValidation:rule="quantity(string(self.maxMemory)).compareTo(quantity('64Ti')) <= 0",message="retryResources.onOOMKilled.maxMemory must be at most 64Ti"
type OOMKilledResources struct {
	// factorPercent multiplies the memory of the next pod of an OOM-killed
	// index, in percent: 150 gives it 1.5 times its last pod's memory. An
	// integer percent, as the Kubernetes API writes its ratios
	// (averageUtilization, maxUnavailable), so that it needs no float
	// or decimal parsing and round-trips exactly. 101 to 1000.
	// +required
	// +kubebuilder:validation:Minimum=101
	// +kubebuilder:validation:Maximum=1000
	FactorPercent int32 `json:"factorPercent"`

	// maxMemory caps each container's raised memory request and limit. It
	// must be at least every memory request and limit of the template (the
	// admission webhook refuses a job otherwise), at most 64Ti.
	// +required
	MaxMemory resource.Quantity `json:"maxMemory"`
}

// IndexedBatchJobStatus is the observed state of an IndexedBatchJob. Field
// names and meanings are those of batch/v1 JobStatus.
type IndexedBatchJobStatus struct {
	// observedGeneration is the spec generation this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase summarises the conditions for `kubectl get`: Pending, Running,
	// Suspended, Complete or Failed; or, while pod creates fail, the reason
	// of condition PodCreationFailed (QuotaExceeded, PodForbidden,
	// PodInvalid, FailedCreate); or, while a gang job's PodGroup is
	// missing, the reason of condition PodGroupReady (WorkloadAPINotServed,
	// PodGroupCreateFailed). Tools should read the conditions.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// conditions: Suspended, SuccessCriteriaMet, FailureTarget, Complete,
	// Failed; PodCreationFailed while the API server refuses the job's pods;
	// PeerDNSReady for a job with network.enableDNSHostnames; and
	// PodGroupReady for a job with scheduling or gangScheduling.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// startTime is when the job started running: cleared when the job is
	// suspended, set again when it resumes.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime is when the job completed; set only with condition Complete.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// active is the number of pending or running pods that are not terminating.
	// +optional
	Active int32 `json:"active"`

	// ready is the number of active pods with condition Ready.
	// +optional
	Ready *int32 `json:"ready,omitempty"`

	// terminating is the number of pods that are terminating (have a deletion
	// timestamp) and have not yet reached phase Failed or Succeeded.
	// +optional
	Terminating *int32 `json:"terminating,omitempty"`

	// succeeded is the number of pods that reached phase Succeeded.
	// +optional
	Succeeded int32 `json:"succeeded"`

	// failed is the number of pods that reached phase Failed, or were deleted
	// before finishing, and counted as failures.
	// +optional
	Failed int32 `json:"failed"`

	// completedIndexes lists the succeeded indexes as sorted, compressed
	// intervals, such as "0,3-7".
	// +optional
	CompletedIndexes string `json:"completedIndexes,omitempty"`

	// failedIndexes lists, when backoffLimitPerIndex is set, the indexes that
	// failed for good, as sorted, compressed intervals. Empty when none has.
	// +optional
	FailedIndexes *string `json:"failedIndexes,omitempty"`

	// uncountedTerminatedPods lists the UIDs of finished pods whose result is
	// recorded (and already in completedIndexes/failedIndexes) but not yet
	// added to succeeded/failed: that happens once their tracking finalizer
	// is gone. It is the durable record that keeps the counts exact across
	// controller restarts, as in batch/v1.
	// +optional
	UncountedTerminatedPods *batchv1.UncountedTerminatedPods `json:"uncountedTerminatedPods,omitempty"`

	// restarts is how many times a podFailurePolicy RestartJob rule
	// restarted the job's pods together. Every pod carries the number of
	// restarts made before it was created in its label
	// batch.indexedjob.dev/restart-attempt (its generation); a pod of an
	// earlier generation is one the restart ends, and its end counts for
	// nothing. Not in batch/v1: JobSet's status.restarts.
	// +optional
	Restarts int32 `json:"restarts,omitempty"`
}

// IndexedBatchJob runs a fixed number of indexed pods to completion, with
// batch/v1 Job's failure handling: pod replacement policy, backoff limit per
// index, pod failure policy and success policy.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ibj,categories=all
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.phase`,description="Pending, Running, Suspended, Complete, Failed, or why pods cannot be created (QuotaExceeded, PodForbidden, PodInvalid, FailedCreate, WorkloadAPINotServed, PodGroupCreateFailed)"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Failed")].reason`,description="Why the job failed"
// +kubebuilder:printcolumn:name="Succeeded",type=integer,JSONPath=`.status.succeeded`,description="Succeeded pods"
// +kubebuilder:printcolumn:name="Completions",type=integer,JSONPath=`.spec.completions`,description="Indexes to complete"
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.active`,description="Running or pending pods"
// +kubebuilder:printcolumn:name="Restarts",type=integer,JSONPath=`.status.restarts`,description="Times a RestartJob rule restarted the pods together",priority=1
// +kubebuilder:printcolumn:name="Failed-Indexes",type=string,JSONPath=`.status.failedIndexes`,description="Indexes that failed for good"
// +kubebuilder:printcolumn:name="Started",type=date,JSONPath=`.status.startTime`,description="Time since the job started"
// +kubebuilder:printcolumn:name="Finished",type=date,JSONPath=`.status.completionTime`,description="Time since the job completed",priority=1
// +kubebuilder:printcolumn:name="Completed-Indexes",type=string,JSONPath=`.status.completedIndexes`,description="Indexes that succeeded",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label (lowercase letters, digits and '-'), since it prefixes the pods' hostnames"
// +kubebuilder:validation:XValidation:rule="self.spec.completions == 0 || size(self.metadata.name) + 1 + size(string(self.spec.completions - 1)) <= 63",message="metadata.name is too long: the pod hostname <name>-<completions-1> must be at most 63 characters"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.network) || !has(self.spec.network.enableDNSHostnames) || !self.spec.network.enableDNSHostnames || has(self.spec.network.subdomain) || self.metadata.name.matches('^[a-z]')",message="metadata.name must start with a letter when network.enableDNSHostnames is true and network.subdomain is unset: the name is then the headless Service's, which must be a DNS-1035 label; or set network.subdomain"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.network) || !has(self.spec.network.enableDNSHostnames) || !self.spec.network.enableDNSHostnames || !has(self.spec.template.spec.subdomain) || size(self.spec.template.spec.subdomain) == 0 || self.spec.template.spec.subdomain == (has(self.spec.network.subdomain) ? self.spec.network.subdomain : self.metadata.name)",message="template.spec.subdomain must be unset or equal to the headless Service's name (network.subdomain, or metadata.name when that is unset) when network.enableDNSHostnames is true"
type IndexedBatchJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired behaviour of the job.
	// +required
	Spec IndexedBatchJobSpec `json:"spec"`

	// status is the observed state of the job.
	// +optional
	Status IndexedBatchJobStatus `json:"status,omitempty"`
}

// IndexedBatchJobList is a list of IndexedBatchJob.
//
// +kubebuilder:object:root=true
type IndexedBatchJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IndexedBatchJob `json:"items"`
}

func init() {
	SchemeBuilder.Register(&IndexedBatchJob{}, &IndexedBatchJobList{})
}
