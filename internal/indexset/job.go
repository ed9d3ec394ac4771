package indexset

import (
	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// OfJob is the indexes the job runs: those spec.indexes lists, or every
// index below completions. Admission refuses a list it cannot read, so an
// error means validation was bypassed; the operator then starts no pod, and
// every other reader counts the job as running no index, as the operator
// does.
func OfJob(job *ibjv1.IndexedBatchJob) (Set, error) {
	if listed := job.Spec.Indexes; listed != nil {
		set, err := Parse(*listed, job.Spec.Completions)
		if err != nil {
			return Set{}, err
		}
		return set, nil
	}
	return Range(0, job.Spec.Completions-1), nil
}
