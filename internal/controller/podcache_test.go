package controller

import (
	"slices"
	"testing"
	"time"
	"unsafe"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestCachedPodKeepsWhatASyncReads(t *testing.T) {
	job := harness.MakeIndexedBatchJob("train", "ns").BackoffLimitPerIndex(2).InitContainer("setup").Obj()
	job.UID = "job-uid"
	pod := makePodFor(job, podToCreate{index: 4, attempt: 2, failures: 1, ignored: 1}).
		failedAt(testNow, 42).condition(corev1.DisruptionTarget, corev1.ConditionTrue).api()
	pod.Status.ContainerStatuses[0].RestartCount = 3
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "setup", RestartCount: 1,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, FinishedAt: metav1.NewTime(testNow.Add(-5 * time.Second))}}}}
	pod.ResourceVersion = "77"

	got := newCachedPod(pod)
	if got.Name != pod.Name || got.Namespace != "ns" || got.UID != pod.UID || got.ResourceVersion != "77" ||
		!got.CreationTimestamp.Equal(&pod.CreationTimestamp) {
		t.Errorf("metadata = %+v, want the pod's name, namespace, UID, resourceVersion and creation", got.podMeta)
	}
	want := cachedPod{jobName: "train", ownerUID: "job-uid", index: 4, indexOK: true, attempt: 2, failures: 1, ignored: 1,
		phase: corev1.PodFailed, tracked: true, restarts: 4, finishedAt: testNow}
	if got.jobName != want.jobName || got.ownerUID != want.ownerUID || got.index != want.index || !got.indexOK ||
		got.attempt != want.attempt || got.failures != want.failures || got.ignored != want.ignored || got.phase != want.phase ||
		!got.tracked || got.discarded || got.ready || got.restarts != want.restarts || !got.finishedAt.Equal(want.finishedAt) {
		t.Errorf("cached pod = %+v, want %+v", *got, want)
	}
	// The failure policy still sees the exit code and the condition; the
	// init container that exited 0 is no failure.
	if len(got.exits) != 1 || got.exits[0] != (jobpod.Exit{Container: "main", Code: 42}) {
		t.Errorf("exits = %+v, want main with 42 only", got.exits)
	}
	rule := harness.OnPodCondition(batchv1.PodFailurePolicyActionFailJob, corev1.DisruptionTarget, corev1.ConditionTrue)
	if a := actionOf(matchFailurePolicy(policyOf(rule), got)); a != batchv1.PodFailurePolicyActionFailJob {
		t.Errorf("condition rule on the cached pod = %s, want FailJob", a)
	}

	// A succeeded pod keeps no failure details: most cached pods are those.
	ok := newCachedPod(makePod(job, 0).condition(corev1.PodReady, corev1.ConditionFalse).succeededAt(testNow).api())
	if ok.exits != nil || ok.conditions != nil {
		t.Errorf("succeeded pod keeps exits %v and conditions %v", ok.exits, ok.conditions)
	}
	if ready := newCachedPod(makePod(job, 1).ready().api()); !ready.ready || ready.phase != corev1.PodRunning {
		t.Errorf("ready pod cached as ready=%v phase=%s", ready.ready, ready.phase)
	}
	if d := newCachedPod(makePod(job, 1).failedAt(testNow, 1).discarded().withoutFinalizer().api()); !d.discarded || d.tracked {
		t.Errorf("discarded pod without finalizer cached as discarded=%v tracked=%v", d.discarded, d.tracked)
	}
	bad := makePod(job, 1).label(ibjv1.CompletionIndexLabel, "x").api()
	if c := newCachedPod(bad); c.indexOK || c.badIndex != "x" {
		t.Errorf("malformed index cached as ok=%v raw=%q", c.indexOK, c.badIndex)
	}
	foreign := makePod(job, 1).api()
	foreign.OwnerReferences = nil
	if c := newCachedPod(foreign); c.ownerUID != "" {
		t.Errorf("pod without a controller cached with owner %q", c.ownerUID)
	}
}

// The struct is a fraction of a decoded Pod's: this is what keeps a job of
// 100,000 pods in a few hundred MB. The bound is about a third (35%) of the
// Pod struct, whose own size moves a little with the k8s.io/api version;
// a decoded Pod's heap, which the cache no longer holds, is far larger.
func TestCachedPodIsSmall(t *testing.T) {
	if got, pod := unsafe.Sizeof(cachedPod{}), unsafe.Sizeof(corev1.Pod{}); got*100 > pod*35 {
		t.Errorf("cachedPod is %d bytes, want at most 35%% of a Pod's %d", got, pod)
	}
}

func TestCompactPodPassesOtherObjectsThrough(t *testing.T) {
	c := &cachedPod{podMeta: podMeta{Name: "p"}}
	if out, err := compactPod(c); err != nil || out != any(c) {
		t.Errorf("compactPod(cachedPod) = %v, %v; want it unchanged (informer resyncs pass cached objects)", out, err)
	}
	tomb := toolscache.DeletedFinalStateUnknown{Key: "ns/p", Obj: c}
	if out, err := compactPod(tomb); err != nil || out != any(tomb) {
		t.Errorf("compactPod(tombstone) = %v, %v; want it unchanged", out, err)
	}
	out, err := compactPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "q", UID: types.UID("u")}})
	if p, ok := out.(*cachedPod); err != nil || !ok || p.Name != "q" || p.UID != "u" {
		t.Errorf("compactPod(Pod) = %#v, %v; want a cachedPod", out, err)
	}
}

func TestPodJobKey(t *testing.T) {
	keys, _ := podJobKey(&cachedPod{podMeta: podMeta{Namespace: "ns"}, jobName: "train"})
	if len(keys) != 1 || keys[0] != "ns/train" {
		t.Errorf("keys = %v, want [ns/train]", keys)
	}
	if keys, _ := podJobKey(&cachedPod{podMeta: podMeta{Namespace: "ns"}}); keys != nil {
		t.Errorf("pod without a job-name label indexed as %v", keys)
	}
}

// A job whose pods changed is synced before a job that only arrived, even
// when its pod event came later.
func TestPodEventsAreSyncedBeforeNewJobs(t *testing.T) {
	queue := priorityqueue.New[reconcile.Request]("test")
	defer queue.ShutDown()
	newJob := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "new"}}
	running := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "running"}}
	queue.Add(newJob)
	podEventAdder(queue)(running)
	var got []string
	for range 2 {
		item, _ := queue.Get()
		got = append(got, item.Name)
		queue.Done(item)
	}
	if !slices.Equal(got, []string{"running", "new"}) {
		t.Errorf("synced %v, want the job with a pod event first", got)
	}
}

// The pod handler queues the job on every pod event but a succeeded pod's
// release, and tells finalizerGone of every pod let go or gone.
func TestPodHandler(t *testing.T) {
	deleting := metav1.Now()
	pod := func(phase corev1.PodPhase, tracked bool, deleted bool) *cachedPod {
		p := &cachedPod{phase: phase, tracked: tracked, jobName: "job"}
		p.Namespace, p.Name, p.UID = "ns", "job-0-0", "uid-0"
		if deleted {
			p.DeletionTimestamp = &deleting
		}
		return p
	}
	running, succeeded := pod(corev1.PodRunning, true, false), pod(corev1.PodSucceeded, true, false)
	for _, tc := range []struct {
		name          string
		event         func(toolscache.ResourceEventHandlerFuncs)
		synced, freed bool
	}{
		{"a new pod", func(h toolscache.ResourceEventHandlerFuncs) { h.OnAdd(running, false) }, true, false},
		{"a pod that succeeds", func(h toolscache.ResourceEventHandlerFuncs) { h.OnUpdate(running, succeeded) }, true, false},
		{"a succeeded pod let go", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnUpdate(succeeded, pod(corev1.PodSucceeded, false, false))
		}, false, true},
		{"a succeeded pod being deleted let go", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnUpdate(pod(corev1.PodSucceeded, true, true), pod(corev1.PodSucceeded, false, true))
		}, false, true},
		{"a failed pod let go: its count waits for the sync", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnUpdate(pod(corev1.PodFailed, true, false), pod(corev1.PodFailed, false, false))
		}, true, true},
		{"a pod that succeeds and is let go at once", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnUpdate(running, pod(corev1.PodSucceeded, false, false))
		}, true, true},
		{"a succeeded pod deleted as it is let go", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnUpdate(succeeded, pod(corev1.PodSucceeded, false, true))
		}, true, true},
		{"a succeeded pod that keeps its finalizer", func(h toolscache.ResourceEventHandlerFuncs) { h.OnUpdate(succeeded, succeeded) }, true, false},
		{"a resync of a released pod", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnUpdate(pod(corev1.PodSucceeded, false, false), pod(corev1.PodSucceeded, false, false))
		}, true, false},
		{"a deleted pod", func(h toolscache.ResourceEventHandlerFuncs) { h.OnDelete(succeeded) }, true, true},
		{"a deletion the informer missed", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/job-0-0", Obj: succeeded})
		}, true, true},
		{"not a cached pod", func(h toolscache.ResourceEventHandlerFuncs) { h.OnUpdate(&corev1.Pod{}, &corev1.Pod{}) }, false, false},
	} {
		var synced []reconcile.Request
		var freed []types.UID
		s := &podSource{finalizerGone: func(p *cachedPod) { freed = append(freed, p.UID) }}
		tc.event(s.handler(func(r reconcile.Request) { synced = append(synced, r) }))
		wantSynced := []reconcile.Request(nil)
		if tc.synced {
			wantSynced = []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "job"}}}
		}
		wantFreed := []types.UID(nil)
		if tc.freed {
			wantFreed = []types.UID{"uid-0"}
		}
		if !slices.Equal(synced, wantSynced) || !slices.Equal(freed, wantFreed) {
			t.Errorf("%s: synced %v, freed %v; want %v and %v", tc.name, synced, freed, wantSynced, wantFreed)
		}
		// The cached_pods count moves with what the cache takes in and drops.
		wantCached := map[string]int64{"a new pod": 1, "a deleted pod": -1, "a deletion the informer missed": -1}[tc.name]
		if got := s.cached.Load(); got != wantCached {
			t.Errorf("%s: the cached pods count moved by %d, want %d", tc.name, got, wantCached)
		}
	}
}
