package node

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/nodecluster"
)

// preemptCPU is what each pod of the preemption spec requests: two of them
// fill a node of this host's two CPUs, so a third pod preempts one.
const preemptCPU = "900m"

var _ = Describe("Real failures", Label("node", "node-failure"), func() {
	It("counts a pod preempted by the scheduler (DisruptionTarget PreemptionByScheduler) as both controllers do", func(ctx SpecContext) {
		Expect(len(cluster.Nodes)).To(BeNumerically(">=", 2), "one node per job")
		ns := recordedNamespace(ctx)
		// Each job on a node of its own, filling it: the IndexedBatchJob on
		// the first node, the batch/v1 Job on the second.
		for i, kind := range []string{ibjKind, jobKind} {
			spec := fmt.Sprintf(`    completions: 2
    parallelism: 2
    template:
      spec:
        restartPolicy: Never
        nodeSelector: {kubernetes.io/hostname: %s}
        containers:
        - name: main
          image: %s
          args: ["--duration=40s"]
          resources: {requests: {cpu: %s}}
`, cluster.Nodes[i], nodecluster.WorkerImage, preemptCPU)
			out, err := kc.RunWithStdin(jobManifest(kind, "preempted", ns, spec), "create", "-f", "-")
			Expect(err).NotTo(HaveOccurred(), "creating the %s:\n%s", kind, out)
		}
		for _, kind := range []string{ibjKind, jobKind} {
			waitRunning(ctx, kind, ns, "preempted", 2)
		}

		By("a pod of a higher priority on each node: the scheduler preempts one pod of each job")
		high := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "ibj-node-high-" + ns}, Value: 1000000}
		_, err := clientset.SchedulingV1().PriorityClasses().Create(ctx, high, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) {
			_ = clientset.SchedulingV1().PriorityClasses().Delete(ctx, high.Name, metav1.DeleteOptions{})
		})
		for i := range 2 {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("urgent-%d", i), Namespace: ns},
				Spec: corev1.PodSpec{
					PriorityClassName: high.Name, RestartPolicy: corev1.RestartPolicyNever,
					NodeSelector: map[string]string{"kubernetes.io/hostname": cluster.Nodes[i]},
					Containers: []corev1.Container{{Name: "main", Image: nodecluster.WorkerImage, Args: []string{"--duration=5s"},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(preemptCPU)}}}},
				},
			}
			// The API server's priority admission reads PriorityClasses from
			// its own cache, which may not hold the new class yet: until it
			// does, the create is refused as naming an unknown class.
			Eventually(func(ctx context.Context) error {
				_, err := clientset.CoreV1().Pods(ns).Create(ctx, pod.DeepCopy(), metav1.CreateOptions{})
				if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "no PriorityClass with name") {
					return err
				}
				Expect(err).NotTo(HaveOccurred(), "creating %s", pod.Name)
				return nil
			}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(),
				"the API server knows PriorityClass %s", high.Name)
		}

		ibj, job := waitBoth(ctx, ns, "preempted", jobTimeout)
		report(ns, "preempted", ibj, job)
		Expect(ibj).To(Equal(outcome{Succeeded: 2, Failed: 1, CompletedIndexes: bothIndexes,
			Conditions: completedConditions()}))
		Expect(job).To(Equal(ibj), "the built-in Job controller's status on the same nodes")
		for _, kind := range []string{ibjKind, jobKind} {
			var preempted []string
			for _, p := range podsOf(kind, ns, "preempted") {
				if p.Disruption == "PreemptionByScheduler" {
					preempted = append(preempted, p.Name)
				}
			}
			Expect(preempted).To(HaveLen(1), "%s: one pod preempted by the scheduler", kind)
		}
	}, SpecTimeout(5*time.Minute))
})
