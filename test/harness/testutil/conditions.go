package testutil

import (
	"context"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// Poll is how often the helpers that wait read the API server again.
const Poll = 200 * time.Millisecond

// WaitForJobCondition waits, up to timeout, until the job has condition
// typ True, and returns the job as it then was.
func WaitForJobCondition(ctx context.Context, c client.Client, namespace, name, typ string, timeout time.Duration) *ibjv1.IndexedBatchJob {
	ginkgo.GinkgoHelper()
	job := &ibjv1.IndexedBatchJob{}
	gomega.Eventually(func(g gomega.Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, job)).To(gomega.Succeed())
		g.Expect(apimeta.IsStatusConditionTrue(job.Status.Conditions, typ)).To(gomega.BeTrue(), "condition %s of %s/%s", typ, namespace, name)
	}, timeout, Poll).Should(gomega.Succeed())
	return job
}
