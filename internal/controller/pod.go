package controller

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
)

// podName is the pod's deterministic name (podbuild.Name).
func podName(job *ibjv1.IndexedBatchJob, index, attempt int32) string {
	return podbuild.Name(job, index, attempt)
}

// controllerRef makes the job the controller of a pod or Service it
// creates (podbuild.ControllerRef).
func controllerRef(job *ibjv1.IndexedBatchJob) metav1.OwnerReference {
	return podbuild.ControllerRef(job)
}
