package main

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// Labels the benchmark puts on the pod template: the simulator only plays
// the kubelet for pods carrying benchLabel, and fails every index i with
// i % failMod == 0 when failModLabel is set.
const (
	benchLabel     = "bench.indexedjob.dev/workload"
	failModLabel   = "bench.indexedjob.dev/fail-mod"
	upstreamIndex  = "batch.kubernetes.io/job-completion-index"
	ourIndex       = "batch.indexedjob.dev/completion-index"
	simulatorAgent = "bench-pod-simulator"
	// labelOn is the value of a label whose presence selects a pod.
	labelOn         = "true"
	simulatorWorker = 48
)

// newSimulator plays every kubelet at once, the same for both controllers:
// a new pod finishes at once (one status write), failed if its index is a
// multiple of its fail-mod label; a pod being deleted is failed, as a
// kubelet would on shutdown.
func newSimulator(cs kubernetes.Interface) *podsim.Simulator {
	return podsim.New(podsim.Options{
		Client:        cs,
		LabelSelector: benchLabel,
		IndexLabels:   []string{ourIndex, upstreamIndex},
		Script: func(pod *corev1.Pod, index int) podsim.Plan {
			if mod, err := strconv.Atoi(pod.Labels[failModLabel]); err == nil && mod > 0 && index%mod == 0 {
				return podsim.Plan{ExitCode: podsim.ExitFailed}
			}
			return podsim.Plan{}
		},
		Workers: simulatorWorker,
	})
}
