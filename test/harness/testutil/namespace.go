// Package testutil holds the Ginkgo helpers every suite's specs share: a
// namespace per spec that reports what was in it when the spec fails
// (NewNamespace), the pinned kubectl run as a user would (Kubectl), waits on
// a job's conditions (WaitForJobCondition), and Kueue's queues (Queue). The
// suites call these rather than copies of their own.
package testutil

import (
	"context"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NamespaceOptions says how NewNamespace makes a spec's namespace and what
// it does when the spec ends.
type NamespaceOptions struct {
	// Prefix starts the generated name ("ibj-" when empty).
	Prefix string
	// Labels are the namespace's labels (a Pod Security level, say).
	Labels map[string]string
	// OnFailure runs when the spec failed, before the namespace is deleted:
	// it adds report entries for a look at what went wrong (see
	// Kubectl.ReportNamespace).
	OnFailure func(namespace string)
	// Delete deletes the namespace when the spec ends. Off by default:
	// envtest and kwok clusters have no namespace controller, so a deleted
	// namespace stays Terminating and its objects stay too.
	Delete bool
	// WaitForServiceAccount waits for the namespace's default
	// ServiceAccount, which kube-controller-manager creates and a real
	// kubelet's pods need.
	WaitForServiceAccount bool
}

// NewNamespace creates a namespace for one spec with c and returns its name.
func NewNamespace(ctx context.Context, c client.Client, opts NamespaceOptions) string {
	ginkgo.GinkgoHelper()
	prefix := opts.Prefix
	if prefix == "" {
		prefix = "ibj-"
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix, Labels: opts.Labels}}
	gomega.Expect(c.Create(ctx, ns)).To(gomega.Succeed())
	if opts.OnFailure != nil || opts.Delete {
		ginkgo.DeferCleanup(func(ctx context.Context) {
			if opts.OnFailure != nil && ginkgo.CurrentSpecReport().Failed() {
				opts.OnFailure(ns.Name)
			}
			if opts.Delete {
				gomega.Expect(client.IgnoreNotFound(c.Delete(ctx, ns))).To(gomega.Succeed())
			}
		})
	}
	if opts.WaitForServiceAccount {
		gomega.Eventually(func() error {
			return c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "default"}, &corev1.ServiceAccount{})
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	}
	return ns.Name
}
