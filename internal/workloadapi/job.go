package workloadapi

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
)

// What a job asks of the Workload API, read from its spec: whether it has
// a Workload and PodGroup at all, its gang, and the PodGroupTemplate its
// spec.scheduling compiles to. Both spec.scheduling and the deprecated
// spec.gangScheduling are read here, and only here, so that the
// controller, the webhook and kubectl ibj agree on what a job asked for.

// Field paths of the job's gang, as Field names them.
const (
	SchedulingField     = "scheduling"
	GangSchedulingField = "gangScheduling"
)

// Wanted reports whether the job has a Workload and PodGroup: it sets
// spec.scheduling (any policy, as batch/v1's Job controller makes them for
// a basic policy too), or the deprecated spec.gangScheduling.
func Wanted(job *ibjv1.IndexedBatchJob) bool {
	return job.Spec.Scheduling != nil || job.Spec.GangScheduling != nil
}

// Field is the spec field the job's Workload and PodGroup come from
// (SchedulingField or GangSchedulingField), "" when it has none.
func Field(job *ibjv1.IndexedBatchJob) string {
	switch {
	case job.Spec.Scheduling != nil:
		return SchedulingField
	case job.Spec.GangScheduling != nil:
		return GangSchedulingField
	}
	return ""
}

// Gang reports whether the job's pods are placed all or none
// (spec.scheduling.schedulingPolicy.gang, or the deprecated
// spec.gangScheduling), and the minCount the job states, nil when it
// leaves it to parallelism.
func Gang(job *ibjv1.IndexedBatchJob) (minCount *int32, ok bool) {
	if s := job.Spec.Scheduling; s != nil {
		if s.SchedulingPolicy == nil || s.SchedulingPolicy.Gang == nil {
			return nil, false
		}
		return s.SchedulingPolicy.Gang.MinCount, true
	}
	if g := job.Spec.GangScheduling; g != nil {
		return g.MinCount, true
	}
	return nil, false
}

// Name is the name of the job's Workload and PodGroup: the job's name
// and the start of its UID, so that a job created again under the same
// name while the garbage collector still deletes its predecessor's objects
// never finds their names taken.
func Name(job *ibjv1.IndexedBatchJob) string {
	uid := string(job.UID)
	if len(uid) > 8 {
		uid = uid[:8]
	}
	return job.Name + "-" + uid
}

// MinCount is the gang's size the PodGroup should have: minCount, or
// parallelism, but never more than the wanted indexes the job's status
// does not record as finished (a gang larger than the pods left to run
// would never form, and hold the job's last pods for good); at least 1.
// It reads the last recorded status, so it follows the job's progress one
// status write behind.
func MinCount(job *ibjv1.IndexedBatchJob) int32 {
	n := ptr.Deref(job.Spec.Parallelism, 1)
	if minCount, _ := Gang(job); minCount != nil {
		n = min(n, *minCount)
	}
	wanted, _ := indexset.OfJob(job) // unreadable: the operator starts no pod
	if done, err := indexset.Parse(job.Status.CompletedIndexes, 0); err == nil {
		wanted = wanted.Difference(done)
	}
	if failed := job.Status.FailedIndexes; failed != nil {
		if set, err := indexset.Parse(*failed, 0); err == nil {
			wanted = wanted.Difference(set)
		}
	}
	n = min(n, int32(min(wanted.Len(), 1<<30)))
	return max(n, 1)
}

// Template is the PodGroupTemplate the job's scheduling compiles to, named
// name: as batch/v1's Job controller compiles a Job's spec.scheduling, the
// gang policy with minCount (the basic policy without a gang), the
// topology constraints, the disruption mode and the shared claims as they
// are, and the pod template's priorityClassName.
func Template(job *ibjv1.IndexedBatchJob, name string, minCount int32) PodGroupTemplate {
	t := PodGroupTemplate{
		Name:              name,
		SchedulingPolicy:  SchedulingPolicy{Basic: &BasicSchedulingPolicy{}},
		PriorityClassName: job.Spec.Template.Spec.PriorityClassName,
	}
	if _, ok := Gang(job); ok {
		t.SchedulingPolicy = SchedulingPolicy{Gang: &GangSchedulingPolicy{MinCount: minCount}}
	}
	s := job.Spec.Scheduling
	if s == nil {
		return t
	}
	if c := s.SchedulingConstraints; c != nil && len(c.Topology) > 0 {
		t.SchedulingConstraints = &PodGroupSchedulingConstraints{}
		for _, tc := range c.Topology {
			t.SchedulingConstraints.Topology = append(t.SchedulingConstraints.Topology, TopologyConstraint{Key: tc.Key})
		}
	}
	if m := s.DisruptionMode; m != nil {
		t.DisruptionMode = &DisruptionMode{}
		if m.Single != nil {
			t.DisruptionMode.Single = &SingleDisruptionMode{}
		}
		if m.All != nil {
			t.DisruptionMode.All = &AllDisruptionMode{}
		}
	}
	for _, c := range s.ResourceClaims {
		t.ResourceClaims = append(t.ResourceClaims, PodGroupResourceClaim{
			Name:                      c.Name,
			ResourceClaimName:         clone(c.ResourceClaimName),
			ResourceClaimTemplateName: clone(c.ResourceClaimTemplateName),
		})
	}
	return t
}

// clone is a copy of p, nil for nil.
func clone(p *string) *string {
	if p == nil {
		return nil
	}
	return ptr.To(*p)
}

// PodGroupSpecOf is the spec of a PodGroup made from template t of the
// Workload workloadName: the template's fields, copied, as
// kube-scheduler reads them from the PodGroup.
func PodGroupSpecOf(workloadName string, t PodGroupTemplate) PodGroupSpec {
	return PodGroupSpec{
		WorkloadRef:           &WorkloadReference{WorkloadName: workloadName, TemplateName: t.Name},
		SchedulingPolicy:      t.SchedulingPolicy,
		SchedulingConstraints: t.SchedulingConstraints,
		ResourceClaims:        t.ResourceClaims,
		DisruptionMode:        t.DisruptionMode,
		PriorityClassName:     t.PriorityClassName,
	}
}

// gatedFields are the PodGroup spec fields the API server serves only
// with a feature gate (Kubernetes 1.37), by field: without the gate it
// drops them from what it stores, and kube-scheduler never sees them.
var gatedFields = map[string]string{
	"schedulingConstraints": "TopologyAwareWorkloadScheduling",
	"resourceClaims":        "DRAWorkloadResourceClaims",
}

// Dropped are the top-level spec fields of sent that stored lacks: what
// the API server dropped of a PodGroup the operator sent (a feature gate
// off), sorted, each as "spec.<field>", with its gate when known.
func Dropped(sent, stored *unstructured.Unstructured) []string {
	want, _, _ := unstructured.NestedMap(sent.Object, "spec")
	got, _, _ := unstructured.NestedMap(stored.Object, "spec")
	var out []string
	for field := range want {
		if _, ok := got[field]; ok {
			continue
		}
		words := "spec." + field
		if gate, ok := gatedFields[field]; ok {
			words += " (feature gate " + gate + ")"
		}
		out = append(out, words)
	}
	slices.Sort(out)
	return out
}

// DroppedWords says what Dropped found, "" when nothing.
func DroppedWords(dropped []string) string {
	if len(dropped) == 0 {
		return ""
	}
	return "the API server dropped the PodGroup's " + strings.Join(dropped, ", ") +
		", so kube-scheduler places the pods without it"
}
