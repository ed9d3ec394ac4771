package testutil

import (
	"context"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// Queue is a Kueue ResourceFlavor and a ClusterQueue with CPU quota on it,
// both named Name, and, when LocalQueue is set, a LocalQueue for it.
type Queue struct {
	// Name names the ResourceFlavor and the ClusterQueue.
	Name string
	// CPU is the ClusterQueue's nominal CPU quota.
	CPU resource.Quantity
	// Flavor is the ResourceFlavor's spec: the node labels and tolerations
	// of the flavor's nodes, its topology.
	Flavor kueuev1beta2.ResourceFlavorSpec
	// Preemption is the ClusterQueue's preemption policy, if any.
	Preemption *kueuev1beta2.ClusterQueuePreemption
	// AdmissionChecks are the ClusterQueue's admission checks (MultiKueue's).
	AdmissionChecks []kueuev1beta2.AdmissionCheckReference
	// LocalQueue is the LocalQueue to create for the ClusterQueue, in its
	// namespace and with its name, or nil.
	LocalQueue *client.ObjectKey
}

// Objects are the queue's objects, in the order to create them.
func (q Queue) Objects() []client.Object {
	cq := &kueuev1beta2.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: q.Name},
		Spec: kueuev1beta2.ClusterQueueSpec{
			NamespaceSelector: &metav1.LabelSelector{},
			ResourceGroups: []kueuev1beta2.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
				Flavors: []kueuev1beta2.FlavorQuotas{{
					Name:      kueuev1beta2.ResourceFlavorReference(q.Name),
					Resources: []kueuev1beta2.ResourceQuota{{Name: corev1.ResourceCPU, NominalQuota: q.CPU}},
				}},
			}},
			Preemption: q.Preemption,
		},
	}
	if len(q.AdmissionChecks) > 0 {
		rules := make([]kueuev1beta2.AdmissionCheckStrategyRule, 0, len(q.AdmissionChecks))
		for _, name := range q.AdmissionChecks {
			rules = append(rules, kueuev1beta2.AdmissionCheckStrategyRule{Name: name})
		}
		cq.Spec.AdmissionChecksStrategy = &kueuev1beta2.AdmissionChecksStrategy{AdmissionChecks: rules}
	}
	objs := []client.Object{
		&kueuev1beta2.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: q.Name}, Spec: q.Flavor},
		cq,
	}
	if q.LocalQueue != nil {
		objs = append(objs, &kueuev1beta2.LocalQueue{
			ObjectMeta: metav1.ObjectMeta{Name: q.LocalQueue.Name, Namespace: q.LocalQueue.Namespace},
			Spec:       kueuev1beta2.LocalQueueSpec{ClusterQueue: kueuev1beta2.ClusterQueueReference(q.Name)},
		})
	}
	return objs
}

// CreateQueue creates the queue's objects with c and, if timeout is not
// zero, waits up to timeout until the ClusterQueue is Active (a Kueue that
// runs its controllers makes it so once its flavor exists).
func CreateQueue(ctx context.Context, c client.Client, q Queue, timeout time.Duration) {
	ginkgo.GinkgoHelper()
	for _, obj := range q.Objects() {
		gomega.Expect(c.Create(ctx, obj)).To(gomega.Succeed())
	}
	if timeout == 0 {
		return
	}
	gomega.Eventually(func(g gomega.Gomega) {
		cq := &kueuev1beta2.ClusterQueue{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: q.Name}, cq)).To(gomega.Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(cq.Status.Conditions, kueuev1beta2.ClusterQueueActive)).To(gomega.BeTrue(), "ClusterQueue %s Active", q.Name)
	}, timeout, Poll).Should(gomega.Succeed())
}
