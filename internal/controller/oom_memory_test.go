package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func (w *podWrapper) oomKilledAt(t time.Time) *podWrapper { return w.then(w.w.OOMKilledAt(t)) }

// memory is a container's memory request and limit as a row states them,
// "" for one it does not have.
type memory struct{ Request, Limit string }

func memoryOf(c corev1.Container) memory {
	var m memory
	if q, ok := c.Resources.Requests[corev1.ResourceMemory]; ok {
		m.Request = q.String()
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		m.Limit = q.String()
	}
	return m
}

func mem(request, limit string) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{}
	if request != "" {
		r.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(request)}
	}
	if limit != "" {
		r.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)}
	}
	return r
}

func TestNewPodRaisesMemoryAfterOOMKills(t *testing.T) {
	// main: 512Mi requested, 1Gi limit; sidecar: CPU only; init: 256Mi
	// limit, no request.
	job := func(factor int32, maxMemory string) *ibjv1.IndexedBatchJob {
		j := harness.MakeIndexedBatchJob("a", "ns").Completions(2).RetryOnOOMKilled(factor, maxMemory).Container("sidecar").Obj()
		j.Spec.Template.Spec.Containers[0].Resources = mem("512Mi", "1Gi")
		j.Spec.Template.Spec.Containers[1].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
		}
		j.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "init", Image: harness.DefaultImage, Resources: mem("", "256Mi")}}
		return j
	}
	type want struct {
		Init, Main, Sidecar memory
		Annotations         map[string]string
	}
	cases := []struct {
		name     string
		job      *ibjv1.IndexedBatchJob
		oomKills int32
		want     want
	}{
		{
			name: "an index never OOM-killed gets the template's memory, recorded on the pod",
			job:  job(150, "4Gi"),
			want: want{Init: memory{Limit: "256Mi"}, Main: memory{"512Mi", "1Gi"},
				Annotations: map[string]string{ibjv1.OOMKillsAnnotation: "0", ibjv1.MemoryAnnotation: "init=256Mi,main=1Gi"}},
		},
		{
			name:     "one OOM kill multiplies requests and limits by the factor; a container without memory keeps none",
			job:      job(150, "4Gi"),
			oomKills: 1,
			want: want{Init: memory{Limit: "384Mi"}, Main: memory{"768Mi", "1536Mi"},
				Annotations: map[string]string{ibjv1.OOMKillsAnnotation: "1", ibjv1.MemoryAnnotation: "init=384Mi,main=1536Mi"}},
		},
		{
			name:     "OOM kills compound",
			job:      job(150, "4Gi"),
			oomKills: 2,
			want: want{Init: memory{Limit: "576Mi"}, Main: memory{"1152Mi", "2304Mi"},
				Annotations: map[string]string{ibjv1.OOMKillsAnnotation: "2", ibjv1.MemoryAnnotation: "init=576Mi,main=2304Mi"}},
		},
		{
			name:     "maxMemory caps the request and the limit alike, so the limit stays at least the request",
			job:      job(200, "3Gi"),
			oomKills: 3,
			want: want{Init: memory{Limit: "2Gi"}, Main: memory{"3Gi", "3Gi"},
				Annotations: map[string]string{ibjv1.OOMKillsAnnotation: "3", ibjv1.MemoryAnnotation: "init=2Gi,main=3Gi"}},
		},
		{
			name:     "a raise is rounded up to a whole Mi",
			job:      job(101, "4Gi"),
			oomKills: 1,
			// 512Mi * 1.01 = 517.12Mi, 1Gi * 1.01 = 1034.24Mi, 256Mi * 1.01 = 258.56Mi.
			want: want{Init: memory{Limit: "259Mi"}, Main: memory{"518Mi", "1035Mi"},
				Annotations: map[string]string{ibjv1.OOMKillsAnnotation: "1", ibjv1.MemoryAnnotation: "init=259Mi,main=1035Mi"}},
		},
		{
			// Kueue admitted 512Mi for main and, since init has no
			// request, its 256Mi limit as its request.
			name: "under Kueue requests stay at what Kueue admitted and only limits grow",
			job: func() *ibjv1.IndexedBatchJob {
				j := job(150, "4Gi")
				j.Labels = map[string]string{ibjv1.QueueNameLabel: "q"}
				return j
			}(),
			oomKills: 1,
			want: want{Init: memory{"256Mi", "384Mi"}, Main: memory{"512Mi", "1536Mi"},
				Annotations: map[string]string{ibjv1.OOMKillsAnnotation: "1", ibjv1.MemoryAnnotation: "init=384Mi,main=1536Mi"}},
		},
		{
			name: "a job without onOOMKilled records nothing",
			job: func() *ibjv1.IndexedBatchJob {
				j := job(150, "4Gi")
				j.Spec.RetryResources = nil
				return j
			}(),
			want: want{Init: memory{Limit: "256Mi"}, Main: memory{"512Mi", "1Gi"}, Annotations: map[string]string{}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := podbuild.New(tc.job, podbuild.Spec{Index: 1, OOMKills: tc.oomKills})
			got := want{
				Init: memoryOf(pod.Spec.InitContainers[0]), Main: memoryOf(pod.Spec.Containers[0]), Sidecar: memoryOf(pod.Spec.Containers[1]),
				Annotations: map[string]string{},
			}
			for _, key := range []string{ibjv1.OOMKillsAnnotation, ibjv1.MemoryAnnotation} {
				if v, ok := pod.Annotations[key]; ok {
					got.Annotations[key] = v
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("pod (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.job.Spec.Template.Spec.Containers[0].Resources, mem("512Mi", "1Gi")); diff != "" {
				t.Errorf("the job's template changed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMostMemoryPodHasEveryRaisedContainerAtMaxMemory(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).RetryOnOOMKilled(150, "3Gi").Obj()
	job.Spec.Template.Spec.Containers[0].Resources = mem("512Mi", "1Gi")
	if got, want := memoryOf(podbuild.MostMemory(job, 0, nil).Spec.Containers[0]), (memory{"3Gi", "3Gi"}); got != want {
		t.Errorf("MostMemoryPod's main container = %+v, want %+v", got, want)
	}
	job.Spec.RetryResources = nil
	if pod := podbuild.MostMemory(job, 0, nil); pod != nil {
		t.Errorf("MostMemoryPod of a job without onOOMKilled = %s, want nil", pod.Name)
	}
}

func TestPodRecordKeepsTheOOMKill(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).RetryOnOOMKilled(150, "4Gi").
		Limits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}).Obj()
	killed := jobpod.Read(makePodFor(job, podbuild.Spec{Index: 1, Attempt: 2, OOMKills: 2}).oomKilledAt(testNow).api())
	if !jobpod.OwnOOMKilled(job, killed) || killed.OOMKills != 2 {
		t.Errorf("OOM-killed pod cached with OOMKilled=%v OOMKills=%d, want true, 2", jobpod.OwnOOMKilled(job, killed), killed.OOMKills)
	}
	if failed := jobpod.Read(makePod(job, 1).failedAt(testNow, 137).api()); jobpod.OwnOOMKilled(job, failed) {
		t.Error("a pod that exited 137 without reason OOMKilled is cached as OOM-killed")
	}
}

// An injected sidecar OOM-killed beside the template's container raises
// nothing and names no exit: the next pod keeps its memory and the
// failure record names the template's container.
func TestAnInjectedSidecarsOOMKillRaisesNothing(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).BackoffLimitPerIndex(3).RetryOnOOMKilled(150, "4Gi").
		Limits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}).Obj()
	api := makePod(job, 1).failedAt(testNow, 1).api()
	api.Status.InitContainerStatuses = append(api.Status.InitContainerStatuses, corev1.ContainerStatus{Name: "istio-proxy",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: jobpod.ReasonOOMKilled}}})
	pod := jobpod.Read(api)
	f := jobpod.Classify(job, pod)
	if got := jobpod.NextOOMKills(job, pod, f); got != 0 {
		t.Errorf("NextOOMKills after the sidecar's OOM kill = %d, want 0", got)
	}
	a := attemptOf(job, pod, f)
	if a.Container != "main" || a.ExitCode != 1 || a.Reason != "Error" {
		t.Errorf("recorded attempt = container %q exit %d reason %q, want main's exit 1, Error", a.Container, a.ExitCode, a.Reason)
	}
	// The same kill in the template's container raises.
	api.Status.ContainerStatuses[0].State.Terminated.Reason = jobpod.ReasonOOMKilled
	pod = jobpod.Read(api)
	if got := jobpod.NextOOMKills(job, pod, jobpod.Classify(job, pod)); got != 1 {
		t.Errorf("NextOOMKills after main's OOM kill = %d, want 1", got)
	}
}

// A raise never passes the namespace's LimitRange maximum when it is below
// maxMemory: the pod would be refused and its index never run again. At
// the cap the index's next pods keep the capped memory; the cap is named
// in the MemoryRaised event.
func TestRaiseStopsAtTheNamespaceMemoryCap(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(1).RetryOnOOMKilled(200, "8Gi").Obj()
	job.Spec.Template.Spec.Containers[0].Resources = mem("512Mi", "768Mi")
	limitCap := &jobpod.MemoryCap{Max: resource.MustParse("1Gi"), LimitRange: "mem"}
	for _, tc := range []struct {
		oomKills   int32
		memoryCap  *jobpod.MemoryCap
		want       memory
		wantCapped bool
	}{
		{1, nil, memory{"1Gi", "1536Mi"}, false},
		{1, limitCap, memory{"1Gi", "1Gi"}, true},
		{3, limitCap, memory{"1Gi", "1Gi"}, true},
		{1, &jobpod.MemoryCap{Max: resource.MustParse("16Gi"), LimitRange: "roomy"}, memory{"1Gi", "1536Mi"}, false},
	} {
		spec := job.Spec.Template.Spec.DeepCopy()
		m := raiseMemory(job, spec, tc.oomKills, tc.memoryCap)
		if got := memoryOf(spec.Containers[0]); got != tc.want || m.capped != tc.wantCapped || !m.raised {
			t.Errorf("%d OOM kills, cap %v: memory %+v capped %v raised %v; want %+v capped %v raised", tc.oomKills, tc.memoryCap, got, m.capped, m.raised, tc.want, tc.wantCapped)
		}
	}
	if got := memoryOf(podbuild.MostMemory(job, 0, limitCap).Spec.Containers[0]); got != (memory{"1Gi", "1Gi"}) {
		t.Errorf("MostMemoryPod under a 1Gi LimitRange = %+v, want 1Gi and 1Gi", got)
	}

	s := newSyncState(syncInput{job: job, now: testNow, memoryCap: limitCap})
	s.reportRaisedMemory(podbuild.Spec{Index: 0, Attempt: 2, OOMKills: 2, MemoryCap: limitCap})
	want := []raisedPod{{pod: "a-0-2", message: "Pod a-0-2 of index 0 gets memory main=1Gi (OOM kills of the index: 2); capped at 1Gi, the container maximum of LimitRange mem"}}
	if diff := cmp.Diff(want, s.plan.memoryRaised, cmp.AllowUnexported(raisedPod{})); diff != "" {
		t.Errorf("memoryRaised (-want +got):\n%s", diff)
	}
}

// A raise is reported by the sync whose create made its pod: a refused
// create reports nothing, so a create refused four times before it goes
// through gives one MemoryRaised event, not five.
func TestRaisesAreReportedForCreatedPodsOnly(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(3).Obj()
	creates := []podbuild.Spec{{Index: 0, Attempt: 1}, {Index: 1, Attempt: 2}, {Index: 2, Attempt: 1}}
	raised := []raisedPod{{pod: "a-0-1", message: "zero"}, {pod: "a-2-1", message: "two"}}
	for _, tc := range []struct {
		took []bool
		want []string
	}{
		{[]bool{false, false, false}, []string{}},
		{[]bool{true, true, false}, []string{"zero"}},
		{[]bool{true, false, true}, []string{"zero", "two"}},
	} {
		if got := raisedMessages(createdOnly(raised, creates, tc.took, job)); !cmp.Equal(got, tc.want) {
			t.Errorf("took %v: raises reported %q, want %q", tc.took, got, tc.want)
		}
	}
}

// TestSyncJobRaisesMemoryAfterOOMKills is the table of syncJob's decisions
// for a job with retryResources.onOOMKilled (and one without).
func TestSyncJobRaisesMemoryAfterOOMKills(t *testing.T) {
	now := &metav1.Time{Time: testNow}
	// ended is when the rows' failed pods ended: a batch period before the
	// sync, as the batched sync of a failure comes.
	ended := testNow.Add(-podEventBatchPeriod)
	base := harness.MakeIndexedBatchJob("a", "ns")
	// Memory after an OOM kill: main requests 512Mi with a 1Gi limit.
	oomRetry := base.Clone().Completions(2).Parallelism(2).BackoffLimit(6).RetryBackoff(0, 0).RetryOnOOMKilled(150, "4Gi").
		Requests(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}).
		Limits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}).Obj()
	oomQueued := oomRetry.DeepCopy()
	oomQueued.Labels = map[string]string{ibjv1.QueueNameLabel: "q"}
	oomOff := oomRetry.DeepCopy()
	oomOff.Spec.RetryResources = nil
	runSyncRows(t, []syncRow{
		{
			name: "an OOM-killed index's next pod gets more memory and carries the kill; the other index keeps the template's",
			job:  oomRetry,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{makePod(j, 0).oomKilledAt(ended).withoutFinalizer().obj(), makePod(j, 1).running().obj()}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 2, Phase: ibjv1.PhaseRunning},
				Create: []string{"a-0-1 failures=1 ignored=0 oomKills=1"},
				Events: []string{"Normal MemoryRaised: Pod a-0-1 of index 0 gets memory main=1536Mi (OOM kills of the index: 1)"},
			},
		},
		{
			name: "a second OOM kill compounds the raise",
			job:  oomRetry,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{makePodFor(j, podbuild.Spec{Index: 0, Attempt: 1, OOMKills: 1}).oomKilledAt(ended).withoutFinalizer().obj(),
					makePod(j, 1).running().obj()}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 2, Phase: ibjv1.PhaseRunning},
				Create: []string{"a-0-2 failures=1 ignored=0 oomKills=2"},
				Events: []string{"Normal MemoryRaised: Pod a-0-2 of index 0 gets memory main=2304Mi (OOM kills of the index: 2)"},
			},
		},
		{
			name: "a failure of another kind keeps the raised memory",
			job:  oomRetry,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{makePodFor(j, podbuild.Spec{Index: 0, Attempt: 1, OOMKills: 1}).failedAt(ended, 1).withoutFinalizer().obj(),
					makePod(j, 1).running().obj()}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 2, Phase: ibjv1.PhaseRunning},
				Create: []string{"a-0-2 failures=1 ignored=0 oomKills=1"},
				Events: []string{"Normal MemoryRaised: Pod a-0-2 of index 0 gets memory main=1536Mi (OOM kills of the index: 1)"},
			},
		},
		{
			name: "under Kueue the raise of a request is held back, with a warning",
			job:  oomQueued,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{makePod(j, 0).oomKilledAt(ended).withoutFinalizer().obj(), makePod(j, 1).running().obj()}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 2, Phase: ibjv1.PhaseRunning},
				Create: []string{"a-0-1 failures=1 ignored=0 oomKills=1"},
				Events: []string{
					"Normal MemoryRaised: Pod a-0-1 of index 0 gets memory main=1536Mi (OOM kills of the index: 1)",
					"Warning MemoryRaiseHeldBack: Kept the memory requests of containers main of pod a-0-1 (index 0) at the template's, which is what Kueue admitted; only their limits were raised",
				},
			},
		},
		{
			name: "without onOOMKilled an OOM kill raises nothing",
			job:  oomOff,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{makePod(j, 0).oomKilledAt(ended).withoutFinalizer().obj(), makePod(j, 1).running().obj()}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 2, Phase: ibjv1.PhaseRunning},
				Create: []string{"a-0-1 failures=1 ignored=0"},
			},
		},
	})
}
