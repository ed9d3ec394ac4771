package kwokcluster

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// Kubelets says what plays the kubelets of the cluster's nodes.
type Kubelets int

const (
	// KwokKubelets are kwok's fake nodes: kwok reports them Ready and runs
	// their pods by the stages of hack/kwok/stages, which read the
	// kwok.indexedjob.dev/* annotations.
	KwokKubelets Kubelets = iota
	// SimulatedKubelets are the test harness's pod simulator (podsim) in
	// this process, which reads the same annotations (but for
	// ShutdownDurationAnnotation: a deleted pod stops at once) and
	// FailRestartAttemptsAnnotation, and, as a kubelet does, restarts a
	// container in place on an exit its restart rules match. No kwok
	// binary is needed: `make demo` runs on these.
	SimulatedKubelets
)

// startSimulatedKubelets reports the nodes Ready, as a kubelet would, and
// starts the pod simulator, which runs every pod once the binder has bound
// it and makes the kubelet's final delete of a finished deleted pod.
func (c *Cluster) startSimulatedKubelets(ctx context.Context) error {
	clientset := c.clientset
	now := metav1.Now()
	for _, name := range c.NodeNames {
		node, err := clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status = corev1.NodeStatus{
			Capacity:    nodeCapacity(),
			Allocatable: nodeCapacity(),
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "simulated by the test harness's pod simulator", LastHeartbeatTime: now, LastTransitionTime: now,
			}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.2"}},
		}
		if _, err := clientset.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("reporting node %s Ready: %w", name, err)
		}
	}
	simCtx, stop := context.WithCancel(context.Background())
	sim := podsim.New(simulatedKubeletOptions(clientset))
	if err := sim.Run(simCtx); err != nil {
		stop()
		return err
	}
	c.stopSimulator = func() {
		stop()
		sim.Stop()
	}
	return nil
}

// simulatedKubeletOptions are the pod simulator's options for the
// simulated nodes: every pod of the cluster (the binder binds them), each
// run by its annotations (annotatedPlan) and reported Running first. The
// simulator, as a kubelet, restarts a container in place on an exit its
// restart rules match (a job's retry InPlace rules): the pod keeps running
// and its container's restartCount grows, until the operator stops it.
func simulatedKubeletOptions(cs kubernetes.Interface) podsim.Options {
	return podsim.Options{
		Client:        cs,
		IndexLabels:   []string{ibjv1.CompletionIndexLabel, "batch.kubernetes.io/job-completion-index"},
		JobLabel:      ibjv1.JobNameLabel,
		Script:        annotatedPlan,
		ReportRunning: true,
	}
}

// nodeCapacity is what a simulated node offers.
func nodeCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("1000"),
	}
}

// annotatedPlan is how a pod ends by its kwok.indexedjob.dev/* annotations,
// as the kwok stages of hack/kwok/stages/pods.yaml end it: it runs
// DurationAnnotation (default 1s; Forever: until deleted) and succeeds,
// unless its index is in FailIndexesAnnotation (and its generation in
// FailRestartAttemptsAnnotation, when set), when it runs FailDurationAnnotation
// (default the duration) and fails with ExitCodeAnnotation (default 1). A
// value that cannot be read counts as unset. A failure is an exit of the
// pod's containers: where a restart rule of the first one takes its code,
// the simulator restarts it in place and it fails again each run.
func annotatedPlan(pod *corev1.Pod, index int) podsim.Plan {
	ann := pod.Annotations
	run := annotatedDuration(ann[DurationAnnotation], time.Second)
	if index >= 0 && index <= math.MaxInt32 {
		// Spaces are allowed, as the stages strip them.
		failing, err := indexset.Parse(strings.Join(strings.Fields(ann[FailIndexesAnnotation]), ""), math.MaxInt32)
		if err == nil && failing.Has(int32(index)) && failsGeneration(pod) {
			code := int32(1)
			if n, err := strconv.ParseInt(ann[ExitCodeAnnotation], 10, 32); err == nil && n != 0 {
				code = int32(n)
			}
			return podsim.Plan{
				Run: annotatedDuration(ann[FailDurationAnnotation], run), ExitCode: code,
				OOMKilled: ann[ExitReasonAnnotation] == "OOMKilled",
			}
		}
	}
	if ann[DurationAnnotation] == Forever {
		return podsim.Plan{Hold: true}
	}
	return podsim.Plan{Run: run}
}

// failsGeneration: FailRestartAttemptsAnnotation lists the pod's
// generation, or is unset or unreadable. The generation, not the attempt:
// a job created again under its name numbers its pods past those the old
// one left, and its first generation is 0 all the same.
func failsGeneration(pod *corev1.Pod) bool {
	generations, err := indexset.Parse(strings.Join(strings.Fields(pod.Annotations[FailRestartAttemptsAnnotation]), ""), math.MaxInt32)
	if err != nil || generations.Len() == 0 {
		return true
	}
	generation := int64(0)
	if v, ok := pod.Labels[ibjv1.RestartAttemptLabel]; ok {
		if generation, err = strconv.ParseInt(v, 10, 32); err != nil {
			return true
		}
	}
	return generations.Has(int32(generation))
}

func annotatedDuration(value string, otherwise time.Duration) time.Duration {
	if d, err := time.ParseDuration(value); err == nil && d >= 0 {
		return d
	}
	return otherwise
}
