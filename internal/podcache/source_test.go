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

// The handler keeps each job's pods: added, updated in place, moved to
// the job its job-name label names now, deleted. Get finds a job's pod by
// its name, List lists them.
func TestHandlerListsPodsByJob(t *testing.T) {
	s := &Source{}
	h := s.handler(func(reconcile.Request) {}, func(reconcile.Request) {})
	pod := func(name, job string, uid types.UID) *jobpod.Pod {
		return &jobpod.Pod{Meta: jobpod.Meta{Namespace: "ns", Name: name, UID: uid}, JobName: job}
	}
	list := func(job string) []string {
		pods, err := s.List("ns", job)
		if err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, p := range pods {
			out = append(out, p.Name)
		}
		slices.Sort(out)
		return out
	}
	a0, a1, b0, loose := pod("a-0", "a", "1"), pod("a-1", "a", "2"), pod("b-0", "b", "3"), pod("x", "", "4")
	for _, p := range []*jobpod.Pod{a0, a1, b0, loose} {
		h.OnAdd(p, false)
	}
	if got := list("a"); !slices.Equal(got, []string{"a-0", "a-1"}) {
		t.Errorf("List(a) = %v, want a-0 a-1", got)
	}
	if got := s.Get("ns", "a", "a-1"); got != a1 {
		t.Errorf("Get(a, a-1) = %v, want the cached pod", got)
	}
	if s.Get("ns", "b", "a-1") != nil || s.Get("other", "a", "a-1") != nil || s.Get("ns", "", "x") != nil {
		t.Errorf("Get found a pod under another job or namespace, or one without a job")
	}

	// Updated in place: the list holds the new record.
	a1Failed := pod("a-1", "a", "2")
	a1Failed.Phase = corev1.PodFailed
	h.OnUpdate(a1, a1Failed)
	if got := s.Get("ns", "a", "a-1"); got != a1Failed {
		t.Errorf("after an update Get = %v, want the new record", got)
	}
	// Its job-name label edited: it moves to job b.
	a0Moved := pod("a-0", "b", "1")
	h.OnUpdate(a0, a0Moved)
	if got, gotB := list("a"), list("b"); !slices.Equal(got, []string{"a-1"}) || !slices.Equal(gotB, []string{"a-0", "b-0"}) {
		t.Errorf("after a move: a %v, b %v; want a-1, then a-0 b-0", got, gotB)
	}
	// A pod of the same name under a new UID (deleted and made again while
	// the watch was away) replaces the old.
	b0New := pod("b-0", "b", "5")
	h.OnUpdate(b0, b0New)
	if got := s.Get("ns", "b", "b-0"); got != b0New || len(list("b")) != 2 {
		t.Errorf("after a new UID: Get = %v, list %v", got, list("b"))
	}
	// Deleted, as a tombstone too.
	h.OnDelete(a1Failed)
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/a-0", Obj: a0Moved})
	h.OnDelete(b0New)
	if got, gotB := list("a"), list("b"); len(got) != 0 || len(gotB) != 0 {
		t.Errorf("after the deletes: a %v, b %v; want none", got, gotB)
	}
	if len(s.jobs.byJob) != 0 {
		t.Errorf("%d jobs still listed, want none: an empty list goes", len(s.jobs.byJob))
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

// Two events of one job within the batch period make one sync, at the time
// the first asked for: a later event does not postpone it.
func TestPodEventsInOneBatchAreSyncedOnce(t *testing.T) {
	queue := priorityqueue.New[reconcile.Request]("test")
	defer queue.ShutDown()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "job"}}
	add := podEventAdder(queue, 50*time.Millisecond)
	add(req)
	add(req)
	item, _ := queue.Get()
	queue.Done(item)
	if item != req {
		t.Errorf("synced %v, want %v", item, req)
	}
	time.Sleep(100 * time.Millisecond) // past both events' batch periods
	if n := queue.Len(); n != 0 {
		t.Errorf("%d more syncs queued, want one sync for both events", n)
	}
}

// The pod handler queues the job on every pod event but a succeeded pod's
// release, and tells finalizerGone of every pod let go or gone. A pod's
// creation, deletion or failure waits for the batch period, as upstream's
// do; any other update (a success, a release) syncs the job at once.
func TestPodHandler(t *testing.T) {
	deleting := metav1.Now()
	pod := func(phase corev1.PodPhase, tracked bool, deleted bool) *jobpod.Pod {
		p := &jobpod.Pod{Phase: phase, Tracked: tracked, JobName: "job"}
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
		// batched: the sync waits for the batch period (else at once).
		batched bool
	}{
		{"a new pod", func(h toolscache.ResourceEventHandlerFuncs) { h.OnAdd(running, false) }, true, false, true},
		{"a pod that fails", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnUpdate(running, pod(corev1.PodFailed, true, false))
		}, true, false, true},
		{"a pod that succeeds", func(h toolscache.ResourceEventHandlerFuncs) { h.OnUpdate(running, succeeded) }, true, false, false},
		{"a succeeded pod let go", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnUpdate(succeeded, pod(corev1.PodSucceeded, false, false))
		}, false, true, false},
		{"a succeeded pod that failed in place let go: its UID waits for the sync", func(h toolscache.ResourceEventHandlerFuncs) {
			before, after := pod(corev1.PodSucceeded, true, false), pod(corev1.PodSucceeded, false, false)
			before.InPlace, after.InPlace = 1, 1
			h.OnUpdate(before, after)
		}, true, true, false},
		{"a succeeded pod being deleted let go", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnUpdate(pod(corev1.PodSucceeded, true, true), pod(corev1.PodSucceeded, false, true))
		}, false, true, false},
		{"a failed pod let go: its count waits for the sync", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnUpdate(pod(corev1.PodFailed, true, false), pod(corev1.PodFailed, false, false))
		}, true, true, false},
		{"a pod that succeeds and is let go at once", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnUpdate(running, pod(corev1.PodSucceeded, false, false))
		}, true, true, false},
		{"a succeeded pod deleted as it is let go", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnUpdate(succeeded, pod(corev1.PodSucceeded, false, true))
		}, true, true, false},
		{"a succeeded pod that keeps its finalizer", func(h toolscache.ResourceEventHandlerFuncs) { h.OnUpdate(succeeded, succeeded) }, true, false, false},
		{"a resync of a released pod", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnUpdate(pod(corev1.PodSucceeded, false, false), pod(corev1.PodSucceeded, false, false))
		}, true, false, false},
		{"a deleted pod", func(h toolscache.ResourceEventHandlerFuncs) { h.OnDelete(succeeded) }, true, true, true},
		{"a deletion the informer missed", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/job-0-0", Obj: succeeded})
		}, true, true, true},
		{"not a cached pod", func(h toolscache.ResourceEventHandlerFuncs) { h.OnUpdate(&corev1.Pod{}, &corev1.Pod{}) }, false, false, false},
	} {
		var synced []reconcile.Request
		var freed []types.UID
		batched := false
		s := &Source{finalizerGone: func(p *jobpod.Pod) { freed = append(freed, p.UID) }}
		tc.event(s.handler(
			func(r reconcile.Request) { synced = append(synced, r) },
			func(r reconcile.Request) { synced, batched = append(synced, r), true },
		))
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
		if batched != tc.batched {
			t.Errorf("%s: sync batched %v, want %v", tc.name, batched, tc.batched)
		}
		// The cached_pods count moves with what the cache takes in and drops.
		wantCached := map[string]int64{"a new pod": 1, "a deleted pod": -1, "a deletion the informer missed": -1}[tc.name]
		if got := s.cached.Load(); got != wantCached {
			t.Errorf("%s: the cached pods count moved by %d, want %d", tc.name, got, wantCached)
		}
	}
}

// Failures that land together are decided together: while a job has a
// failed pod no sync counted yet, an update of another of its pods that
// would sync at once (one started, became ready or succeeded) waits for the
// failure's batch instead, so that its sync sees every failure of the
// batch. Once the failure is counted (its finalizer gone), updates sync at
// once again; another job is never held back.
func TestUpdatesWaitForTheBatchOfAFailureNotCountedYet(t *testing.T) {
	mk := func(job, name string, phase corev1.PodPhase, tracked bool) *jobpod.Pod {
		p := &jobpod.Pod{Phase: phase, Tracked: tracked, JobName: job}
		p.Namespace, p.Name, p.UID = "ns", name, types.UID(name)
		return p
	}
	var now, batched []string
	s := &Source{}
	h := s.handler(
		func(r reconcile.Request) { now = append(now, r.Name) },
		func(r reconcile.Request) { batched = append(batched, r.Name) },
	)
	step := func(name string, event func(), wantNow, wantBatched []string) {
		t.Helper()
		now, batched = nil, nil
		event()
		if !slices.Equal(now, wantNow) || !slices.Equal(batched, wantBatched) {
			t.Errorf("%s: synced at once %v, batched %v; want %v and %v", name, now, batched, wantNow, wantBatched)
		}
	}
	a2, a3 := mk("a", "a-2", corev1.PodRunning, true), mk("a", "a-3", corev1.PodPending, true)
	b0 := mk("b", "b-0", corev1.PodPending, true)
	failed := mk("a", "a-2", corev1.PodFailed, true)
	step("index 2 fails", func() { h.OnUpdate(a2, failed) }, nil, []string{"a"})
	step("index 3 starts", func() { h.OnUpdate(a3, mk("a", "a-3", corev1.PodRunning, true)) }, nil, []string{"a"})
	step("another job's pod starts", func() { h.OnUpdate(b0, mk("b", "b-0", corev1.PodRunning, true)) }, []string{"b"}, nil)
	if got := s.FailingJobs(); got != 1 {
		t.Errorf("FailingJobs = %d, want 1", got)
	}
	counted := mk("a", "a-2", corev1.PodFailed, false)
	step("index 2's failure counted", func() { h.OnUpdate(failed, counted) }, []string{"a"}, nil)
	step("index 3 succeeds", func() { h.OnUpdate(a3, mk("a", "a-3", corev1.PodSucceeded, true)) }, []string{"a"}, nil)
	step("a failed pod deleted uncounted", func() {
		h.OnAdd(failed, false)
		h.OnDelete(failed)
	}, nil, []string{"a", "a"})
	if got := s.FailingJobs(); got != 0 {
		t.Errorf("FailingJobs = %d once no failure waits, want 0 (no entry left)", got)
	}
}

// The cache reports a pod edited out of its job the moment it sees it:
// one still cached with its job-name label removed or its controller-uid
// label changed, one that left the watch with its controller-uid label
// (the informer's delete carries the pod as it is now, finalizer and all),
// and one whose deletion the informer missed while it held a finalizer. A
// pod deleted for good (no finalizer left) is not stray; the job a pod's
// job-name label named before the edit syncs too.
func TestPodHandlerReportsStrays(t *testing.T) {
	mk := func(edit func(*jobpod.Pod)) *jobpod.Pod {
		p := &jobpod.Pod{Phase: corev1.PodRunning, Tracked: true, JobName: "job", OwnerUID: "j", UIDLabel: "j"}
		p.Namespace, p.Name, p.UID = "ns", "job-0-0", "uid-0"
		edit(p)
		return p
	}
	mine := mk(func(*jobpod.Pod) {})
	for _, tc := range []struct {
		name   string
		event  func(toolscache.ResourceEventHandlerFuncs)
		strays int
		synced []string
	}{
		{"job-name label removed", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnUpdate(mine, mk(func(p *jobpod.Pod) { p.JobName = "" }))
		}, 1, []string{"job"}},
		{"job-name label renamed", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnUpdate(mine, mk(func(p *jobpod.Pod) { p.JobName = "other" }))
		}, 0, []string{"job", "other"}},
		{"controller-uid label changed", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnUpdate(mine, mk(func(p *jobpod.Pod) { p.UIDLabel = "x" }))
		}, 1, []string{"job"}},
		{"left the watch without its controller-uid label (sent as it was before)", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnDelete(mine)
		}, 1, []string{"job"}},
		{"a deletion missed while it held its finalizer", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/job-0-0", Obj: mine})
		}, 1, []string{"job"}},
		{"deleted for good", func(h toolscache.ResourceEventHandlerFuncs) {
			h.OnDelete(mk(func(p *jobpod.Pod) { p.Tracked = false }))
		}, 0, []string{"job"}},
		{"a new pod of its job", func(h toolscache.ResourceEventHandlerFuncs) { h.OnAdd(mine, false) }, 0, []string{"job"}},
	} {
		var strays int
		var synced []string
		s := &Source{strayed: func(*jobpod.Pod) { strays++ }}
		add := func(r reconcile.Request) { synced = append(synced, r.Name) }
		tc.event(s.handler(add, add))
		if strays != tc.strays || !slices.Equal(synced, tc.synced) {
			t.Errorf("%s: %d strays reported, jobs synced %v; want %d and %v", tc.name, strays, synced, tc.strays, tc.synced)
		}
	}
}

// The deletion of a running pod (what a lost node's pods get together, and
// a failure under TerminatingOrFailed) waits for the batch, as upstream's,
// and holds the job's other updates in it until it is counted.
func TestDeletionsAreBatchedLikeFailures(t *testing.T) {
	deleting := metav1.Now()
	mk := func(name string, deleted bool) *jobpod.Pod {
		p := &jobpod.Pod{Phase: corev1.PodRunning, Tracked: true, JobName: "a"}
		p.Namespace, p.Name, p.UID = "ns", name, types.UID(name)
		if deleted {
			p.DeletionTimestamp = &deleting
		}
		return p
	}
	var now, batched int
	s := &Source{}
	h := s.handler(func(reconcile.Request) { now++ }, func(reconcile.Request) { batched++ })
	h.OnUpdate(mk("a-0", false), mk("a-0", true))
	h.OnUpdate(mk("a-1", false), mk("a-1", false)) // another pod's update, say it became ready
	if now != 0 || batched != 2 {
		t.Errorf("synced at once %d, batched %d; want 0 and 2", now, batched)
	}
}

// The cache keeps when it saw a job's latest uncounted failure, until no
// failure of the job is left uncounted.
func TestFailureSeenIsTheLatestUncountedFailure(t *testing.T) {
	now := time.Unix(1000, 0)
	f := failingPods{now: func() time.Time { return now }}
	failed := func(name string, tracked bool) *jobpod.Pod {
		p := &jobpod.Pod{Tracked: tracked, JobName: "a"}
		p.Name, p.Namespace, p.Phase = name, "ns", corev1.PodFailed
		return p
	}
	if got := f.seen("ns", "a"); !got.IsZero() {
		t.Fatalf("seen %v without a failure", got)
	}
	f.update(nil, failed("p0", true))
	now = now.Add(400 * time.Millisecond)
	second := now
	f.update(nil, failed("p1", true))
	if got := f.seen("ns", "a"); !got.Equal(second) {
		t.Fatalf("seen %v, want the second failure's %v", got, second)
	}
	now = now.Add(time.Second)
	f.update(failed("p1", true), failed("p1", true)) // an update of a failure seen already
	if got := f.seen("ns", "a"); !got.Equal(second) {
		t.Fatalf("seen %v after an update of a failure seen already; want the second failure's %v kept", got, second)
	}
	f.update(failed("p0", true), failed("p0", false))
	f.update(failed("p1", true), failed("p1", false))
	if got := f.seen("ns", "a"); !got.IsZero() {
		t.Fatalf("seen %v once every failure was counted, want zero", got)
	}
}
