package webhook

import (
	"fmt"

	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/workloadapi"
)

// schedulingGangField is the field of spec.scheduling that replaces the
// deprecated spec.gangScheduling.
const schedulingGangField = "spec.scheduling.schedulingPolicy.gang"

// gangField is the field a gang job's gang comes from, as a user wrote it.
func gangField(job *ibjv1.IndexedBatchJob) string {
	if workloadapi.Field(job) == workloadapi.GangSchedulingField {
		return "spec.gangScheduling"
	}
	return schedulingGangField
}

// schedulingWarnings are admission's warnings about a job's scheduling:
// spec.gangScheduling is deprecated, and says what it maps to, with the
// minCount the job gave, so that the line can be pasted in its place. The
// CRD refuses a job that sets both.
func schedulingWarnings(job *ibjv1.IndexedBatchJob) []string {
	g := job.Spec.GangScheduling
	if g == nil {
		return nil
	}
	replacement := "scheduling: {schedulingPolicy: {gang: {}}}"
	if g.MinCount != nil {
		replacement = fmt.Sprintf("scheduling: {schedulingPolicy: {gang: {minCount: %d}}}", ptr.Deref(g.MinCount, 0))
	}
	return []string{fmt.Sprintf("spec.gangScheduling is deprecated: it maps to %s.minCount, batch/v1 Job's field; "+
		"write %s in its place (where minCount may also change while the job runs)", schedulingGangField, replacement)}
}
