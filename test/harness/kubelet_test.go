package harness

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// podState is what a test of the Kubelet reads back of a pod.
type podState struct {
	Phase     corev1.PodPhase
	Node      string
	Ready     bool
	ExitCode  int32 // of the first container; -1 while it has not terminated
	Disrupted bool  // condition DisruptionTarget is True
}

func stateOf(p *corev1.Pod) podState {
	s := podState{Phase: p.Status.Phase, Node: p.Spec.NodeName, ExitCode: -1}
	for _, c := range p.Status.Conditions {
		switch c.Type {
		case corev1.PodReady:
			s.Ready = c.Status == corev1.ConditionTrue
		case corev1.DisruptionTarget:
			s.Disrupted = c.Status == corev1.ConditionTrue
		}
	}
	if cs := p.Status.ContainerStatuses; len(cs) > 0 && cs[0].State.Terminated != nil {
		s.ExitCode = cs[0].State.Terminated.ExitCode
	}
	return s
}

// jobPod is a pending pod of job "j" as the operator makes it, with the
// tracking finalizer that keeps it readable after its final delete.
func jobPod(index, attempt int) *corev1.Pod {
	name := "j-" + strconv.Itoa(index) + "-" + strconv.Itoa(attempt)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns", UID: types.UID(name),
			Labels:      map[string]string{v1alpha1.JobNameLabel: "j", v1alpha1.CompletionIndexLabel: strconv.Itoa(index)},
			Annotations: map[string]string{v1alpha1.AttemptAnnotation: strconv.Itoa(attempt)},
			Finalizers:  []string{v1alpha1.TrackingFinalizer},
		},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: DefaultImage}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// fakeAPI is a fake API server holding pods; the binding subresource,
// which the fake client lacks, sets the pod's node as the real one does.
func fakeAPI(t *testing.T, pods ...*corev1.Pod) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&corev1.Pod{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, _ ...client.SubResourceCreateOption) error {
				binding, ok := subObj.(*corev1.Binding)
				if sub != "binding" || !ok {
					t.Fatalf("unexpected %s subresource create", sub)
				}
				p := &corev1.Pod{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(obj), p); err != nil {
					return err
				}
				p.Spec.NodeName = binding.Target.Name
				return c.Update(ctx, p)
			},
		})
	for _, p := range pods {
		b = b.WithObjects(p)
	}
	return b.Build()
}

// passes runs n passes of the Kubelet over the job's pods, as its watch
// would, and returns the state of each pod afterwards, by name.
func passes(t *testing.T, k *Kubelet, c client.Client, n int) map[string]podState {
	t.Helper()
	ctx := context.Background()
	list := func() []corev1.Pod {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.MatchingLabels{v1alpha1.JobNameLabel: "j"}); err != nil {
			t.Fatal(err)
		}
		return pods.Items
	}
	for range n {
		k.step(ctx, list())
	}
	out := map[string]podState{}
	for _, p := range list() {
		out[p.Name] = stateOf(&p)
	}
	return out
}

func TestKubeletEndsEachPodAsItsOutcomeSays(t *testing.T) {
	running := podState{Phase: corev1.PodRunning, Node: "node-1", Ready: true, ExitCode: -1}
	cases := map[string]struct {
		outcome      PodOutcome
		runFor       time.Duration
		want         podState
		wantFinished int
	}{
		"exit code 0 succeeds": {
			want:         podState{Phase: corev1.PodSucceeded, Node: "node-1", ExitCode: 0},
			wantFinished: 1,
		},
		"another exit code fails": {
			outcome:      PodOutcome{ExitCode: 3},
			want:         podState{Phase: corev1.PodFailed, Node: "node-1", ExitCode: 3},
			wantFinished: 1,
		},
		"a disruption fails it killed, with DisruptionTarget": {
			outcome:      PodOutcome{Disrupted: true, StayRunning: true},
			want:         podState{Phase: corev1.PodFailed, Node: "node-1", ExitCode: 137, Disrupted: true},
			wantFinished: 1,
		},
		"StayRunning keeps it running": {
			outcome: PodOutcome{StayRunning: true},
			want:    running,
		},
		"it runs for RunFor before it ends": {
			runFor: time.Hour,
			want:   running,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := fakeAPI(t, jobPod(0, 0))
			k := newKubelet(c, KubeletOptions{RunFor: tc.runFor, Outcome: func(int, int) PodOutcome { return tc.outcome }})
			// Bind, run, end.
			got := passes(t, k, c, 3)["j-0-0"]
			if got != tc.want {
				t.Errorf("pod after three passes:\n got %+v\nwant %+v", got, tc.want)
			}
			if k.Finished() != tc.wantFinished {
				t.Errorf("Finished() = %d, want %d", k.Finished(), tc.wantFinished)
			}
		})
	}
}

func TestKubeletAsksOutcomeWithThePodsIndexAndAttempt(t *testing.T) {
	c := fakeAPI(t, jobPod(2, 0), jobPod(5, 1))
	asked := map[[2]int]int{}
	k := newKubelet(c, KubeletOptions{Outcome: func(index, attempt int) PodOutcome {
		asked[[2]int{index, attempt}]++
		return PodOutcome{StayRunning: true}
	}})
	passes(t, k, c, 4)
	// Passes 3 and 4 each ask once for each running pod.
	want := map[[2]int]int{{2, 0}: 2, {5, 1}: 2}
	if !reflect.DeepEqual(asked, want) {
		t.Errorf("Outcome asked %v, want %v", asked, want)
	}
}

func TestKubeletKillsATerminatingPodUnlessHeld(t *testing.T) {
	c := fakeAPI(t, jobPod(0, 0))
	k := newKubelet(c, KubeletOptions{Outcome: func(int, int) PodOutcome { return PodOutcome{StayRunning: true} }})
	passes(t, k, c, 2)
	if err := c.Delete(context.Background(), jobPod(0, 0)); err != nil {
		t.Fatal(err)
	}

	k.HoldTerminating(true)
	running := podState{Phase: corev1.PodRunning, Node: "node-1", Ready: true, ExitCode: -1}
	if got := passes(t, k, c, 2)["j-0-0"]; got != running {
		t.Errorf("held terminating pod:\n got %+v\nwant %+v", got, running)
	}

	k.HoldTerminating(false)
	killed := podState{Phase: corev1.PodFailed, Node: "node-1", ExitCode: 137}
	if got := passes(t, k, c, 1)["j-0-0"]; got != killed {
		t.Errorf("released terminating pod:\n got %+v\nwant %+v", got, killed)
	}
	if k.Finished() != 0 {
		t.Errorf("Finished() = %d, want 0: a killed pod did not end as Outcome said", k.Finished())
	}
}

func TestPodLedgerCountsRunsByUIDAndFlagsTwoUnfinishedPodsOfAnIndex(t *testing.T) {
	pod := func(index int, name string, phase corev1.PodPhase) corev1.Pod {
		p := jobPod(index, 0)
		p.Name, p.UID, p.Status.Phase = name, types.UID(name), phase
		return *p
	}
	var l PodLedger
	l.Observe([]corev1.Pod{pod(0, "a", corev1.PodRunning), pod(1, "b", corev1.PodRunning)})
	if l.Doubles() != "" {
		t.Errorf("Doubles() = %q with one unfinished pod per index", l.Doubles())
	}
	l.Observe([]corev1.Pod{pod(0, "a", corev1.PodFailed), pod(0, "c", corev1.PodPending), pod(1, "b", corev1.PodRunning)})
	if l.Doubles() != "" {
		t.Errorf("Doubles() = %q when the first pod of index 0 had failed", l.Doubles())
	}
	l.Observe([]corev1.Pod{pod(0, "c", corev1.PodRunning), pod(0, "d", corev1.PodPending), pod(1, "b", corev1.PodSucceeded)})

	if got := [3]int{l.RunsOf(0), l.RunsOf(1), l.RunsOf(2)}; got != [3]int{3, 1, 0} {
		t.Errorf("RunsOf(0, 1, 2) = %v, want [3 1 0]", got)
	}
	if l.PeakUnfinished() != 2 {
		t.Errorf("PeakUnfinished() = %d, want 2", l.PeakUnfinished())
	}
	if d := l.Doubles(); !strings.HasPrefix(d, "index 0: [c d] at ") {
		t.Errorf("Doubles() = %q, want index 0 and its pods c and d", d)
	}
}
