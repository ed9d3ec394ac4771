package podcache

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

func TestCompactPodPassesOtherObjectsThrough(t *testing.T) {
	c := &jobpod.Pod{Meta: jobpod.Meta{Name: "p"}}
	if out, err := compactPod(c); err != nil || out != any(c) {
		t.Errorf("compactPod(jobpod.Pod) = %v, %v; want it unchanged (informer resyncs pass cached objects)", out, err)
	}
	tomb := toolscache.DeletedFinalStateUnknown{Key: "ns/p", Obj: c}
	if out, err := compactPod(tomb); err != nil || out != any(tomb) {
		t.Errorf("compactPod(tombstone) = %v, %v; want it unchanged", out, err)
	}
	out, err := compactPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "q", UID: types.UID("u")}})
	if p, ok := out.(*jobpod.Pod); err != nil || !ok || p.Name != "q" || p.UID != "u" {
		t.Errorf("compactPod(Pod) = %#v, %v; want a jobpod.Pod", out, err)
	}
}

func TestPodJobKey(t *testing.T) {
	keys, _ := podJobKey(&jobpod.Pod{Meta: jobpod.Meta{Namespace: "ns"}, JobName: "train"})
	if len(keys) != 1 || keys[0] != "ns/train" {
		t.Errorf("keys = %v, want [ns/train]", keys)
	}
	if keys, _ := podJobKey(&jobpod.Pod{Meta: jobpod.Meta{Namespace: "ns"}}); keys != nil {
		t.Errorf("pod without a job-name label indexed as %v", keys)
	}
}

// A job that arrived is synced before a job whose pod event came after it,
// however many pod events that job has: pod events do not jump the queue,
// so no stream of them keeps a new job from its first sync.
func TestPodEventsDoNotJumpTheQueue(t *testing.T) {
	queue := priorityqueue.New[reconcile.Request]("test")
	defer queue.ShutDown()
	newJob := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "new"}}
	running := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "running"}}
	queue.Add(newJob)
	add := podEventAdder(queue, 0)
	for range 100 {
		add(running)
	}
	var got []string
	for range 2 {
		item, _ := queue.Get()
		got = append(got, item.Name)
		queue.Done(item)
	}
	if !slices.Equal(got, []string{"new", "running"}) {
		t.Errorf("synced %v, want the job that arrived first first", got)
	}
}

type plainRecordingQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	after []time.Duration
}

func (q *plainRecordingQueue) AddAfter(_ reconcile.Request, d time.Duration) {
	q.after = append(q.after, d)
}

// A pod event asks for a sync one batch period later, so that the events
// that land together are decided together.
func TestPodEventsWaitForTheBatchPeriod(t *testing.T) {
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "job"}}
	plain := &plainRecordingQueue{}
	podEventAdder(plain, time.Second)(req)
	if !slices.Equal(plain.after, []time.Duration{time.Second}) {
		t.Errorf("queued after %v, want [1s]", plain.after)
	}
}

// A pod's failure, creation or deletion waits for the batch period, as
// upstream's do; a success or any other update syncs its job at once, and
// a succeeded pod's release syncs nothing.
func TestWhichPodEventsWaitForTheBatch(t *testing.T) {
	pod := func(phase corev1.PodPhase, tracked bool) *jobpod.Pod {
		return &jobpod.Pod{Meta: jobpod.Meta{Namespace: "ns", Name: "p"}, JobName: "job", Phase: phase, Tracked: tracked}
	}
	running, succeeded, failed := pod(corev1.PodRunning, true), pod(corev1.PodSucceeded, true), pod(corev1.PodFailed, true)
	for _, tc := range []struct {
		name     string
		event    func(h toolscache.ResourceEventHandlerFuncs)
		now, bat int
	}{
		{"created", func(h toolscache.ResourceEventHandlerFuncs) { h.OnAdd(running, false) }, 0, 1},
		{"deleted", func(h toolscache.ResourceEventHandlerFuncs) { h.OnDelete(running) }, 0, 1},
		{"failed", func(h toolscache.ResourceEventHandlerFuncs) { h.OnUpdate(running, failed) }, 0, 1},
		{"succeeded", func(h toolscache.ResourceEventHandlerFuncs) { h.OnUpdate(running, succeeded) }, 1, 0},
		{"a failed pod's release", func(h toolscache.ResourceEventHandlerFuncs) { h.OnUpdate(failed, pod(corev1.PodFailed, false)) }, 1, 0},
		{"a succeeded pod's release", func(h toolscache.ResourceEventHandlerFuncs) { h.OnUpdate(succeeded, pod(corev1.PodSucceeded, false)) }, 0, 0},
	} {
		var now, batched int
		s := &Source{}
		tc.event(s.handler(func(reconcile.Request) { now++ }, func(reconcile.Request) { batched++ }))
		if now != tc.now || batched != tc.bat {
			t.Errorf("%s: %d syncs at once and %d batched, want %d and %d", tc.name, now, batched, tc.now, tc.bat)
		}
	}
}
