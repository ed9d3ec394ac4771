package e2e

import (
	"context"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// What the admission-chain specs share: the label their mutations are
// scoped to, the policies that make them, and a record of every pod
// create as admission left it.

// chainLabel is the template label of the admission-chain specs' jobs; each
// mutation is scoped to the pods with its own value (an objectSelector), so
// that nothing else of the suite meets it.
const chainLabel = "admission-chain.e2e.indexedjob.dev/mutation"

// chainClientset is a clientset on the suite's cluster.
func chainClientset() kubernetes.Interface {
	GinkgoHelper()
	cs, err := kubernetes.NewForConfig(cluster.Config)
	Expect(err).NotTo(HaveOccurred())
	return cs
}

// chainPolicy is a MutatingAdmissionPolicy applying patch (a CEL expression
// giving a list of JSONPatch) to the pod creates of namespace ns labelled
// chainLabel=id (its binding's objectSelector), and its binding. Dry runs
// are left alone unless dryRuns: the operator's webhook dry-runs a pod of
// each job it admits, and refuses the job when that pod comes back without
// what every pod of the job must carry, so a policy that applies only to
// real creates is one that came after the job was admitted.
func chainPolicy(ns, id string, dryRuns bool, patch string, conditions ...admissionv1.MatchCondition) (*admissionv1.MutatingAdmissionPolicy, *admissionv1.MutatingAdmissionPolicyBinding) {
	match := ""
	if !dryRuns {
		match = "!request.dryRun"
	}
	policy, binding := harness.PodMutatePolicy("chain-"+id+"-"+ns, ns, match, patch)
	policy.Spec.MatchConditions = append(policy.Spec.MatchConditions, conditions...)
	binding.Spec.MatchResources.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{chainLabel: id}}
	return policy, binding
}

// installPolicy creates a policy and its binding, deleted when the spec
// ends, and returns what deletes the binding earlier.
func installPolicy(ctx context.Context, policy *admissionv1.MutatingAdmissionPolicy, binding *admissionv1.MutatingAdmissionPolicyBinding) func(context.Context) {
	GinkgoHelper()
	Expect(k8sClient.Create(ctx, policy)).To(Succeed())
	Expect(k8sClient.Create(ctx, binding)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, binding))).To(Succeed())
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, policy))).To(Succeed())
	})
	return func(ctx context.Context) {
		GinkgoHelper()
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, binding))).To(Succeed())
	}
}

// installChainPolicy installs chainPolicy(ns, id, dryRuns, patch) and
// returns what deletes its binding.
func installChainPolicy(ctx context.Context, ns, id string, dryRuns bool, patch string) func(context.Context) {
	GinkgoHelper()
	policy, binding := chainPolicy(ns, id, dryRuns, patch)
	return installPolicy(ctx, policy, binding)
}

// removeLabelsPatch removes each of keys the pod has.
func removeLabelsPatch(keys ...string) string {
	return celList(keys) + `.filter(k, k in object.metadata.labels).map(k, JSONPatch{op: "remove", path: "/metadata/labels/" + jsonpatch.escapeKey(k)})`
}

// setAnnotationsPatch sets each of keys the pod has to value.
func setAnnotationsPatch(value string, keys ...string) string {
	return celList(keys) + `.filter(k, has(object.metadata.annotations) && k in object.metadata.annotations)` +
		`.map(k, JSONPatch{op: "replace", path: "/metadata/annotations/" + jsonpatch.escapeKey(k), value: "` + value + `"})`
}

// celList is a CEL list of strings.
func celList(items []string) string {
	out := "["
	for i, s := range items {
		if i > 0 {
			out += ", "
		}
		out += "'" + s + "'"
	}
	return out + "]"
}

// waitInEffect creates a probe pod in ns labelled chainLabel=id (a dry run
// with dryRun) until admission gives it back with the mutation (applied):
// policies, bindings, LimitRanges and namespaces reach admission through
// the API server's informers, a moment after they are written.
func waitInEffect(ctx context.Context, ns, id string, dryRun bool, applied func(*corev1.Pod) bool) {
	GinkgoHelper()
	cs := chainClientset()
	Eventually(func(g Gomega) {
		probe := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				GenerateName: "probe-", Namespace: ns,
				Labels: map[string]string{chainLabel: id, ibjv1.JobNameLabel: "probe", ibjv1.CompletionIndexLabel: "0",
					batchv1.ControllerUidLabel: "probe"},
				Annotations: map[string]string{ibjv1.CompletionIndexLabel: "0", batchv1.JobCompletionIndexAnnotation: "0"},
			},
			Spec: corev1.PodSpec{NodeName: "probe-node", RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "main", Image: harness.DefaultImage}}},
		}
		opts := metav1.CreateOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		got, err := cs.CoreV1().Pods(ns).Create(ctx, probe, opts)
		g.Expect(err).NotTo(HaveOccurred())
		if !dryRun {
			g.Expect(cs.CoreV1().Pods(ns).Delete(ctx, got.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})).To(Succeed())
		}
		g.Expect(applied(got)).To(BeTrue(), "the probe pod came back without the mutation: %+v", got.ObjectMeta)
	}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(300 * time.Millisecond).Should(Succeed())
}

// podCreate is one pod create as a watch saw it: the pod as admission left
// it, the controller that created it ("<Kind>/<name>", "" for none), and
// when the watch told of it.
type podCreate struct {
	at    time.Time
	owner string
	pod   *corev1.Pod
}

// chainPods records every pod create of a namespace from a watch, and makes
// the kubelet's last call for the pods no simulator plays (those without
// either controller's job-name label, which admission stripped): once
// deleted, they go at once, as a kubelet makes them go once it killed
// their containers.
type chainPods struct {
	mu      sync.Mutex
	creates []podCreate
}

// watchChainPods starts a chainPods on ns until the spec ends.
func watchChainPods(ctx context.Context, ns string) *chainPods {
	GinkgoHelper()
	cs := chainClientset()
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	w, err := watchtools.NewRetryWatcherWithContext(context.Background(), list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().Pods(ns).Watch(ctx, o)
		},
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	c := &chainPods{}
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ev.Type == watch.Added {
				c.mu.Lock()
				c.creates = append(c.creates, podCreate{at: time.Now(), owner: controllerOf(pod), pod: pod})
				c.mu.Unlock()
			}
			if pod.DeletionTimestamp != nil && !played(pod) {
				err := cs.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{
					GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
					GinkgoWriter.Printf("admission chain: deleting %s/%s: %v\n", ns, pod.Name, err)
				}
			}
		}
	}()
	return c
}

// played: a simulator plays the pod (they select by job-name label).
func played(p *corev1.Pod) bool {
	_, ours := p.Labels[ibjv1.JobNameLabel]
	_, builtin := p.Labels[batchv1.JobNameLabel]
	return ours || builtin
}

// controllerOf names a pod's controller as "<Kind>/<name>".
func controllerOf(p *corev1.Pod) string {
	if ref := metav1.GetControllerOf(p); ref != nil {
		return ref.Kind + "/" + ref.Name
	}
	return ""
}

// of returns the creates of owner's pods, in order.
func (c *chainPods) of(owner string) []podCreate {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []podCreate
	for _, pc := range c.creates {
		if pc.owner == owner {
			out = append(out, pc)
		}
	}
	return out
}

// within counts the creates told of before end.
func within(creates []podCreate, end time.Time) int {
	n := 0
	for _, pc := range creates {
		if pc.at.Before(end) {
			n++
		}
	}
	return n
}

// firstWith is the first of creates whose pod applied says of, and whether
// there is one.
func firstWith(creates []podCreate, applied func(*corev1.Pod) bool) (podCreate, bool) {
	for _, pc := range creates {
		if applied(pc.pod) {
			return pc, true
		}
	}
	return podCreate{}, false
}
