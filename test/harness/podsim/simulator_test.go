package podsim

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// exitReason is the reason the kubelet gives a container that exited non-zero.
const exitReason = "Error"

// podState is what a test of the Simulator reads back of a pod.
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

var (
	running = podState{Phase: corev1.PodRunning, Node: EnvtestNode, Ready: true, ExitCode: -1}
	podsGVR = corev1.SchemeGroupVersion.WithResource("pods")
)

// jobPod is a pending, unbound pod of job "j" as the operator makes it.
func jobPod(name string, index, attempt int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns", UID: types.UID(name),
			Labels:      map[string]string{v1alpha1.JobNameLabel: "j", v1alpha1.CompletionIndexLabel: strconv.Itoa(index)},
			Annotations: map[string]string{v1alpha1.AttemptAnnotation: strconv.Itoa(attempt)},
			Finalizers:  []string{v1alpha1.TrackingFinalizer},
		},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// fakeAPI is a fake API server holding pods; the binding subresource,
// which the fake clientset does not implement, sets the pod's node as the
// real one does.
func fakeAPI(t *testing.T, pods ...*corev1.Pod) *fake.Clientset {
	t.Helper()
	objs := make([]runtime.Object, 0, len(pods))
	for _, p := range pods {
		objs = append(objs, p)
	}
	cs := fake.NewClientset(objs...)
	cs.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		create := action.(k8stesting.CreateAction)
		if create.GetSubresource() != "binding" {
			return false, nil, nil
		}
		binding := create.GetObject().(*corev1.Binding)
		obj, err := cs.Tracker().Get(podsGVR, binding.Namespace, binding.Name)
		if err != nil {
			return true, nil, err
		}
		p := obj.(*corev1.Pod).DeepCopy()
		p.Spec.NodeName = binding.Target.Name
		return true, binding, cs.Tracker().Update(podsGVR, p, p.Namespace)
	})
	return cs
}

// start runs a simulator until the test ends.
func start(t *testing.T, opts Options) *Simulator {
	t.Helper()
	sim := New(opts)
	if err := sim.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Stop)
	return sim
}

// get reads a pod back, nil once it is gone.
func get(t *testing.T, cs *fake.Clientset, name string) *corev1.Pod {
	t.Helper()
	obj, err := cs.Tracker().Get(podsGVR, "ns", name)
	if err != nil {
		return nil
	}
	return obj.(*corev1.Pod)
}

// eventually fails the test unless cond holds within five seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// settled waits until the pod reaches want, then checks that it stays
// there for a while (a plan that holds the pod must keep holding it).
func settled(t *testing.T, cs *fake.Clientset, name string, want podState) {
	t.Helper()
	var got podState
	eventually(t, "pod "+name+" to reach "+string(want.Phase), func() bool {
		if p := get(t, cs, name); p != nil {
			got = stateOf(p)
		}
		return got == want
	})
	time.Sleep(200 * time.Millisecond)
	if p := get(t, cs, name); p == nil || stateOf(p) != want {
		t.Fatalf("pod %s left %+v", name, want)
	}
}

func TestForJobEndsEachPodAsItsPlanSays(t *testing.T) {
	cases := map[string]struct {
		plan         Plan
		want         podState
		wantReason   string // the first container's termination reason; "" to leave unchecked
		wantFinished int
	}{
		"exit code 0 succeeds": {
			want:         podState{Phase: corev1.PodSucceeded, Node: EnvtestNode, ExitCode: 0},
			wantFinished: 1,
		},
		"another exit code fails": {
			plan:         Plan{ExitCode: 3},
			want:         podState{Phase: corev1.PodFailed, Node: EnvtestNode, ExitCode: 3},
			wantFinished: 1,
		},
		"a disruption fails it killed, with DisruptionTarget": {
			plan:         Plan{Disrupted: true, ExitCode: 3},
			want:         podState{Phase: corev1.PodFailed, Node: EnvtestNode, ExitCode: ExitKilled, Disrupted: true},
			wantReason:   exitReason,
			wantFinished: 1,
		},
		"an OOM kill fails it killed, with reason OOMKilled": {
			plan:         Plan{OOMKilled: true, ExitCode: 3},
			want:         podState{Phase: corev1.PodFailed, Node: EnvtestNode, ExitCode: ExitKilled},
			wantReason:   "OOMKilled",
			wantFinished: 1,
		},
		"a disruption wins over an OOM kill": {
			plan:         Plan{Disrupted: true, OOMKilled: true},
			want:         podState{Phase: corev1.PodFailed, Node: EnvtestNode, ExitCode: ExitKilled, Disrupted: true},
			wantReason:   exitReason,
			wantFinished: 1,
		},
		"Hold keeps it running": {
			plan: Plan{Hold: true},
			want: running,
		},
		"it runs for Run before it ends": {
			plan: Plan{Run: time.Hour},
			want: running,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cs := fakeAPI(t, jobPod("j-0", 0, 0))
			sim := start(t, ForJob(cs, "ns", "j", func(int, int) Plan { return tc.plan }))
			settled(t, cs, "j-0", tc.want)
			if tc.wantReason != "" {
				pod, err := cs.CoreV1().Pods("ns").Get(context.Background(), "j-0", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if got := pod.Status.ContainerStatuses[0].State.Terminated.Reason; got != tc.wantReason {
					t.Errorf("termination reason = %q, want %q", got, tc.wantReason)
				}
			}
			if sim.Finished() != tc.wantFinished {
				t.Errorf("Finished() = %d, want %d", sim.Finished(), tc.wantFinished)
			}
		})
	}
}

func TestForJobAsksThePlanWithThePodsIndexAndAttempt(t *testing.T) {
	cs := fakeAPI(t, jobPod("j-2", 2, 0), jobPod("j-5", 5, 1))
	var mu sync.Mutex
	asked := map[[2]int]bool{}
	start(t, ForJob(cs, "ns", "j", func(index, attempt int) Plan {
		mu.Lock()
		defer mu.Unlock()
		asked[[2]int{index, attempt}] = true
		return Plan{}
	}))
	settled(t, cs, "j-2", podState{Phase: corev1.PodSucceeded, Node: EnvtestNode, ExitCode: 0})
	settled(t, cs, "j-5", podState{Phase: corev1.PodSucceeded, Node: EnvtestNode, ExitCode: 0})
	mu.Lock()
	defer mu.Unlock()
	if want := map[[2]int]bool{{2, 0}: true, {5, 1}: true}; !reflect.DeepEqual(asked, want) {
		t.Errorf("plan asked for %v, want %v", asked, want)
	}
}

func TestAHeldPlanIsAskedAgainUntilItLetsThePodEnd(t *testing.T) {
	cs := fakeAPI(t, jobPod("j-0", 0, 0))
	var hold atomic.Bool
	hold.Store(true)
	start(t, ForJob(cs, "ns", "j", func(int, int) Plan { return Plan{Hold: hold.Load(), ExitCode: 2} }))
	settled(t, cs, "j-0", running)
	hold.Store(false)
	settled(t, cs, "j-0", podState{Phase: corev1.PodFailed, Node: EnvtestNode, ExitCode: 2})
}

func TestADeletedPodIsKilledUnlessTerminatingPodsAreHeld(t *testing.T) {
	cs := fakeAPI(t, jobPod("j-0", 0, 0))
	sim := start(t, ForJob(cs, "ns", "j", func(int, int) Plan { return Plan{Hold: true} }))
	settled(t, cs, "j-0", running)

	sim.HoldTerminating(true)
	// A graceful delete, as the API server records it for a bound pod that
	// holds a finalizer.
	p := get(t, cs, "j-0").DeepCopy()
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = ptr.To(metav1.Now()), ptr.To[int64](30)
	if err := cs.Tracker().Update(podsGVR, p, "ns"); err != nil {
		t.Fatal(err)
	}
	settled(t, cs, "j-0", running)

	sim.HoldTerminating(false)
	eventually(t, "the final delete", func() bool { return get(t, cs, "j-0") == nil })
	want := []Record{{UID: "j-0", Name: "j-0", Index: 0, Phase: corev1.PodFailed, Deleted: true, ExitCode: ExitKilled}}
	got := sim.Truth()
	for i := range got {
		got[i].Finished = time.Time{}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Truth() = %+v\nwant %+v", got, want)
	}
	if sim.Finished() != 0 {
		t.Errorf("Finished() = %d, want 0: a killed pod did not end as its plan said", sim.Finished())
	}
}

func TestASecondUnfinishedPodOfAnIndexIsFlagged(t *testing.T) {
	cs := fakeAPI(t, jobPod("j-0-a", 0, 0), jobPod("j-1", 1, 0))
	sim := start(t, ForJob(cs, "ns", "j", func(index, _ int) Plan { return Plan{Hold: index == 0} }))
	settled(t, cs, "j-1", podState{Phase: corev1.PodSucceeded, Node: EnvtestNode, ExitCode: 0})
	if d := sim.Doubles(); len(d) != 0 {
		t.Fatalf("Doubles() = %v with one pod per index", d)
	}
	if _, err := cs.CoreV1().Pods("ns").Create(context.Background(), jobPod("j-0-b", 0, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the second pod of index 0 to be flagged", func() bool { return len(sim.Doubles()) == 1 })
	if got := [3]int{sim.RunsOf(0), sim.RunsOf(1), sim.RunsOf(2)}; got != [3]int{2, 1, 0} {
		t.Errorf("RunsOf(0, 1, 2) = %v, want [2 1 0]", got)
	}
	if sim.PeakUnfinished() != 2 {
		t.Errorf("PeakUnfinished() = %d, want 2", sim.PeakUnfinished())
	}
}

func TestWithoutNodeOrReportRunningAPodEndsInOneStatusWrite(t *testing.T) {
	cs := fakeAPI(t, jobPod("j-0", 0, 0))
	sim := start(t, Options{
		Client:      cs,
		IndexLabels: []string{v1alpha1.CompletionIndexLabel},
		Script:      func(*corev1.Pod, int) Plan { return Plan{ExitCode: ExitFailed} },
	})
	eventually(t, "the pod to end", func() bool { return len(sim.Truth()) == 1 })
	var writes []string
	for _, a := range cs.Actions() {
		if a.GetVerb() == "create" || a.GetVerb() == "update" || a.GetVerb() == "delete" {
			writes = append(writes, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
		}
	}
	if want := []string{"update pods/status"}; !reflect.DeepEqual(writes, want) {
		t.Errorf("writes = %v, want %v", writes, want)
	}
	if got := stateOf(get(t, cs, "j-0")); got != (podState{Phase: corev1.PodFailed, ExitCode: ExitFailed}) {
		t.Errorf("pod ended %+v", got)
	}
}

func TestAPodOfANewGenerationBesideAnUnfinishedOldOneIsFlagged(t *testing.T) {
	withGeneration := func(p *corev1.Pod, g string) *corev1.Pod {
		p.Labels[v1alpha1.RestartAttemptLabel] = g
		return p
	}
	cs := fakeAPI(t, withGeneration(jobPod("j-0-0", 0, 0), "0"), withGeneration(jobPod("j-1-0", 1, 0), "0"))
	sim := start(t, ForJob(cs, "ns", "j", func(index, _ int) Plan { return Plan{Hold: index == 0} }))
	settled(t, cs, "j-1-0", podState{Phase: corev1.PodSucceeded, Node: EnvtestNode, ExitCode: 0})
	// Index 1's next pod is of generation 1 while index 0's of generation 0 runs.
	if _, err := cs.CoreV1().Pods("ns").Create(context.Background(), withGeneration(jobPod("j-1-1", 1, 1), "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the generations' overlap to be flagged", func() bool { return len(sim.Violations()) == 1 })
	if d := sim.Doubles(); len(d) != 0 {
		t.Errorf("Doubles() = %v: no index had two unfinished pods", d)
	}
}

// A planned exit that a restart rule of the container matches restarts it
// in place (restartCount, lastState, the pod Running); one no rule matches
// ends the pod, as on a kubelet; a pod without rules ends at the first.
func TestPlannedExitsRestartTheContainerInPlaceWhereItsRulesSay(t *testing.T) {
	rules := []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{3}}}}
	cases := map[string]struct {
		rules        []corev1.ContainerRestartRule
		plan         Plan
		want         podState
		wantRestarts int32
		wantLastExit int32
	}{
		"twice in place, then it succeeds": {rules: rules, plan: Plan{InPlace: []int32{3, 3}},
			want: podState{Phase: corev1.PodSucceeded, Node: EnvtestNode, ExitCode: 0}, wantRestarts: 2, wantLastExit: 3},
		"an exit no rule matches ends the pod": {rules: rules, plan: Plan{InPlace: []int32{3, 4, 3}},
			want: podState{Phase: corev1.PodFailed, Node: EnvtestNode, ExitCode: 4}, wantRestarts: 1, wantLastExit: 3},
		"without rules the first exit ends the pod": {plan: Plan{InPlace: []int32{3, 3}},
			want: podState{Phase: corev1.PodFailed, Node: EnvtestNode, ExitCode: 3}, wantLastExit: -1},
		"in place, then held running": {rules: rules, plan: Plan{InPlace: []int32{3}, Hold: true},
			want: running, wantRestarts: 1, wantLastExit: 3},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := jobPod("j-0", 0, 0)
			pod.Spec.Containers[0].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
			pod.Spec.Containers[0].RestartPolicyRules = tc.rules
			cs := fakeAPI(t, pod)
			sim := start(t, ForJob(cs, "ns", "j", func(int, int) Plan { return tc.plan }))
			settled(t, cs, "j-0", tc.want)
			cs0 := get(t, cs, "j-0").Status.ContainerStatuses[0]
			lastExit := int32(-1)
			if t := cs0.LastTerminationState.Terminated; t != nil {
				lastExit = t.ExitCode
			}
			if cs0.RestartCount != tc.wantRestarts || lastExit != tc.wantLastExit {
				t.Errorf("restartCount %d, last exit %d; want %d, %d", cs0.RestartCount, lastExit, tc.wantRestarts, tc.wantLastExit)
			}
			if tc.want.Phase != corev1.PodRunning {
				if truth := sim.Truth(); len(truth) != 1 || truth[0].InPlace != tc.wantRestarts {
					t.Errorf("truth %+v, want one record of %d restarts in place", truth, tc.wantRestarts)
				}
			}
		})
	}
}

// inPlaceRules restart a container in place on exit code 3 and on 137 (an
// OOM kill), as the operator writes them for a retry InPlace rule.
var inPlaceRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
	ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{3, ExitKilled}}}}

// podWithRules is jobPod with inPlaceRules on its container.
func podWithRules(name string) *corev1.Pod {
	pod := jobPod(name, 0, 0)
	pod.Spec.Containers[0].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
	pod.Spec.Containers[0].RestartPolicyRules = inPlaceRules
	return pod
}

// A plan's outcome is an exit of the first container too: where a restart
// rule of it matches, the kubelet restarts the container in place, and the
// container, which exits the same way each run, again and again until the
// pod is deleted; the pod never fails on that exit.
func TestAnOutcomeARestartRuleMatchesRestartsTheContainerInPlaceUntilThePodIsDeleted(t *testing.T) {
	cases := map[string]struct {
		plan       Plan
		wantExit   int32
		wantReason string
	}{
		"an exit code":  {plan: Plan{Run: 20 * time.Millisecond, ExitCode: 3}, wantExit: 3, wantReason: exitReason},
		"an OOM kill":   {plan: Plan{Run: 20 * time.Millisecond, OOMKilled: true}, wantExit: ExitKilled, wantReason: "OOMKilled"},
		"with no delay": {plan: Plan{ExitCode: 3}, wantExit: 3, wantReason: exitReason},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cs := fakeAPI(t, podWithRules("j-0"))
			// The fake API server checks no resourceVersion: a status write
			// made from the pod as it was before its deletion would undo the
			// deletion, where the real one answers Conflict.
			cs.PrependReactor("update", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
				update := action.(k8stesting.UpdateAction)
				if update.GetSubresource() != "status" || update.GetObject().(*corev1.Pod).DeletionTimestamp != nil {
					return false, nil, nil
				}
				if p := get(t, cs, "j-0"); p != nil && p.DeletionTimestamp != nil {
					return true, nil, apierrors.NewConflict(podsGVR.GroupResource(), "j-0", errors.New("the pod was deleted since"))
				}
				return false, nil, nil
			})
			sim := start(t, ForJob(cs, "ns", "j", func(int, int) Plan { return tc.plan }))
			var last corev1.ContainerStatus
			eventually(t, "three restarts in place", func() bool {
				p := get(t, cs, "j-0")
				if p == nil {
					t.Fatal("pod gone: its container should have restarted in place")
				}
				if terminal(p) {
					t.Fatalf("pod ended %+v: its container should have restarted in place", stateOf(p))
				}
				if len(p.Status.ContainerStatuses) == 0 {
					return false
				}
				last = p.Status.ContainerStatuses[0]
				return last.RestartCount >= 3
			})
			if got := last.LastTerminationState.Terminated; got == nil || got.ExitCode != tc.wantExit || got.Reason != tc.wantReason {
				t.Fatalf("lastState %+v, want terminated with exit code %d, reason %s", last.LastTerminationState, tc.wantExit, tc.wantReason)
			}
			if last.State.Running == nil {
				t.Errorf("state %+v, want running again", last.State)
			}

			// A graceful delete, as a patch: an update of the pod as read
			// would undo the restarts the simulator wrote since.
			deletion := fmt.Sprintf(`{"metadata":{"deletionTimestamp":%q,"deletionGracePeriodSeconds":30}}`, time.Now().UTC().Format(time.RFC3339))
			if _, err := cs.CoreV1().Pods("ns").Patch(context.Background(), "j-0", types.MergePatchType, []byte(deletion), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the final delete", func() bool { return get(t, cs, "j-0") == nil })
			truth := sim.Truth()
			if len(truth) != 1 || !truth[0].Deleted || truth[0].ExitCode != ExitKilled || truth[0].InPlace < 3 {
				t.Errorf("Truth() = %+v, want one pod killed on its deletion after 3 or more restarts in place", truth)
			}
		})
	}
}

// An outcome no restart rule of the container matches ends the pod, as an
// eviction does whatever the rules say.
func TestAnOutcomeNoRestartRuleMatchesEndsThePod(t *testing.T) {
	cases := map[string]struct {
		plan Plan
		want podState
	}{
		"another exit code": {plan: Plan{ExitCode: 4}, want: podState{Phase: corev1.PodFailed, Node: EnvtestNode, ExitCode: 4}},
		"success":           {plan: Plan{}, want: podState{Phase: corev1.PodSucceeded, Node: EnvtestNode, ExitCode: 0}},
		"an eviction":       {plan: Plan{Disrupted: true}, want: podState{Phase: corev1.PodFailed, Node: EnvtestNode, ExitCode: ExitKilled, Disrupted: true}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cs := fakeAPI(t, podWithRules("j-0"))
			start(t, ForJob(cs, "ns", "j", func(int, int) Plan { return tc.plan }))
			settled(t, cs, "j-0", tc.want)
			if n := get(t, cs, "j-0").Status.ContainerStatuses[0].RestartCount; n != 0 {
				t.Errorf("restartCount %d, want 0", n)
			}
		})
	}
}
