package webhook_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

// installMutation installs a MutatingAdmissionPolicy of patch for the pods
// of namespace ns and waits until a dry-run pod shows it (a policy takes a
// moment to reach the API server's admission chain); shows tells whether a
// pod came back mutated.
func installMutation(ns, name, patch string, shows func(*corev1.Pod) bool) {
	GinkgoHelper()
	policy, binding := harness.PodMutatePolicy(name, ns, "", patch)
	Expect(k8sClient.Create(ctx, policy)).To(Succeed())
	Expect(k8sClient.Create(ctx, binding)).To(Succeed())
	DeferCleanup(func() {
		Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), binding))).To(Succeed())
		Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), policy))).To(Succeed())
	})
	Eventually(func() bool {
		probe := harness.MakeIndexedBatchJob("probe", ns).Obj()
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns,
			Labels:      map[string]string{ibjv1.JobNameLabel: "probe"},
			Annotations: map[string]string{ibjv1.CompletionIndexLabel: "0"}}, Spec: probe.Spec.Template.Spec}
		return k8sClient.Create(ctx, pod, client.DryRunAll) == nil && shows(pod)
	}).Should(BeTrue(), "the MutatingAdmissionPolicy never reached the admission chain")
}

var _ = Describe("A pod template the cluster's admission chain rewrites", func() {
	It("refuses a job whose pods would lose the job-name label, naming the field", func() {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
		installMutation(ns, "strip-job-name-"+ns, harness.RemoveLabelPatch(ibjv1.JobNameLabel),
			func(p *corev1.Pod) bool { _, ok := p.Labels[ibjv1.JobNameLabel]; return !ok })
		err := k8sClient.Create(ctx, harness.MakeIndexedBatchJob("stripped", ns).Obj())
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(causeFields(err)).To(ConsistOf("spec.template.metadata.labels[" + ibjv1.JobNameLabel + "]"))
		Expect(err.Error()).To(And(ContainSubstring("was removed in this job's dry-run pod"),
			ContainSubstring("MutatingAdmissionPolicy"), ContainSubstring("exempt this job's pods")))
	})

	It("admits, with a warning naming the field, a job whose pods' index may be rewritten", func() {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
		installMutation(ns, "rewrite-index-"+ns, harness.SetAnnotationPatch(ibjv1.CompletionIndexLabel, "9"),
			func(p *corev1.Pod) bool { return p.Annotations[ibjv1.CompletionIndexLabel] == "9" })
		warnings.take()
		Expect(k8sClient.Create(ctx, harness.MakeIndexedBatchJob("rewritten", ns).Obj())).To(Succeed())
		Expect(warnings.take()).To(ContainElement(And(
			ContainSubstring("metadata.annotations["+ibjv1.CompletionIndexLabel+`] was changed from "0" to "9"`),
			ContainSubstring("PodMutated"))))
	})

	It("admits, without a word of it, a job whose pods get a label of the cluster's own", func() {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
		installMutation(ns, "add-team-"+ns, `[JSONPatch{op: "add", path: "/metadata/labels/team", value: "ml"}]`,
			func(p *corev1.Pod) bool { return p.Labels["team"] == "ml" })
		warnings.take()
		Expect(k8sClient.Create(ctx, harness.MakeIndexedBatchJob("labelled", ns).Obj())).To(Succeed())
		Expect(warnings.take()).To(BeEmpty())
	})
})
