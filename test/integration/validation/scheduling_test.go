package validation

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"

	"github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// Messages of spec.scheduling's rules: batch/v1 Job's (1.38) word for word,
// so that a job moved from one to the other is refused alike. Upstream's
// declarative validation words them; the CRD's CEL rules repeat them at
// upstream's field paths.
const (
	msgCannotSet        = "field cannot be set once created"
	msgCannotClear      = "field cannot be cleared once set"
	msgFieldImmutable   = "field is immutable"
	msgPolicyVariant    = "the basic/gang policy variant is immutable after creation; only schedulingPolicy.gang.minCount may be updated"
	msgPolicyNone       = "must specify one of: `basic`, `gang`"
	msgPolicyBoth       = "must specify exactly one of: `basic`, `gang`"
	msgModeNone         = "must specify one of: `single`, `all`"
	msgModeBoth         = "must specify exactly one of: `single`, `all`"
	msgClaimNone        = "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`"
	msgClaimBoth        = "must specify exactly one of: `resourceClaimName`, `resourceClaimTemplateName`"
	msgAllNeedsGang     = "the disruptionMode `all` is not supported with the Basic scheduling policy"
	msgWithGroup        = "must not be set together with template.spec.schedulingGroup"
	msgMinCountPositive = "must be greater than or equal to 1"
	msgLabelKey         = "name part must consist of alphanumeric characters, '-', '_' or '.'"
	msgDNSLabel         = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"
	msgDNSSubdomain     = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"
	msgRequired         = "Required value"
	msgAtMost1Item      = "must have at most 1 item"
	msgAtMost4Items     = "must have at most 4 items"
	msgDuplicate        = "Duplicate value"
	// msgBothGangs is the operator's own: gangScheduling is not batch/v1's.
	msgBothGangs = "must not be set together with scheduling: gangScheduling is deprecated, set scheduling.schedulingPolicy.gang.minCount instead"
)

// Field paths of spec.scheduling's errors, as upstream reports them.
const (
	fldScheduling  = "spec.scheduling"
	fldPolicy      = "spec.scheduling.schedulingPolicy"
	fldMinCount    = "spec.scheduling.schedulingPolicy.gang.minCount"
	fldConstraints = "spec.scheduling.schedulingConstraints"
	fldTopology    = "spec.scheduling.schedulingConstraints.topology"
	fldMode        = "spec.scheduling.disruptionMode"
	fldClaims      = "spec.scheduling.resourceClaims"
	fldGangSched   = "spec.gangScheduling"
)

// expectRejectedAt asserts that the API server refused the object as
// Invalid, saying message of field (a path the error names, followed by
// its ": ").
func expectRejectedAt(err error, field, message string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "the API server accepted the object; want it rejected at %s with %q", field, message)
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid error, got: %v", err)
	Expect(err.Error()).To(ContainSubstring(field+": "), "the error names no field %s", field)
	Expect(err.Error()).To(ContainSubstring(message))
}

// withScheduling is job() with spec.scheduling edited by edit, for what
// the builder's methods do not make.
func withScheduling(w *harness.JobWrapper, edit func(s *v1alpha1.JobSchedulingConfiguration)) *v1alpha1.IndexedBatchJob {
	j := w.Obj()
	if j.Spec.Scheduling == nil {
		j.Spec.Scheduling = &v1alpha1.JobSchedulingConfiguration{}
	}
	edit(j.Spec.Scheduling)
	return j
}

// claims is a gang job sharing n ResourceClaims, claim-a, claim-b, ...
func claims(n int) *harness.JobWrapper {
	w := job().Parallelism(4).Gang(0)
	for i := range n {
		w.SharedClaim("claim-"+string(rune('a'+i)), "gpus", false)
	}
	return w
}

var _ = Describe("IndexedBatchJob spec.scheduling admission", func() {
	DescribeTable("rejects an invalid spec.scheduling at creation, as batch/v1",
		func(job *v1alpha1.IndexedBatchJob, field, message string) {
			expectRejectedAt(create(job), field, message)
		},

		Entry("a policy with neither basic nor gang", withScheduling(job(), func(s *v1alpha1.JobSchedulingConfiguration) {
			s.SchedulingPolicy = &v1alpha1.WorkloadPodGroupSchedulingPolicy{}
		}), fldPolicy, msgPolicyNone),
		Entry("a policy with both basic and gang", withScheduling(job().Parallelism(4).Gang(2), func(s *v1alpha1.JobSchedulingConfiguration) {
			s.SchedulingPolicy.Basic = &v1alpha1.WorkloadPodGroupBasicSchedulingPolicy{}
		}), fldPolicy, msgPolicyBoth),
		Entry("a gang of 0 pods", withScheduling(job().Parallelism(4).Gang(1), func(s *v1alpha1.JobSchedulingConfiguration) {
			s.SchedulingPolicy.Gang.MinCount = ptr.To[int32](0)
		}), fldMinCount, msgMinCountPositive),
		Entry("a gang larger than parallelism", job().Parallelism(2).Gang(3).Obj(), fldMinCount, "must not be greater than parallelism"),
		Entry("a gang larger than the default parallelism of 1",
			func() *v1alpha1.IndexedBatchJob { j := job().Gang(2).Obj(); j.Spec.Parallelism = nil; return j }(),
			fldMinCount, "must not be greater than parallelism"),
		Entry("a disruption mode with neither single nor all", withScheduling(job(), func(s *v1alpha1.JobSchedulingConfiguration) {
			s.DisruptionMode = &v1alpha1.WorkloadPodGroupDisruptionMode{}
		}), fldMode, msgModeNone),
		Entry("a disruption mode with both single and all", withScheduling(job().Parallelism(4).Gang(0).DisruptTogether(true), func(s *v1alpha1.JobSchedulingConfiguration) {
			s.DisruptionMode.Single = &v1alpha1.WorkloadPodGroupSingleDisruptionMode{}
		}), fldMode, msgModeBoth),
		Entry("disruption mode all with the basic policy", job().BasicScheduling().DisruptTogether(true).Obj(), fldMode, msgAllNeedsGang),
		Entry("disruption mode all without a policy (which is basic)", job().DisruptTogether(true).Obj(), fldMode, msgAllNeedsGang),
		Entry("two topology constraints", withScheduling(job().Topology("topology.kubernetes.io/zone"), func(s *v1alpha1.JobSchedulingConfiguration) {
			s.SchedulingConstraints.Topology = append(s.SchedulingConstraints.Topology, v1alpha1.WorkloadTopologyConstraint{Key: "rack"})
		}), fldTopology, msgAtMost1Item),
		Entry("a topology key that is no label key", job().Topology("zone!").Obj(), fldTopology+"[0].key", msgLabelKey),
		Entry("an empty topology key", job().Topology("").Obj(), fldTopology+"[0].key", msgRequired),
		Entry("five shared claims", claims(5).Obj(), fldClaims, msgAtMost4Items),
		Entry("two shared claims of one name", job().Parallelism(2).Gang(0).SharedClaim("gpu", "a", false).SharedClaim("gpu", "b", false).Obj(),
			fldClaims+"[1]", msgDuplicate),
		Entry("a shared claim naming neither a claim nor a template", withScheduling(job(), func(s *v1alpha1.JobSchedulingConfiguration) {
			s.ResourceClaims = []v1alpha1.WorkloadPodGroupResourceClaim{{Name: "gpu"}}
		}), fldClaims+"[0]", msgClaimNone),
		Entry("a shared claim naming both a claim and a template", withScheduling(job().SharedClaim("gpu", "a", false), func(s *v1alpha1.JobSchedulingConfiguration) {
			s.ResourceClaims[0].ResourceClaimTemplateName = ptr.To("b")
		}), fldClaims+"[0]", msgClaimBoth),
		Entry("a shared claim whose name is no DNS label", job().SharedClaim("GPU_0", "a", false).Obj(), fldClaims+"[0].name", msgDNSLabel),
		Entry("a shared claim with an empty name", job().SharedClaim("", "a", false).Obj(), fldClaims+"[0].name", msgRequired),
		Entry("a shared claim on a ResourceClaim whose name is no DNS subdomain", job().SharedClaim("gpu", "GPUs", false).Obj(),
			fldClaims+"[0].resourceClaimName", msgDNSSubdomain),
		Entry("a shared claim on a ResourceClaimTemplate whose name is no DNS subdomain", job().SharedClaim("gpu", "a_b", true).Obj(),
			fldClaims+"[0].resourceClaimTemplateName", msgDNSSubdomain),
		Entry("scheduling with a template naming a PodGroup", withTemplateSchedulingGroup(job().BasicScheduling().Obj()), fldScheduling, msgWithGroup),
		Entry("both scheduling and the deprecated gangScheduling", job().Parallelism(4).Gang(4).GangScheduling(4).Obj(), fldGangSched, msgBothGangs),
	)

	DescribeTable("accepts a valid spec.scheduling at creation",
		func(job *v1alpha1.IndexedBatchJob) {
			Expect(create(job)).To(Succeed())
		},

		Entry("an empty block, which is the basic policy", withScheduling(job(), func(*v1alpha1.JobSchedulingConfiguration) {})),
		Entry("the basic policy", job().BasicScheduling().Obj()),
		Entry("a gang of parallelism pods", job().Parallelism(4).Gang(0).Obj()),
		Entry("a gang of minCount pods equal to parallelism", job().Parallelism(4).Gang(4).Obj()),
		Entry("a gang of minCount pods above completions (batch/v1 bounds it by parallelism only)", job().Completions(2).Parallelism(4).Gang(3).Obj()),
		Entry("every part: gang, zone, disrupted together, four shared claims",
			claims(4).Topology("topology.kubernetes.io/zone").DisruptTogether(true).Obj()),
		Entry("a topology key without a prefix", job().Topology("rack").Obj()),
		Entry("disruption mode single with the basic policy", job().BasicScheduling().DisruptTogether(false).Obj()),
		Entry("a shared claim from a template", job().SharedClaim("gpu", "gpu-template", true).Obj()),
		Entry("a shared claim whose ResourceClaim name is a dotted subdomain", job().SharedClaim("gpu", "a.b-c", false).Obj()),
		Entry("a 63-character shared claim name", job().SharedClaim(nameOfLength(63), "a", false).Obj()),
	)

	DescribeTable("rejects an update of spec.scheduling, as batch/v1",
		func(base *v1alpha1.IndexedBatchJob, change func(*v1alpha1.IndexedBatchJob), field, message string) {
			expectRejectedAt(update(base, change), field, message)
		},

		Entry("setting scheduling", job().Parallelism(4).Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Scheduling = harness.MakeIndexedBatchJob("x", "").Gang(0).Obj().Spec.Scheduling
			},
			fldScheduling, msgCannotSet),
		Entry("clearing scheduling", job().Parallelism(4).Gang(0).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Scheduling = nil }, fldScheduling, msgCannotClear),
		Entry("adding a policy", job().Topology("rack").Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Scheduling.SchedulingPolicy = &v1alpha1.WorkloadPodGroupSchedulingPolicy{Basic: &v1alpha1.WorkloadPodGroupBasicSchedulingPolicy{}}
			}, fldPolicy, msgCannotSet),
		Entry("removing the policy", job().BasicScheduling().Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Scheduling.SchedulingPolicy = nil }, fldPolicy, msgCannotClear),
		Entry("from gang to basic", job().Parallelism(4).Gang(2).Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Scheduling.SchedulingPolicy = &v1alpha1.WorkloadPodGroupSchedulingPolicy{Basic: &v1alpha1.WorkloadPodGroupBasicSchedulingPolicy{}}
			}, fldPolicy, msgPolicyVariant),
		Entry("from basic to gang", job().Parallelism(4).BasicScheduling().Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Scheduling.SchedulingPolicy = &v1alpha1.WorkloadPodGroupSchedulingPolicy{Gang: &v1alpha1.WorkloadPodGroupGangSchedulingPolicy{}}
			}, fldPolicy, msgPolicyVariant),
		Entry("of the topology constraint", job().Topology("rack").Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Scheduling.SchedulingConstraints.Topology[0].Key = "zone" }, fldConstraints, msgFieldImmutable),
		Entry("adding a topology constraint", job().BasicScheduling().Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Scheduling.SchedulingConstraints = &v1alpha1.WorkloadPodGroupSchedulingConstraints{Topology: []v1alpha1.WorkloadTopologyConstraint{{Key: "rack"}}}
			}, fldConstraints, msgFieldImmutable),
		Entry("of the disruption mode", job().Parallelism(4).Gang(0).DisruptTogether(true).Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Scheduling.DisruptionMode = &v1alpha1.WorkloadPodGroupDisruptionMode{Single: &v1alpha1.WorkloadPodGroupSingleDisruptionMode{}}
			}, fldMode, msgFieldImmutable),
		Entry("removing the disruption mode", job().BasicScheduling().DisruptTogether(false).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Scheduling.DisruptionMode = nil }, fldMode, msgFieldImmutable),
		Entry("adding a shared claim", job().SharedClaim("gpu", "a", false).Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Scheduling.ResourceClaims = append(j.Spec.Scheduling.ResourceClaims, v1alpha1.WorkloadPodGroupResourceClaim{Name: "nic", ResourceClaimName: ptr.To("b")})
			}, fldClaims, msgFieldImmutable),
		Entry("of a shared claim", job().SharedClaim("gpu", "a", false).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Scheduling.ResourceClaims[0].ResourceClaimName = ptr.To("b") }, fldClaims, msgFieldImmutable),
		Entry("of minCount above parallelism", job().Parallelism(4).Gang(2).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Scheduling.SchedulingPolicy.Gang.MinCount = ptr.To[int32](5) },
			fldMinCount, "must not be greater than parallelism"),
		Entry("of parallelism below the gang's minCount", job().Parallelism(4).Gang(3).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Parallelism = ptr.To[int32](2) }, fldMinCount, "must not be greater than parallelism"),
	)

	DescribeTable("accepts an update of spec.scheduling, as batch/v1",
		func(base *v1alpha1.IndexedBatchJob, change func(*v1alpha1.IndexedBatchJob)) {
			Expect(update(base, change)).To(Succeed())
		},

		Entry("of the gang's minCount, the one mutable field", job().Parallelism(4).Gang(2).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Scheduling.SchedulingPolicy.Gang.MinCount = ptr.To[int32](4) }),
		Entry("setting the gang's minCount", job().Parallelism(4).Gang(0).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Scheduling.SchedulingPolicy.Gang.MinCount = ptr.To[int32](3) }),
		Entry("of parallelism with the gang", job().Parallelism(4).Gang(2).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Parallelism = ptr.To[int32](8) }),
		Entry("that changes nothing of a job with every part", claims(2).Topology("rack").DisruptTogether(true).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Suspend = ptr.To(true) }),
	)

	It("reports a label key error with upstream's whole message", func() {
		err := create(job().Topology("a/b/c").Obj())
		expectRejectedAt(err, fldTopology+"[0].key", "a valid label key must consist of alphanumeric characters")
		Expect(strings.Count(err.Error(), fldTopology+"[0].key: ")).To(Equal(1), "one error for the key: %v", err)
	})
})
