// Package kueue is the Kueue integration of IndexedBatchJob, written
// against Kueue's external-framework contract: Job adapts an
// IndexedBatchJob to Kueue's jobframework.GenericJob, Setup runs Kueue's
// generic job reconciler for it inside the operator's running manager once
// Kueue's API is served (never stopping the manager when it fails), and
// Integration.Defaulter is the part of Kueue's job webhook the operator's
// defaulting webhook applies. This is the one package of the operator that
// imports Kueue, so that a new Kueue release changes nothing outside it.
package kueue

import (
	"context"
	"fmt"
	"strconv"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/controller/jobframework"
	"sigs.k8s.io/kueue/pkg/features"
	"sigs.k8s.io/kueue/pkg/podset"
	clientutil "sigs.k8s.io/kueue/pkg/util/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
)

// FrameworkName is how Kueue's configuration names this integration, in
// integrations.externalFrameworks: Kind.version.group.
const FrameworkName = "IndexedBatchJob.v1alpha1.batch.indexedjob.dev"

// Annotations a user sets on a job, with the meaning batch/v1 Job's have in
// Kueue.
const (
	// MinParallelismAnnotation allows partial admission: Kueue may admit
	// the job with a parallelism as low as this when the quota for the full
	// parallelism is not free.
	MinParallelismAnnotation = "kueue.x-k8s.io/job-min-parallelism"
	// stoppingAnnotation marks a job Kueue is stopping: it is set together
	// with suspend and removed once the template is restored, so that a stop
	// interrupted between its two writes is finished by the next reconcile
	// (the job does not count as suspended until then).
	stoppingAnnotation = "kueue.x-k8s.io/stopping"
	// stoppingValue is stoppingAnnotation's value while the job stops.
	stoppingValue = "true"
)

// GVK is IndexedBatchJob's kind.
var GVK = ibjv1.GroupVersion.WithKind("IndexedBatchJob")

// Job is an IndexedBatchJob as Kueue's jobframework sees it.
type Job ibjv1.IndexedBatchJob

var (
	_ jobframework.GenericJob              = (*Job)(nil)
	_ jobframework.JobWithReclaimablePods  = (*Job)(nil)
	_ jobframework.JobWithCustomStop       = (*Job)(nil)
	_ jobframework.JobWithManagedBy        = (*Job)(nil)
	_ jobframework.JobWithPriorityClass    = (*Job)(nil)
	_ jobframework.JobWithPodLabelSelector = (*Job)(nil)
)

// NewJob returns an empty Job for the generic reconciler to load into.
func NewJob() jobframework.GenericJob { return &Job{} }

// Object returns the IndexedBatchJob.
func (j *Job) Object() client.Object { return (*ibjv1.IndexedBatchJob)(j) }

// GVK returns IndexedBatchJob's kind.
func (j *Job) GVK() schema.GroupVersionKind { return GVK }

// IsSuspended is true once spec.suspend is and a stop in progress is done.
func (j *Job) IsSuspended() bool {
	return ptr.Deref(j.Spec.Suspend, false) && j.Annotations[stoppingAnnotation] != stoppingValue
}

// Suspend sets spec.suspend.
func (j *Job) Suspend() { j.Spec.Suspend = ptr.To(true) }

// IsActive is true while the job has pods that run or terminate: Kueue
// keeps the quota of an evicted job until it is false, so that the next
// admitted job never overlaps the pods of this one. A job MultiKueue
// dispatched runs its pods on a worker cluster, which MultiKueue stops
// itself: once suspended here it is not active, whatever the status last
// mirrored from the worker says (a worker that can no longer be reached
// never updates it, and the job would wait for it forever instead of being
// dispatched again).
func (j *Job) IsActive() bool {
	if ptr.Deref(j.Spec.ManagedBy, "") == kueuev1beta2.MultiKueueControllerName && ptr.Deref(j.Spec.Suspend, false) {
		return false
	}
	return j.Status.Active != 0 || ptr.Deref(j.Status.Terminating, 0) != 0
}

// Finished reports whether condition Complete or Failed is True.
func (j *Job) Finished(context.Context) (message string, success, finished bool) {
	for _, t := range []string{ibjv1.ConditionComplete, ibjv1.ConditionFailed} {
		if c := apimeta.FindStatusCondition(j.Status.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			return c.Message, t == ibjv1.ConditionComplete, true
		}
	}
	return "", true, false
}

// PodSets is the one pod set of the job: its template, for as many pods as
// run at once, and, while Kueue's TopologyAwareScheduling gate is on (by
// default since Kueue v0.14), the topology request of the template's
// kueue.x-k8s.io/podset-*-topology annotations, as Kueue's batch/v1 Job
// makes it. The completion index label is the request's pod index label:
// Kueue's TopologyUngater then gives index i the domain of rank i, so
// neighbouring indexes are placed close together; a pod whose index is not
// below the pod set's count (an index of a job with more completions than
// parallelism, or of spec.indexes) makes it place the pods greedily
// instead, as for a batch/v1 Job.
func (j *Job) PodSets(context.Context, client.Client) ([]kueuev1beta2.PodSet, error) {
	podSet := kueuev1beta2.PodSet{
		Name:     kueuev1beta2.DefaultPodSetName,
		Template: *j.Spec.Template.DeepCopy(),
		Count:    j.podsCount(),
		MinCount: j.minPodsCount(),
	}
	if features.Enabled(features.TopologyAwareScheduling) {
		request, err := jobframework.NewPodSetTopologyRequest(&j.Spec.Template.ObjectMeta).
			PodIndexLabel(ptr.To(ibjv1.CompletionIndexLabel)).Build()
		if err != nil {
			return nil, err
		}
		podSet.TopologyRequest = request
	}
	return []kueuev1beta2.PodSet{podSet}, nil
}

// PodsReady reports whether as many pods are ready, or indexes finished,
// as the job runs at once. Kueue's waitForPodsReady evicts a job that stays
// short of it past its timeout. An index that failed for good counts as
// finished (batch/v1 Job's count, its succeeded pods, would leave a job
// with such an index short of it to the end, and evicted).
func (j *Job) PodsReady(context.Context, client.Client) bool {
	return ptr.Deref(j.Status.Ready, 0)+int32(j.finishedIndexes()) >= j.podsCount()
}

// PodLabelSelector selects the job's pods.
func (j *Job) PodLabelSelector() string {
	return labels.SelectorFromSet(labels.Set{ibjv1.ControllerUIDLabel: string(j.UID)}).String()
}

// PriorityClass is the template's priority class, which Kueue takes as the
// workload's priority unless the job names a WorkloadPriorityClass.
func (j *Job) PriorityClass() string { return j.Spec.Template.Spec.PriorityClassName }

// RunWithPodSetsInfo unsuspends the job with what admission assigned merged
// into its template (the flavor's node selector, tolerations, labels,
// annotations and scheduling gates), and, when the job allows partial
// admission, the admitted parallelism.
func (j *Job) RunWithPodSetsInfo(ctx context.Context, _ client.Client, infos []podset.PodSetInfo) error {
	if len(infos) != 1 {
		return podset.BadPodSetsInfoLenError(1, len(infos))
	}
	j.Spec.Suspend = ptr.To(false)
	info := infos[0]
	if j.minPodsCount() != nil {
		j.Spec.Parallelism = ptr.To(info.Count)
	}
	return podset.Merge(ctrl.LoggerFrom(ctx), &j.Spec.Template.ObjectMeta, &j.Spec.Template.Spec, info)
}

// RestorePodSetsInfo gives the template back what it had before admission,
// and the parallelism the user asked for; it reports whether anything
// changed.
func (j *Job) RestorePodSetsInfo(_ context.Context, infos []podset.PodSetInfo) bool {
	if len(infos) != 1 {
		return false
	}
	changed := false
	if j.minPodsCount() != nil && ptr.Deref(j.Spec.Parallelism, 1) != infos[0].Count {
		j.Spec.Parallelism = ptr.To(infos[0].Count)
		changed = true
	}
	return podset.RestorePodSpec(&j.Spec.Template.ObjectMeta, &j.Spec.Template.Spec, infos[0]) || changed
}

// Stop suspends the job, then restores its template, in two writes: the
// CRD lets the template's scheduling directives change only while the job
// is suspended, so the suspend must be stored first. The operator deletes
// the job's pods without counting them as failures and clears startTime
// once it sees the suspend.
func (j *Job) Stop(ctx context.Context, c client.Client, infos []podset.PodSetInfo, _ jobframework.StopReason, _ string) (bool, error) {
	stoppedNow := false
	if !ptr.Deref(j.Spec.Suspend, false) {
		if err := clientutil.Patch(ctx, c, j.Object(), func() (bool, error) {
			j.Suspend()
			if j.Annotations == nil {
				j.Annotations = map[string]string{}
			}
			j.Annotations[stoppingAnnotation] = stoppingValue
			return true, nil
		}); err != nil {
			return false, fmt.Errorf("suspend: %w", err)
		}
		stoppedNow = true
	}
	if probe := (*Job)(j.Object().DeepCopyObject().(*ibjv1.IndexedBatchJob)); !probe.RestorePodSetsInfo(ctx, infos) &&
		j.Annotations[stoppingAnnotation] != stoppingValue {
		return stoppedNow, nil
	}
	if err := clientutil.Patch(ctx, c, j.Object(), func() (bool, error) {
		j.RestorePodSetsInfo(ctx, infos)
		delete(j.Annotations, stoppingAnnotation)
		return true, nil
	}); err != nil {
		return stoppedNow, fmt.Errorf("restore pod set info: %w", err)
	}
	return stoppedNow, nil
}

// ReclaimablePods gives back, as indexes finish, the quota of the pods the
// job will no longer run: once fewer indexes remain than its parallelism,
// the difference. A job that a RestartJob rule may restart with every index
// (restartIndexes All) gives back nothing: any finished index may run
// again, and the quota another workload took meanwhile would be
// overcommitted.
func (j *Job) ReclaimablePods(context.Context, client.Client) ([]kueuev1beta2.ReclaimablePod, error) {
	if j.mayRerunEveryIndex() {
		return nil, nil
	}
	parallelism := ptr.Deref(j.Spec.Parallelism, 1)
	done := j.finishedIndexes()
	remaining := int32(j.wantedIndexes().Len() - done)
	if done == 0 || remaining >= parallelism {
		return nil, nil
	}
	return []kueuev1beta2.ReclaimablePod{{
		Name:  kueuev1beta2.DefaultPodSetName,
		Count: parallelism - max(remaining, 0),
	}}, nil
}

// mayRerunEveryIndex: a RestartJob rule of the job restarts every index,
// completed and failed ones included.
func (j *Job) mayRerunEveryIndex() bool {
	if j.Spec.PodFailurePolicy == nil {
		return false
	}
	for _, r := range j.Spec.PodFailurePolicy.Rules {
		if r.Action == ibjv1.PodFailurePolicyActionRestartJob && r.RestartIndexes == ibjv1.RestartAllIndexes {
			return true
		}
	}
	return false
}

// CanDefaultManagedBy is true when the job is this operator's to run, so
// that a MultiKueue ClusterQueue may hand it to MultiKueue.
func (j *Job) CanDefaultManagedBy() bool {
	m := j.Spec.ManagedBy
	return m == nil || *m == ibjv1.ControllerName
}

// ManagedBy is spec.managedBy.
func (j *Job) ManagedBy() *string { return j.Spec.ManagedBy }

// SetManagedBy sets spec.managedBy.
func (j *Job) SetManagedBy(m *string) { j.Spec.ManagedBy = m }

// wantedIndexes are the indexes the job runs: spec.indexes, or all of
// 0..completions-1.
func (j *Job) wantedIndexes() indexset.Set {
	set, _ := indexset.OfJob((*ibjv1.IndexedBatchJob)(j)) // unreadable: the job runs nothing
	return set
}

// finishedIndexes counts the job's indexes that completed or failed for
// good.
func (j *Job) finishedIndexes() int {
	wanted := j.wantedIndexes()
	done := 0
	for _, s := range []string{j.Status.CompletedIndexes, ptr.Deref(j.Status.FailedIndexes, "")} {
		// The operator writes these; an unreadable one counts as none.
		if set, err := indexset.Parse(s, j.Spec.Completions); err == nil {
			done += wanted.CountIn(set)
		}
	}
	return done
}

// podsCount is how many pods run at once: parallelism, or fewer when the
// job has fewer indexes.
func (j *Job) podsCount() int32 {
	return min(ptr.Deref(j.Spec.Parallelism, 1), int32(j.wantedIndexes().Len()))
}

// minPodsCount is the lowest parallelism the job accepts, when it allows
// partial admission.
func (j *Job) minPodsCount() *int32 {
	v, ok := j.Annotations[MinParallelismAnnotation]
	if !ok {
		return nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 1 {
		return nil
	}
	return ptr.To(int32(n))
}
