package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/workloadapi"
)

// Workload-aware scheduling (spec.scheduling, and the deprecated
// spec.gangScheduling): a Workload and a PodGroup of the Workload API
// (scheduling.k8s.io/v1beta1) per job, carrying the job's policy (basic,
// or gang: kube-scheduler binds none of the pods until it can bind
// minCount at once), topology constraints, disruption mode and shared
// ResourceClaims, and every pod pointing at the PodGroup. This file holds
// its parts: the pure builders (newWorkload, newPodGroup; what the job
// asks for is workloadapi's Template, Name and MinCount, which kubectl ibj
// reads too), the reconciler's step that creates or resizes the two
// objects (ensureGang), and the core's phase that reports what that step
// found (reportGang); startPods holds the pods while the PodGroup is not
// there (gangHoldsPods).

// gangRecheckInterval is how long the reconciler believes the job's
// Workload and PodGroup exist with the minCount it last gave them, before
// it asks the API server again (the manager watches neither kind: the
// cluster may not serve them); and how soon a job whose PodGroup could not
// be created is synced again.
const gangRecheckInterval = 30 * time.Second

// gangTemplateName is the name of the one PodGroupTemplate of the job's
// Workload.
const gangTemplateName = "workers"

// newWorkload builds the job's Workload: one PodGroupTemplate, what the
// job's scheduling compiles to with a gang of minCount (ignored for the
// basic policy), the job as its controllerRef, and controlled by the job,
// so that it goes with the job.
func newWorkload(job *ibjv1.IndexedBatchJob, minCount int32) *workloadapi.Workload {
	return &workloadapi.Workload{
		ObjectMeta: gangObjectMeta(job),
		Spec: workloadapi.WorkloadSpec{
			ControllerRef: &workloadapi.TypedLocalObjectReference{
				APIGroup: ibjv1.GroupVersion.Group, Kind: "IndexedBatchJob", Name: job.Name,
			},
			PodGroupTemplates: []workloadapi.PodGroupTemplate{workloadapi.Template(job, gangTemplateName, minCount)},
		},
	}
}

// newPodGroup builds the job's PodGroup, made from the Workload's template
// (its fields copied) and controlled by the job.
func newPodGroup(job *ibjv1.IndexedBatchJob, minCount int32) *workloadapi.PodGroup {
	return &workloadapi.PodGroup{
		ObjectMeta: gangObjectMeta(job),
		Spec:       workloadapi.PodGroupSpecOf(workloadapi.Name(job), workloadapi.Template(job, gangTemplateName, minCount)),
	}
}

func gangObjectMeta(job *ibjv1.IndexedBatchJob) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:      workloadapi.Name(job),
		Namespace: job.Namespace,
		Labels: map[string]string{
			ibjv1.JobNameLabel:       job.Name,
			ibjv1.ControllerUIDLabel: string(job.UID),
		},
		OwnerReferences: []metav1.OwnerReference{controllerRef(job)},
	}
}

// gangState is what ensureGang found of the job's Workload and PodGroup.
type gangState int

const (
	// gangReady: both exist, controlled by the job, with the wanted minCount.
	gangReady gangState = iota
	// gangNotServed: the cluster does not serve the Workload API.
	gangNotServed
	// gangCreateFailed: the API server refused to create or resize them.
	gangCreateFailed
)

// podGroup is what the reconciler learned of the job's Workload and
// PodGroup before the sync, for syncJob to act on and report. The zero
// value (no name) is a job without scheduling or gangScheduling, or a
// finished one: nothing is held and the status is left as it is.
type podGroup struct {
	name string
	// field is the spec field the job asked by (workloadapi.Field).
	field string
	// gang: the policy is gang, of minCount; else basic (minCount 0).
	gang     bool
	minCount int32
	state    gangState
	// err is the API server's answer when a create or resize failed.
	err string
	// dropped are the PodGroup's fields the API server did not keep
	// (workloadapi.Dropped), empty when it kept what it was sent.
	dropped []string
}

// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=workloads;podgroups,verbs=get;create;update

// ensureGang creates the job's Workload and PodGroup if the job asks for
// them (workloadapi.Wanted), or sets their gang's minCount to
// workloadapi.MinCount where it changed, and returns what it found. What
// it made is remembered for gangRecheckInterval, so that a running job
// costs no request per sync; a PodGroup deleted by hand is thus made again
// within that interval. A cluster that does not serve the Workload API is
// no error: syncJob reports it and holds the pods.
func (r *Reconciler) ensureGang(ctx context.Context, job *ibjv1.IndexedBatchJob) (podGroup, error) {
	if !workloadapi.Wanted(job) || IsFinished(job) {
		return podGroup{}, nil
	}
	pg := podGroup{name: workloadapi.Name(job), field: workloadapi.Field(job)}
	if _, pg.gang = workloadapi.Gang(job); pg.gang {
		pg.minCount = workloadapi.MinCount(job)
	}
	if known, ok := r.jobs.gangCurrent(job.UID, pg.minCount, r.clock.Now()); ok {
		return known, nil
	}
	workload, err := workloadapi.Unstructured(newWorkload(job, pg.minCount), workloadapi.WorkloadGVK)
	if err != nil {
		return podGroup{}, err
	}
	group, err := workloadapi.Unstructured(newPodGroup(job, pg.minCount), workloadapi.PodGroupGVK)
	if err != nil {
		return podGroup{}, err
	}
	for _, want := range []*unstructured.Unstructured{workload, group} {
		stored, err := r.createOrResize(ctx, job, want, pg)
		switch {
		case workloadapi.IsNotServed(err):
			pg.state = gangNotServed
			return pg, nil
		case err != nil:
			pg.state, pg.err = gangCreateFailed, err.Error()
			return pg, err
		}
		if stored.GetKind() == workloadapi.PodGroupGVK.Kind {
			pg.dropped = workloadapi.Dropped(group, stored)
		}
	}
	r.jobs.gangGiven(job.UID, pg, r.clock.Now())
	return pg, nil
}

// createOrResize creates want (the job's Workload or PodGroup); if it
// exists, it checks that the job controls it and, for a gang, sets its
// minCount (the one field of either the API lets change). It returns the
// object as the API server stored it. want is left as it was sent.
func (r *Reconciler) createOrResize(ctx context.Context, job *ibjv1.IndexedBatchJob, want *unstructured.Unstructured, pg podGroup) (*unstructured.Unstructured, error) {
	kind := want.GetKind()
	created := want.DeepCopy()
	err := r.client.Create(ctx, created)
	if err == nil {
		log.FromContext(ctx).V(2).Info("Created "+kind, "object", klog.KObj(want), "gang", pg.gang, "minCount", pg.minCount)
		return created, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating %s %s: %w", kind, want.GetName(), err)
	}
	found := workloadapi.Empty(want.GroupVersionKind())
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(want), found); err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", kind, want.GetName(), err)
	}
	if !metav1.IsControlledBy(found, job) {
		return nil, fmt.Errorf("%s %s exists and is not controlled by this job", kind, want.GetName())
	}
	if !pg.gang {
		return found, nil
	}
	if n, ok := workloadapi.GangMinCount(found); ok && n == int64(pg.minCount) {
		return found, nil
	}
	if err := workloadapi.SetGangMinCount(found, pg.minCount); err != nil {
		return nil, err
	}
	if err := r.client.Update(ctx, found); err != nil {
		return nil, fmt.Errorf("setting the minCount of %s %s: %w", kind, want.GetName(), err)
	}
	log.FromContext(ctx).V(2).Info("Resized "+kind, "object", klog.KObj(found), "minCount", pg.minCount)
	return found, nil
}

// gangHoldsPods: the job asks for a PodGroup and it is not there, so that
// a pod created now would wait for it in the scheduler, or, where the
// cluster drops spec.schedulingGroup, be placed without the job's
// scheduling settings.
func (s *syncState) gangHoldsPods() bool {
	return s.gang.name != "" && s.gang.state != gangReady
}

// reportGang records in condition PodGroupReady what the reconciler found
// of the job's Workload and PodGroup, with an event when that changed, and
// while they are missing asks for the sync that tries again.
func (s *syncState) reportGang() {
	g := s.gang
	if g.name == "" {
		return
	}
	if g.state != gangReady {
		s.plan.requeue(gangRecheckInterval)
	}
	switch c := setPodGroupReady(s.status, s.job.Generation, s.now, g); {
	case c == nil:
	case c.Status == metav1.ConditionTrue && len(g.dropped) > 0:
		s.plan.warn(c.Reason, "%s", c.Message)
	case c.Status == metav1.ConditionTrue:
		s.plan.inform(c.Reason, "%s", c.Message)
	default:
		s.plan.warn(c.Reason, "%s", c.Message)
	}
}

// podGroupCondition is condition PodGroupReady for what the reconciler
// found of the job's gang. Its message depends on nothing that changes
// while the state stays, so that an unchanged state writes no status.
func podGroupCondition(g podGroup) metav1.Condition {
	c := metav1.Condition{Type: ibjv1.ConditionPodGroupReady, Status: metav1.ConditionFalse}
	switch g.state {
	case gangReady:
		c.Status, c.Reason = metav1.ConditionTrue, ibjv1.ReasonPodGroupCreated
		c.Message = fmt.Sprintf("Workload and PodGroup %s: the scheduler binds the job's pods only when it can bind %d at once", g.name, g.minCount)
		if !g.gang {
			c.Message = fmt.Sprintf("Workload and PodGroup %s: the scheduler places the job's pods one by one (policy basic)", g.name)
		}
		if words := workloadapi.DroppedWords(g.dropped); words != "" {
			c.Message += "; " + words
		}
	case gangNotServed:
		c.Reason = ibjv1.ReasonWorkloadAPINotServed
		c.Message = fmt.Sprintf("The cluster does not serve %s Workloads and PodGroups (Kubernetes 1.37 or later with feature gate GenericWorkload and that API version enabled): "+
			"no pod is created until it does. Recreate the job without %s to run its pods one by one", workloadapi.GroupVersion, g.field)
	case gangCreateFailed:
		c.Reason = ibjv1.ReasonPodGroupCreateFailed
		c.Message = fmt.Sprintf("Error creating Workload and PodGroup %s, no pod is created until they exist: %s", g.name, g.err)
	}
	return c
}
