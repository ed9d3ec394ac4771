package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// A policy that strips the job-name label from a random share of a job's
// pod creates. Mutating admission runs before the API server gives the pod
// its UID (chaos_refused_test.go keys its refusals on the UID, which
// validating admission sees), and a pod's name is the same on each try of
// its index and attempt, so nothing in a pod being created is random: the
// policy reads a parameter instead, a ConfigMap listing 3 of the 10 decimal
// digits, and strips the pods whose completion index ends with one of
// them. The spec draws the digits again every second, so each create of an
// index is stripped or not at random, about 30% of them.

const (
	// mutatedDigitsKey is the parameter ConfigMap's key listing the digits.
	mutatedDigitsKey = "digits"
	// mutatedDigits is how many of the 10 digits are drawn.
	mutatedDigits = 3
	// mutatedDelaySeconds is the chaos job's createRefusedDelaySeconds:
	// the least there is, which the operator raises to a minute over
	// parallelism+1 (2 s for 40), so that the job goes as fast as the
	// operator lets a job whose creates come back mutated go, and the
	// bound of parallelism+2 creates a minute is held where it is
	// tightest.
	mutatedDelaySeconds = 1
)

// stripAtRandom installs the policy and its parameter in ns, for the pods
// labelled chainLabel=id, waits until it strips, and draws the digits
// every second from rng until the spec ends.
func stripAtRandom(ctx context.Context, ns, id string, rng *rand.Rand) {
	GinkgoHelper()
	all := make([]string, 10)
	for i := range all {
		all[i] = strconv.Itoa(i)
	}
	param := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mutated-indexes", Namespace: ns},
		Data: map[string]string{mutatedDigitsKey: strings.Join(all, ",")}}
	Expect(k8sClient.Create(ctx, param)).To(Succeed())
	policy, binding := chainPolicy(ns, id, false, removeLabelsPatch(ibjv1.JobNameLabel), admissionv1.MatchCondition{
		Name: "drawn",
		Expression: fmt.Sprintf(`'%[1]s' in object.metadata.labels && params.data['%[2]s'].split(',').exists(d, object.metadata.labels['%[1]s'].endsWith(d))`,
			ibjv1.CompletionIndexLabel, mutatedDigitsKey),
	})
	policy.Spec.ParamKind = &admissionv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
	binding.Spec.ParamRef = &admissionv1.ParamRef{Name: param.Name, Namespace: ns, ParameterNotFoundAction: ptr.To(admissionv1.DenyAction)}
	installPolicy(ctx, policy, binding)
	waitInEffect(ctx, ns, id, false, func(p *corev1.Pod) bool {
		_, ok := p.Labels[ibjv1.JobNameLabel]
		return !ok
	})

	drawCtx, stop := context.WithCancel(context.Background())
	DeferCleanup(stop)
	draw := func() {
		digits := slices.Clone(all)
		rng.Shuffle(len(digits), func(i, j int) { digits[i], digits[j] = digits[j], digits[i] })
		param.Data[mutatedDigitsKey] = strings.Join(digits[:mutatedDigits], ",")
		if err := k8sClient.Update(drawCtx, param); err != nil && drawCtx.Err() == nil {
			GinkgoWriter.Printf("drawing the stripped digits: %v\n", err)
		}
	}
	draw()
	go func() {
		for {
			select {
			case <-drawCtx.Done():
				return
			case <-time.After(time.Second):
				draw()
			}
		}
	}()
}

// paceFigures are the most creates in the minute from a create that came
// back mutated, among the minutes in which no operator started (held) and
// among those in which one did (restarted); how many minutes of each kind
// there were; and how many creates came back mutated.
type paceFigures struct {
	held, restarted          int
	heldMinutes, restartMins int
	mutated                  int
}

// busiestMinutes counts, for each create that came back mutated, the
// creates of the minute from it. An operator that starts (starts) knows
// nothing of the creates before: it paces the job anew.
func busiestMinutes(creates []podCreate, mutated func(*corev1.Pod) bool, starts []time.Time) paceFigures {
	var f paceFigures
	for i, first := range creates {
		if !mutated(first.pod) {
			continue
		}
		f.mutated++
		end := first.at.Add(time.Minute)
		n := 0
		for _, pc := range creates[i:] {
			if pc.at.Before(end) {
				n++
			}
		}
		if slices.ContainsFunc(starts, func(t time.Time) bool { return !t.Before(first.at) && t.Before(end) }) {
			f.restarted, f.restartMins = max(f.restarted, n), f.restartMins+1
			continue
		}
		f.held, f.heldMinutes = max(f.held, n), f.heldMinutes+1
	}
	return f
}

var _ = Describe("Chaos from the admission chain", Label("chaos", "admission-chain"), func() {
	It("keeps a job exact and paced while a policy strips the job-name label from about 30% of its pod creates and the operator is killed", func(ctx SpecContext) {
		cfg := loadChaosConfig()
		// Paced creates (one every 2 s while creates come back mutated)
		// make this run long: a twentieth of the SIGKILL run's indexes, a
		// third of its kills. A restarted operator knows nothing of the
		// pace but the job's condition PodMutated, which stays for a
		// minute after the last mutated create: it paces the job from
		// that. The bound is held over every minute from a stripped
		// create, those an operator started in too. The first minute
		// has no kill, and the job is long enough that an operator that
		// paced it less would create more than parallelism+2 pods in it.
		cfg.indexes, cfg.kills = max(cfg.indexes/20, 10), max(cfg.kills/3, 1)
		const id, name = "chaos-strip", "mutated"
		// The job creates a pod every 2 s or so: a deletion every 3 to 9 s
		// leaves most pods to end by themselves.
		cfg.deleteEvery = 3 * time.Second
		cfg.editJob = func(job *ibjv1.IndexedBatchJob) {
			job.Spec.Template.Labels = map[string]string{chainLabel: id}
			job.Spec.RetryBackoff = &ibjv1.RetryBackoff{CreateRefusedDelaySeconds: ptr.To[int32](mutatedDelaySeconds)}
		}
		ns := newNamespace(ctx)
		stripAtRandom(ctx, ns, id, rand.New(rand.NewPCG(cfg.seed, 5)))
		pods := watchChainPods(ctx, ns)
		run := startChaosRun(ctx, ns, name, cfg)
		created := time.Now()

		kills := rand.New(rand.NewPCG(cfg.seed, 6))
		var starts []time.Time
		time.Sleep(time.Until(created.Add(time.Minute)))
		for len(starts) < cfg.kills && !run.terminal(ctx) {
			time.Sleep(3*time.Second + time.Duration(kills.Int64N(int64(9*time.Second))))
			By(fmt.Sprintf("SIGKILLing the operator (%d of %d) and starting it again", len(starts)+1, cfg.kills))
			op.crash()
			starts = append(starts, time.Now())
			op = startOperator()
		}
		figures := run.verify(ctx)

		stripped := func(p *corev1.Pod) bool {
			_, ok := p.Labels[ibjv1.JobNameLabel]
			return !ok
		}
		creates := pods.of("IndexedBatchJob/" + name)
		pace := busiestMinutes(creates, stripped, starts)
		figures = fmt.Sprintf("%d pod creates, %d of them stripped by the policy; at most %d creates in the minute from a stripped one "+
			"(%d such minutes; parallelism %d), %d where an operator started within it (%d such minutes); operator SIGKILLed %d times; %s",
			len(creates), pace.mutated, pace.held, pace.heldMinutes, cfg.parallelism, pace.restarted, pace.restartMins, len(starts), figures)
		AddReportEntry("chaos mutations", figures)
		fmt.Fprintln(GinkgoWriter, "chaos mutations:", figures)
		Expect(pace.mutated).To(BeNumerically(">", 0), "the policy stripped no create: the run tested nothing")
		Expect(pace.heldMinutes).To(BeNumerically(">", 0), "no stripped create a minute clear of the operator's restarts")
		Expect(pace.held).To(BeNumerically("<=", cfg.parallelism+2), "creates in the minute from a stripped one")
		Expect(pace.restartMins).To(BeNumerically(">", 0), "no stripped create in a minute an operator started in")
		Expect(pace.restarted).To(BeNumerically("<=", cfg.parallelism+2), "creates in the minute from a stripped one, an operator started within it")
		Expect(starts).NotTo(BeEmpty(), "the job ended within its first minute, before the first kill")
		Expect(podMutatedEvents(ctx, ns, name)).To(BeNumerically(">", 0), "no PodMutated event")
	}, SpecTimeout(20*time.Minute))
})
