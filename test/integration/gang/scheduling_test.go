package gang_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/workloadapi"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

var _ = Describe("A job with spec.scheduling", func() {
	It("gets a Workload and a PodGroup that carry its policy, topology, disruption mode and shared claims, as the API server stores them", func(ctx SpecContext) {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{Prefix: "ibj-sched-"})
		job := harness.MakeIndexedBatchJob("train", ns).Completions(3).Parallelism(3).
			Gang(2).Topology("topology.kubernetes.io/zone").DisruptTogether(true).SharedClaim("gpu", "shared-gpus", false).Obj()
		// The pods consume the group's claim with a claim of the same name
		// and source of their own, as upstream's pods do.
		job.Spec.Template.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("shared-gpus")}}
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		name := job.Name + "-" + string(job.UID)[:8]

		wantSpec := map[string]any{
			"schedulingPolicy":      map[string]any{"gang": map[string]any{"minCount": int64(2)}},
			"schedulingConstraints": map[string]any{"topology": []any{map[string]any{"key": "topology.kubernetes.io/zone"}}},
			"disruptionMode":        map[string]any{"all": map[string]any{}},
			"resourceClaims":        []any{map[string]any{"name": "gpu", "resourceClaimName": "shared-gpus"}},
		}
		By("the Workload's template and the PodGroup, as stored, holding every part")
		wl := get(ctx, ns, name, metav1.GroupVersionKind(workloadapi.WorkloadGVK))
		templates, _, _ := unstructured.NestedSlice(wl.Object, "spec", "podGroupTemplates")
		Expect(templates).To(HaveLen(1))
		for field, want := range wantSpec {
			Expect(templates[0]).To(HaveKeyWithValue(field, want), "Workload template's %s", field)
		}
		pg := get(ctx, ns, name, metav1.GroupVersionKind(workloadapi.PodGroupGVK))
		for field, want := range wantSpec {
			got, _, _ := unstructured.NestedFieldNoCopy(pg.Object, "spec", field)
			Expect(got).To(Equal(want), "PodGroup's %s", field)
		}

		By("condition PodGroupReady naming the gang and nothing dropped")
		Eventually(func(g Gomega) {
			var j ibjv1.IndexedBatchJob
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(job), &j)).To(Succeed())
			c := meta.FindStatusCondition(j.Status.Conditions, ibjv1.ConditionPodGroupReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Message).To(Equal("Workload and PodGroup " + name + ": the scheduler binds the job's pods only when it can bind 2 at once"))
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())

		By("every pod naming the PodGroup, with the template's claim on the group's ResourceClaim")
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(k8sClient.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(3))
			for _, p := range pods.Items {
				g.Expect(p.Spec.SchedulingGroup).To(Equal(&corev1.PodSchedulingGroup{PodGroupName: ptr.To(name)}), p.Name)
				g.Expect(p.Spec.ResourceClaims).To(Equal(job.Spec.Template.Spec.ResourceClaims), p.Name)
			}
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())

		By("a new minCount on the job: the one mutable field reaches both objects")
		Eventually(func() error {
			var j ibjv1.IndexedBatchJob
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(job), &j); err != nil {
				return err
			}
			j.Spec.Scheduling.SchedulingPolicy.Gang.MinCount = ptr.To[int32](3)
			return k8sClient.Update(ctx, &j)
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
		for _, gvk := range []metav1.GroupVersionKind{
			metav1.GroupVersionKind(workloadapi.WorkloadGVK), metav1.GroupVersionKind(workloadapi.PodGroupGVK),
		} {
			// A minCount other than the one ensureGang remembers is written at once.
			Eventually(func() int64 { return minCount(get(ctx, ns, name, gvk)) }, 45*time.Second, 500*time.Millisecond).
				Should(Equal(int64(3)), gvk.Kind)
		}
	})

	It("gets a PodGroup of the basic policy, whose pods still point at it", func(ctx SpecContext) {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{Prefix: "ibj-sched-"})
		job := harness.MakeIndexedBatchJob("basic", ns).Completions(2).Parallelism(2).BasicScheduling().Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		name := job.Name + "-" + string(job.UID)[:8]
		pg := get(ctx, ns, name, metav1.GroupVersionKind(workloadapi.PodGroupGVK))
		policy, _, _ := unstructured.NestedMap(pg.Object, "spec", "schedulingPolicy")
		Expect(policy).To(Equal(map[string]any{"basic": map[string]any{}}))
		mode, _, _ := unstructured.NestedMap(pg.Object, "spec", "disruptionMode")
		Expect(mode).To(Equal(map[string]any{"single": map[string]any{}}), "the API server's default")
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(k8sClient.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(2))
			for _, p := range pods.Items {
				g.Expect(p.Spec.SchedulingGroup).To(Equal(&corev1.PodSchedulingGroup{PodGroupName: ptr.To(name)}), p.Name)
			}
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
	})
})
