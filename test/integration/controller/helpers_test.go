package controller_test

import (
	"context"
	"slices"
	"sort"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// startKubelet starts the shared pod simulator for the pods of one job;
// each running pod ends as plan says for its index and attempt.
func startKubelet(ns, job string, plan func(index, attempt int) podsim.Plan) *podsim.Simulator {
	GinkgoHelper()
	sim := podsim.New(podsim.ForJob(clientset, ns, job, plan))
	Expect(sim.Run(context.Background())).To(Succeed())
	return sim
}

// failingIndexes is a kubelet plan: pods of the given indexes exit 1,
// every other pod succeeds.
func failingIndexes(failing ...int) func(index, attempt int) podsim.Plan {
	return func(ix, _ int) podsim.Plan {
		if slices.Contains(failing, ix) {
			return podsim.Plan{ExitCode: 1}
		}
		return podsim.Plan{}
	}
}

// jobPods lists the pods of a job, by name.
func jobPods(ctx context.Context, ns, job string) []corev1.Pod {
	var list corev1.PodList
	Expect(k8sClient.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{ibjv1.JobNameLabel: job})).To(Succeed())
	sort.Slice(list.Items, func(a, b int) bool { return list.Items[a].Name < list.Items[b].Name })
	return list.Items
}

// getJob reads the job fresh from the API server.
func getJob(ctx context.Context, ns, name string) *ibjv1.IndexedBatchJob {
	job := &ibjv1.IndexedBatchJob{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, job)).To(Succeed())
	return job
}

// expectNoFinalizers checks that no pod of the job keeps a finalizer of the
// operator (tracking or index-retry).
func expectNoFinalizers(ctx context.Context, ns, job string) {
	Eventually(func() []string {
		var held []string
		for _, p := range jobPods(ctx, ns, job) {
			for _, f := range p.Finalizers {
				if f == ibjv1.TrackingFinalizer || f == ibjv1.IndexRetryFinalizer {
					held = append(held, p.Name)
				}
			}
		}
		return held
	}, 20*time.Second, 100*time.Millisecond).Should(BeEmpty())
}
