package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestInPlaceErrors(t *testing.T) {
	rule := func(container string) batchv1.PodFailurePolicyRule {
		return harness.OnExitCodes(batchv1.PodFailurePolicyActionCount, container, batchv1.PodFailurePolicyOnExitCodesOpIn, 3)
	}
	ownRules := func(job *ibjv1.IndexedBatchJob) {
		job.Spec.Template.Spec.Containers[0].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
		job.Spec.Template.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
			ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{1}}}}
	}
	cases := []struct {
		name    string
		rule    batchv1.PodFailurePolicyRule
		inPlace bool
		edit    func(*ibjv1.IndexedBatchJob)
		want    []string // the fields refused
	}{
		{name: "an InPlace rule on every container", rule: rule(""), inPlace: true},
		{name: "an InPlace rule on a regular container", rule: rule("main"), inPlace: true},
		{name: "an InPlace rule naming an init container", rule: rule("setup"), inPlace: true,
			want: []string{"spec.podFailurePolicy.rules[0].onExitCodes.containerName"}},
		{name: "a NewPod rule may name an init container", rule: rule("setup")},
		{name: "a template's own restart rules with an InPlace rule", rule: rule(""), inPlace: true, edit: ownRules,
			want: []string{"spec.template.spec.containers[0].restartPolicy", "spec.template.spec.containers[0].restartPolicyRules"}},
		{name: "a template's own restart rules without one", rule: rule(""), edit: ownRules},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := harness.MakeIndexedBatchJob("a", "ns").InitContainer("setup").PodFailurePolicy(tc.rule)
			if tc.inPlace {
				w.RetryInPlace(0)
			}
			job := w.Obj()
			if tc.edit != nil {
				tc.edit(job)
			}
			var got []string
			for _, e := range specErrors(job) {
				got = append(got, e.Field)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("refused %v, want %v", got, tc.want)
			}
		})
	}
}

// The nodes are read at most once a recheck period, and only for a job
// that retries in place; only kubelets older than 1.35 are counted.
func TestOldKubeletsAreReadAtMostOncePerRecheck(t *testing.T) {
	node := func(name, kubelet string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: kubelet}}}
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	lists := 0
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(node("a", "v1.34.2"), node("b", "v1.33.0-eks-1"), node("c", "v1.35.0"), node("d", "v1.37.2")).
		WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lists++
			return cl.List(ctx, list, opts...)
		}}).Build()
	v := NewValidator(c, time.Second)
	v.SetKubeletsRecheck(time.Hour)
	plain := harness.MakeIndexedBatchJob("a", "ns").
		PodFailurePolicy(harness.OnExitCodes(batchv1.PodFailurePolicyActionCount, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3)).Obj()
	if w := v.oldKubeletWarnings(context.Background(), plain); len(w) != 0 || lists != 0 {
		t.Errorf("a job without retry InPlace: warnings %v after %d lists, want none", w, lists)
	}
	inPlace := plain.DeepCopy()
	inPlace.Spec.PodFailurePolicy.Rules[0].Retry = ibjv1.RetryInPlace
	for range 3 {
		w := v.oldKubeletWarnings(context.Background(), inPlace)
		if len(w) != 1 || !strings.HasPrefix(w[0], "2 nodes run a kubelet older than v1.35") || !strings.Contains(w[0], "replaced with a new pod") {
			t.Errorf("warnings %v, want one about 2 nodes", w)
		}
	}
	if lists != 1 {
		t.Errorf("the nodes were listed %d times, want once within the recheck period", lists)
	}
}
