package node

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// unpullable is an image no registry serves: the node reaches no registry,
// and the name resolves nowhere.
const unpullable = "registry.invalid/indexed-batch-job/missing:v1"

var _ = Describe("Real failures", Label("node", "node-failure"), func() {
	It("reports pods whose image cannot be pulled as pending, and activeDeadlineSeconds ends both jobs alike", func(ctx SpecContext) {
		ns := recordedNamespace(ctx)
		createBoth(ns, "unpullable", `    completions: 2
    parallelism: 2
    activeDeadlineSeconds: 20
    template:
      spec:
        restartPolicy: Never
        containers:
        - name: main
          image: `+unpullable+`
          imagePullPolicy: IfNotPresent
`)
		By("the kubelet reports the pulls failing while both jobs wait, their pods pending, none counted")
		Eventually(func(g Gomega) {
			for _, kind := range []string{ibjKind, jobKind} {
				waiting := pullFailures(ctx, g, ns, kind)
				g.Expect(waiting).To(HaveLen(2), "%s: pods waiting on their image", kind)
				o, err := getOutcome(ctx, kind, ns, "unpullable")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(o.Failed).To(BeZero(), "%s: a pull failure is not a pod failure", kind)
				g.Expect(o.Active).To(Equal(int64(2)))
				g.Expect(o.Ready).To(BeZero())
			}
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())

		ibj, job := waitBoth(ctx, ns, "unpullable", jobTimeout)
		report(ns, "unpullable", ibj, job)
		Expect(ibj).To(Equal(outcome{Failed: 2, Conditions: failedConditions("DeadlineExceeded")}))
		Expect(job).To(Equal(ibj), "the built-in Job controller's status on the same node")
	})
})

// pullFailures lists the reasons the kind's pods in ns wait with, for the
// pods that wait on their image (ErrImagePull, ImagePullBackOff).
func pullFailures(ctx context.Context, g Gomega, ns, kind string) []string {
	var pods *corev1.PodList
	var err error
	selector := map[string]string{ibjKind: "batch.indexedjob.dev/job-name=unpullable", jobKind: "batch.kubernetes.io/job-name=unpullable"}[kind]
	pods, err = clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	g.Expect(err).NotTo(HaveOccurred())
	var reasons []string
	for _, p := range pods.Items {
		g.Expect(p.Status.Phase).To(Equal(corev1.PodPending), "%s: pod %s", kind, p.Name)
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
				reasons = append(reasons, w.Reason)
			}
		}
	}
	return reasons
}
