package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/controller"
	"github.com/indexed-batch-job/indexed-batch-job/internal/failrecord"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// mainContainer is the container of harness.MakeIndexedBatchJob's template.
const mainContainer = "main"

var _ = Describe("The failure record", func() {
	It("says why each index failed after its pods are gone and the operator restarted, and retries avoid the node", func() {
		job := harness.MakeIndexedBatchJob("record", ns).Completions(3).Parallelism(3).BackoffLimitPerIndex(1).
			NodeAvoidance(ibjv1.NodeAvoidancePreferred, 0).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		// Index 0 fails once then succeeds; index 1 fails for good (exit 7
		// twice); index 2 succeeds.
		k := startKubelet(ns, job.Name, func(ix, attempt int) podsim.Plan {
			switch {
			case ix == 0 && attempt == 0:
				return podsim.Plan{ExitCode: 3}
			case ix == 1:
				return podsim.Plan{ExitCode: 7}
			}
			return podsim.Plan{}
		})
		defer k.Stop()
		Eventually(func() bool { return controller.IsFinished(getJob(ctx, ns, job.Name)) }, timeout).Should(BeTrue())

		By("the retries avoiding the node where their index failed")
		for _, p := range jobPods(ctx, ns, job.Name) {
			if p.Annotations[ibjv1.AttemptAnnotation] == "0" {
				continue
			}
			Expect(p.Spec.Affinity).NotTo(BeNil(), "retry %s", p.Name)
			prefs := p.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
			Expect(prefs).To(HaveLen(1), "retry %s", p.Name)
			Expect(prefs[0].Weight).To(Equal(int32(100)))
			Expect(prefs[0].Preference.MatchFields).To(ConsistOf(corev1.NodeSelectorRequirement{Key: "metadata.name",
				Operator: corev1.NodeSelectorOpNotIn, Values: []string{podsim.EnvtestNode}}))
		}

		By("deleting every pod and restarting the operator")
		op.stop()
		for _, p := range jobPods(ctx, ns, job.Name) {
			Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, &p))).To(Succeed())
		}
		Eventually(func() []corev1.Pod { return jobPods(ctx, ns, job.Name) }, timeout).Should(BeEmpty())
		op = startOperator()

		By("reading the record from its ConfigMap")
		var cm corev1.ConfigMap
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: failrecord.ShardName(job.Name, 0)}, &cm)).To(Succeed())
		j := getJob(ctx, ns, job.Name)
		Expect(metav1.IsControlledBy(&cm, j)).To(BeTrue(), "the record is controlled by the job, and goes with it")
		Expect(cm.Labels).To(HaveKeyWithValue(ibjv1.FailureRecordLabel, string(j.UID)))
		attempts, bad := failrecord.DecodeShard(cm.Data[failrecord.DataKey])
		Expect(bad).To(BeZero())
		type seen struct {
			Index, Attempt, Exit int32
			Node, Container      string
			Action               failrecord.Action
		}
		got := make([]seen, 0, len(attempts))
		for _, a := range attempts {
			Expect(a.Time).To(BeTemporally("~", time.Now(), time.Minute))
			got = append(got, seen{a.Index, a.Attempt, a.ExitCode, a.Node, a.Container, a.Action})
		}
		Expect(got).To(ConsistOf(
			seen{0, 0, 3, podsim.EnvtestNode, mainContainer, failrecord.ActionCount},
			seen{1, 0, 7, podsim.EnvtestNode, mainContainer, failrecord.ActionCount},
			seen{1, 1, 7, podsim.EnvtestNode, mainContainer, failrecord.ActionCount},
		))
		Expect(*j.Status.FailedIndexes).To(Equal("1"))
	})
})
