package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// diffRuns is how many pairs the differential spec runs (IBJ_DIFF_RUNS).
func diffRuns() int {
	GinkgoHelper()
	n := 20
	if v := os.Getenv("IBJ_DIFF_RUNS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		Expect(err).NotTo(HaveOccurred(), "IBJ_DIFF_RUNS")
	}
	return n
}

// diffStatus is what the differential spec compares of a job's status.
type diffStatus struct {
	Succeeded, Failed               int32
	CompletedIndexes, FailedIndexes string
	Condition, Reason, TargetReason string
	Finished                        bool
}

func ibjDiffStatus(j *ibjv1.IndexedBatchJob) diffStatus {
	s := diffStatus{Succeeded: j.Status.Succeeded, Failed: j.Status.Failed, CompletedIndexes: j.Status.CompletedIndexes,
		FailedIndexes: ptr.Deref(j.Status.FailedIndexes, "")}
	for _, c := range j.Status.Conditions {
		if c.Status != metav1.ConditionTrue {
			continue
		}
		switch c.Type {
		case ibjv1.ConditionComplete, ibjv1.ConditionFailed:
			s.Condition, s.Reason, s.Finished = c.Type, c.Reason, true
		case ibjv1.ConditionFailureTarget, ibjv1.ConditionSuccessCriteriaMet:
			s.TargetReason = c.Reason
		}
	}
	return s
}

func batchDiffStatus(j *batchv1.Job) diffStatus {
	s := diffStatus{Succeeded: j.Status.Succeeded, Failed: j.Status.Failed, CompletedIndexes: j.Status.CompletedIndexes,
		FailedIndexes: ptr.Deref(j.Status.FailedIndexes, "")}
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete, batchv1.JobFailed:
			s.Condition, s.Reason, s.Finished = string(c.Type), c.Reason, true
		case batchv1.JobFailureTarget, batchv1.JobSuccessCriteriaMet:
			s.TargetReason = c.Reason
		}
	}
	return s
}

// The failures of indexes 2, 4 and 6, a second after each starts, land
// together: with maxFailedIndexes 1 the job must end on the second of them,
// before a pod of index 5 is started (failed 5: indexes 2 and 4, and the
// three running pods the end stops). The built-in Job controller decides so
// when both failures reach it within its batch period (1 s) and starts
// index 5 when they do not: the spec holds the operator to the exact end in
// every run where its failures landed within half a second (and to the
// built-in controller's status where that is the exact end too), and
// needs the failures to land together in at least half the runs.
var landTogether = func(index int) podsim.Plan {
	if index == 2 || index == 4 || index == 6 {
		return podsim.Plan{Run: time.Second, ExitCode: podsim.ExitFailed}
	}
	return podsim.Plan{Run: 20 * time.Second}
}

// startDiffKubelets runs the pods of both kinds of job in ns the same way.
func startDiffKubelets(ns string) {
	GinkgoHelper()
	cs, err := kubernetes.NewForConfig(cluster.Config)
	Expect(err).NotTo(HaveOccurred())
	for _, kind := range []struct{ selector, index string }{
		{ibjv1.JobNameLabel, ibjv1.CompletionIndexLabel},
		{batchv1.JobNameLabel, batchv1.JobCompletionIndexAnnotation},
	} {
		sim := podsim.New(podsim.Options{
			Client: cs, Namespace: ns, LabelSelector: kind.selector, IndexLabels: []string{kind.index},
			Script:   func(_ *corev1.Pod, index int) podsim.Plan { return landTogether(index) },
			Shutdown: 100 * time.Millisecond, Workers: 8, ReportRunning: true,
		})
		runCtx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)
		Expect(sim.Run(runCtx)).To(Succeed())
	}
}

// diffPair is one run's statuses, and whether the operator's pods of
// indexes 2 and 4 failed within a batch period of each other (together).
type diffPair struct {
	ours, builtin diffStatus
	together      bool
}

// failedTogether reports whether the job's pods of indexes 2 and 4 ended
// within half a second of each other, by their containers' end times: on a
// loaded machine the simulator may start (and so fail) them further apart,
// and a failure that reaches a controller a second or more after the other
// is not decided with it by either controller (half a second leaves room
// for the watch's own delay).
func failedTogether(ctx SpecContext, ns, name string) bool {
	GinkgoHelper()
	var ends []time.Time
	for _, ix := range []int{2, 4} {
		for _, p := range podsOfIndex(ctx, ns, name, ix) {
			if p.Status.Phase == corev1.PodFailed {
				ends = append(ends, jobpod.FinishTime(&p))
			}
		}
	}
	if len(ends) != 2 || ends[0].IsZero() || ends[1].IsZero() {
		return false
	}
	d := ends[0].Sub(ends[1])
	return d < time.Second/2 && d > -time.Second/2
}

// builtinStatuses counts the built-in controller's (failed, succeeded) ends.
func builtinStatuses(results []diffPair) map[string]int {
	out := map[string]int{}
	for _, r := range results {
		out[fmt.Sprintf("failed %d succeeded %d", r.builtin.Failed, r.builtin.Succeeded)]++
	}
	return out
}

// runPair creates the same job as an IndexedBatchJob and a batch/v1 Job
// and returns both statuses once both are finished.
func runPair(ctx SpecContext, ns, name string) (ours, builtin diffStatus) {
	GinkgoHelper()
	job := harness.MakeIndexedBatchJob(name, ns).Completions(10).Parallelism(5).BackoffLimitPerIndex(0).MaxFailedIndexes(1).Obj()
	job.Spec.Template.Spec.NodeName = simNode
	Expect(k8sClient.Create(ctx, job)).To(Succeed())
	bj := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			Completions: ptr.To[int32](10), Parallelism: ptr.To[int32](5), CompletionMode: ptr.To(batchv1.IndexedCompletion),
			BackoffLimitPerIndex: ptr.To[int32](0), MaxFailedIndexes: ptr.To[int32](1), Template: *job.Spec.Template.DeepCopy(),
		},
	}
	Expect(k8sClient.Create(ctx, bj)).To(Succeed())
	Eventually(func(g Gomega) {
		j := getJob(ctx, ns, name)
		b := &batchv1.Job{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(bj), b)).To(Succeed())
		ours, builtin = ibjDiffStatus(j), batchDiffStatus(b)
		g.Expect(ours.Finished && builtin.Finished).To(BeTrue(), "both finished: ours %+v, built-in %+v", ours, builtin)
	}).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	return ours, builtin
}

var _ = Describe("Differential", Label("differential"), func() {
	It("decides failures that land together as the built-in Job controller does, run after run", func(ctx SpecContext) {
		By("starting kube-controller-manager with the built-in Job controller alone")
		proc, err := cluster.StartComponent(controlplane.ControllerManager, controlplane.Component{Flags: []string{"--controllers=job"}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(cluster.StopComponent(proc)).To(Succeed()) })
		ns := newNamespace(ctx)
		startDiffKubelets(ns)

		runs := diffRuns()
		results := make([]diffPair, runs)
		// One pair at a time, both created together: each controller
		// decides as fast as it can, on the same pod timeline.
		for i := range runs {
			name := fmt.Sprintf("together-%d", i)
			ours, builtin := runPair(ctx, ns, name)
			results[i] = diffPair{ours, builtin, failedTogether(ctx, ns, name)}
		}
		// The exact end: indexes 2 and 4 failed, the three other running
		// pods stopped and counted, no pod of index 5 or later started.
		exact := diffStatus{Failed: 5, FailedIndexes: "2,4", Condition: ibjv1.ConditionFailed,
			Reason: ibjv1.ReasonMaxFailedIndexesExceeded, TargetReason: ibjv1.ReasonMaxFailedIndexesExceeded, Finished: true}
		matched, builtinExact, together := 0, 0, 0
		var wrong []string
		for i, r := range results {
			if r.ours == r.builtin {
				matched++
			}
			if r.builtin == exact {
				builtinExact++
			}
			if r.together {
				together++
			}
			switch {
			case !r.together:
				// Not the scenario: the failures landed apart.
			case r.ours != exact:
				wrong = append(wrong, fmt.Sprintf("run %d: ours %+v, want %+v", i, r.ours, exact))
			case r.builtin == exact && r.ours != r.builtin:
				wrong = append(wrong, fmt.Sprintf("run %d: ours %+v, built-in %+v", i, r.ours, r.builtin))
			}
		}
		AddReportEntry("differential", fmt.Sprintf("failures landed together in %d of %d runs, ours exact in each of them; ours equal to the built-in Job controller in %d, the built-in exact in %d; built-in statuses: %v",
			together, runs, matched, builtinExact, builtinStatuses(results)))
		Expect(wrong).To(BeEmpty())
		Expect(together).To(BeNumerically(">=", runs/2), "the failures landed together in too few runs: the scenario did not play out")
		Expect(builtinExact).To(BeNumerically(">", 0), "the built-in controller never decided the failures together: the scenario did not play out")
	}, SpecTimeout(15*time.Minute))
})
