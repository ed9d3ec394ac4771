package podsim

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// EnvtestNode is the node ForJob binds pods to. No Node object by that name
// needs to exist: the API server does not check.
const EnvtestNode = "node-1"

// ForJob are the options of a simulator that plays the kubelet for the pods
// of one IndexedBatchJob on a control plane with no scheduler and no kubelet
// (envtest): it binds each pod to EnvtestNode, reports it Running and Ready,
// ends it as plan says for its index and attempt, and kills a deleted pod at
// once (phase Failed, exit code ExitKilled, then the final delete). The
// attempt is the operator's annotation, 0 on a pod without it; the index is
// -1 on a pod without a valid one (a stray a test made).
func ForJob(cs kubernetes.Interface, namespace, job string, plan func(index, attempt int) Plan) Options {
	return Options{
		Client:        cs,
		Namespace:     namespace,
		LabelSelector: labels.Set{v1alpha1.JobNameLabel: job}.String(),
		IndexLabels:   []string{v1alpha1.CompletionIndexLabel},
		Script: func(pod *corev1.Pod, index int) Plan {
			attempt, _ := strconv.Atoi(pod.Annotations[v1alpha1.AttemptAnnotation])
			return plan(index, attempt)
		},
		Node:          EnvtestNode,
		ReportRunning: true,
	}
}
