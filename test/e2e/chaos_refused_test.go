package e2e

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// refusedHexDigits are the last characters of a pod UID that the chaos
// policy refuses: 5 of the 16 hex digits, about 31% of creates. The API
// server gives a pod its UID before validating admission, so each create
// (each new UID) is refused or let through at random.
var refusedHexDigits = []string{"0", "3", "6", "9", "c"}

// refuseAtRandom installs a ValidatingAdmissionPolicy, bound to ns, that
// refuses about 31% of the creates of the job's pods, as a policy engine,
// a quota or a LimitRange refuses some creates of a busy namespace.
func refuseAtRandom(ctx SpecContext, ns, job string) {
	GinkgoHelper()
	name := "refuse-at-random-" + ns
	digits := "['" + strings.Join(refusedHexDigits, "','") + "']"
	policy, binding := harness.PodCreatePolicy(name, ns,
		fmt.Sprintf(`has(object.metadata.labels) && '%[1]s' in object.metadata.labels && object.metadata.labels['%[1]s'] == '%[2]s'`, ibjv1.JobNameLabel, job),
		fmt.Sprintf(`!%s.exists(d, object.metadata.uid.endsWith(d))`, digits), "refused at random by the chaos policy")
	Expect(k8sClient.Create(ctx, policy)).To(Succeed())
	Expect(k8sClient.Create(ctx, binding)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, binding))).To(Succeed())
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, policy))).To(Succeed())
	})
}

// failedCreates counts the job's FailedCreate events.
func failedCreates(ctx SpecContext, ns, job string) int {
	GinkgoHelper()
	var events eventsv1.EventList
	Expect(k8sClient.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
	n := 0
	for _, e := range events.Items {
		if e.Regarding.Name == job && e.Reason == "FailedCreate" {
			n++
		}
	}
	return n
}

var _ = Describe("Chaos from the cluster", Label("chaos"), func() {
	It("keeps a job exact while a policy refuses about 30% of its pod creates and running pods are deleted", func(ctx SpecContext) {
		cfg := loadChaosConfig()
		// A quarter of the SIGKILL run's size: every refusal costs the job
		// a retry of its sync.
		cfg.indexes /= 4
		ns := newNamespace(ctx)
		refuseAtRandom(ctx, ns, "refused")
		run := startChaosRun(ctx, ns, "refused", cfg)
		figures := run.verify(ctx)
		refusals := failedCreates(ctx, ns, "refused")
		Expect(refusals).To(BeNumerically(">", 0), "the policy refused no create: the run tested nothing")
		AddReportEntry("chaos refusals", fmt.Sprintf("%d FailedCreate events; %s", refusals, figures))
	}, SpecTimeout(15*time.Minute))
})
