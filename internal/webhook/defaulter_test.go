package webhook

import (
	"context"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/utils"
)

func TestDefaulter(t *testing.T) {
	failJob := utils.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 42)
	cases := []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		op   admissionv1.Operation
		want *ibjv1.IndexedBatchJob
	}{
		{
			name: "backoffLimit 6 and TerminatingOrFailed, as batch/v1",
			job:  utils.MakeIndexedBatchJob("a", "ns").Obj(),
			op:   admissionv1.Create,
			want: utils.MakeIndexedBatchJob("a", "ns").BackoffLimit(6).PodReplacementPolicy(batchv1.TerminatingOrFailed).Obj(),
		},
		{
			name: "unlimited backoffLimit with backoffLimitPerIndex",
			job:  utils.MakeIndexedBatchJob("a", "ns").BackoffLimitPerIndex(1).Obj(),
			op:   admissionv1.Create,
			want: utils.MakeIndexedBatchJob("a", "ns").BackoffLimitPerIndex(1).BackoffLimit(math.MaxInt32).PodReplacementPolicy(batchv1.TerminatingOrFailed).Obj(),
		},
		{
			name: "Failed with a podFailurePolicy",
			job:  utils.MakeIndexedBatchJob("a", "ns").PodFailurePolicy(failJob).Obj(),
			op:   admissionv1.Create,
			want: utils.MakeIndexedBatchJob("a", "ns").PodFailurePolicy(failJob).BackoffLimit(6).PodReplacementPolicy(batchv1.Failed).Obj(),
		},
		{
			name: "values set are kept",
			job:  utils.MakeIndexedBatchJob("a", "ns").BackoffLimit(0).PodReplacementPolicy(batchv1.Failed).Obj(),
			op:   admissionv1.Create,
			want: utils.MakeIndexedBatchJob("a", "ns").BackoffLimit(0).PodReplacementPolicy(batchv1.Failed).Obj(),
		},
		{
			name: "no defaults on update: podReplacementPolicy is immutable",
			job:  utils.MakeIndexedBatchJob("a", "ns").Obj(),
			op:   admissionv1.Update,
			want: utils.MakeIndexedBatchJob("a", "ns").Obj(),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: tc.op}})
			if err := (createOnly{Defaulter{}}).Default(ctx, tc.job); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, tc.job); diff != "" {
				t.Errorf("job (-want +got):\n%s", diff)
			}
		})
	}
}
