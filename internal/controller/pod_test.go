package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// testNow is the fixed "now" of every unit test: no test reads a real clock.
var testNow = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

// podWrapper builds pods as the controller makes them (podbuild.New), then lets a
// test play the kubelet and the API server on them (harness.PodWrapper).
type podWrapper struct {
	w *harness.PodWrapper
}

// makePod is the pod the controller creates for an index's first attempt.
func makePod(job *ibjv1.IndexedBatchJob, index int32) *podWrapper {
	return makePodFor(job, podbuild.Spec{Index: index})
}

// makePodFor is the pod the controller creates for c, with a UID derived
// from its (unique) name and created an hour before testNow, pending.
func makePodFor(job *ibjv1.IndexedBatchJob, c podbuild.Spec) *podWrapper {
	pod := podbuild.New(job, c)
	pod.UID = types.UID("uid-" + pod.Name)
	pod.CreationTimestamp = metav1.NewTime(testNow.Add(-time.Hour))
	pod.Status.Phase = corev1.PodPending
	return &podWrapper{w: harness.WrapPod(pod)}
}

// obj is the pod as the controller's cache keeps it.
func (w *podWrapper) obj() *jobpod.Pod { return jobpod.Read(w.w.Pod) }

// api is the pod as the API server holds it.
func (w *podWrapper) api() *corev1.Pod { return w.w.Pod }

// then applies one of harness.PodWrapper's steps and goes on with w.
func (w *podWrapper) then(*harness.PodWrapper) *podWrapper { return w }

func (w *podWrapper) uid(uid types.UID) *podWrapper { return w.then(w.w.UID(uid)) }
func (w *podWrapper) running() *podWrapper          { return w.then(w.w.Running()) }
func (w *podWrapper) ready() *podWrapper            { return w.then(w.w.Ready()) }
func (w *podWrapper) succeededAt(t time.Time) *podWrapper {
	return w.then(w.w.SucceededAt(t))
}
func (w *podWrapper) failedAt(t time.Time, code int32) *podWrapper {
	return w.then(w.w.FailedAt(t, code))
}
func (w *podWrapper) failedWithoutStatus() *podWrapper { return w.then(w.w.FailedWithoutStatus()) }
func (w *podWrapper) initFailedAt(t time.Time, name string, code int32) *podWrapper {
	return w.then(w.w.InitFailedAt(t, name, code))
}
func (w *podWrapper) containerExit(name string, code int32, t time.Time) *podWrapper {
	return w.then(w.w.ContainerExit(name, code, t))
}
func (w *podWrapper) deletedAt(t time.Time) *podWrapper { return w.then(w.w.DeletedAt(t)) }
func (w *podWrapper) withoutFinalizer() *podWrapper     { return w.then(w.w.WithoutFinalizer()) }
func (w *podWrapper) discarded() *podWrapper            { return w.then(w.w.Discarded()) }
func (w *podWrapper) condition(typ corev1.PodConditionType, status corev1.ConditionStatus) *podWrapper {
	return w.then(w.w.Condition(typ, status))
}
func (w *podWrapper) label(key, value string) *podWrapper { return w.then(w.w.Label(key, value)) }
func (w *podWrapper) annotation(key, value string) *podWrapper {
	return w.then(w.w.Annotation(key, value))
}

func TestNewPodCarriesIndexIdentity(t *testing.T) {
	job := harness.MakeIndexedBatchJob("train", "ns").UID("job-uid").Completions(8).
		Subdomain("workers").PodLabel("app", "train").PodAnnotation("team", "ml").Obj()

	pod := podbuild.New(job, podbuild.Spec{Index: 3, Attempt: 2})

	if pod.Name != "train-3-2" || pod.Namespace != "ns" {
		t.Errorf("name = %s/%s, want ns/train-3-2 (deterministic per index and attempt)", pod.Namespace, pod.Name)
	}
	for key, want := range map[string]string{
		ibjv1.CompletionIndexLabel: "3",
		ibjv1.JobNameLabel:         "train",
		ibjv1.ControllerUIDLabel:   "job-uid",
		"app":                      "train",
	} {
		if got := pod.Labels[key]; got != want {
			t.Errorf("label %s = %q, want %q", key, got, want)
		}
	}
	if got := pod.Annotations[ibjv1.CompletionIndexLabel]; got != "3" {
		t.Errorf("index annotation = %q, want 3", got)
	}
	if got := pod.Annotations["team"]; got != "ml" {
		t.Errorf("template annotation team = %q, want ml", got)
	}
	if pod.Spec.Hostname != "train-3" {
		t.Errorf("hostname = %q, want train-3", pod.Spec.Hostname)
	}
	if pod.Spec.Subdomain != "workers" {
		t.Errorf("subdomain = %q, want the template's workers", pod.Spec.Subdomain)
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.UID != "job-uid" || ref.Kind != "IndexedBatchJob" || ref.Name != "train" ||
		ref.APIVersion != ibjv1.GroupVersion.String() || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("controller owner reference = %+v, want the job with controller=true", ref)
	}
	cached := jobpod.Read(pod)
	if !cached.Tracked {
		t.Errorf("finalizers = %v, want %s", pod.Finalizers, ibjv1.TrackingFinalizer)
	}
	if !cached.IndexOK || cached.Index != 3 {
		t.Errorf("index = %d, %v; want 3, true", cached.Index, cached.IndexOK)
	}
	if cached.Attempt != 2 {
		t.Errorf("attempt = %d, want 2", cached.Attempt)
	}
}

func TestNewPodDoesNotAliasTheTemplate(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).PodLabel("app", "x").Obj()
	pod := podbuild.New(job, podbuild.Spec{Index: 1})
	pod.Labels["app"] = "changed"
	pod.Spec.Containers[0].Image = "changed"
	if job.Spec.Template.Labels["app"] != "x" || job.Spec.Template.Spec.Containers[0].Image != harness.DefaultImage {
		t.Errorf("podbuild.New shares maps or slices with the job's template")
	}
	if _, ok := job.Spec.Template.Labels[ibjv1.CompletionIndexLabel]; ok {
		t.Errorf("podbuild.New wrote its labels into the job's template")
	}
}

// TestNewPodKeepsWhatAdmissionPutInTheTemplate checks that what a queueing
// system merges into a suspended job's template before it resumes the job
// (Kueue: the flavor's node selector, the workload annotation and pod set
// label its TopologyUngater finds pods by, the topology scheduling gate
// that holds each pod until it is given its domain) reaches every pod
// unchanged: the TopologyUngater then removes the gate and adds node
// selectors pod by pod, which the operator never reads back.
func TestNewPodKeepsWhatAdmissionPutInTheTemplate(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).NodeSelector("pool", "tas").Obj()
	job.Spec.Template.Labels = map[string]string{"kueue.x-k8s.io/podset": "main"}
	job.Spec.Template.Annotations = map[string]string{
		"kueue.x-k8s.io/workload":                 "indexedbatchjob-a-1234",
		"kueue.x-k8s.io/podset-required-topology": "rack",
	}
	job.Spec.Template.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/topology"}}
	pod := podbuild.New(job, podbuild.Spec{Index: 1})
	want := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Labels: map[string]string{
				"kueue.x-k8s.io/podset": "main",
				ibjv1.JobNameLabel:      "a", ibjv1.ControllerUIDLabel: string(job.UID), ibjv1.CompletionIndexLabel: "1",
			},
			Annotations: map[string]string{
				"kueue.x-k8s.io/workload":                 "indexedbatchjob-a-1234",
				"kueue.x-k8s.io/podset-required-topology": "rack",
				ibjv1.CompletionIndexLabel:                "1", ibjv1.AttemptAnnotation: "0",
			},
		},
		Spec: corev1.PodSpec{
			NodeSelector:    map[string]string{"pool": "tas"},
			SchedulingGates: []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/topology"}},
		},
	}
	got := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Labels: pod.Labels, Annotations: pod.Annotations},
		Spec:       corev1.PodSpec{NodeSelector: pod.Spec.NodeSelector, SchedulingGates: pod.Spec.SchedulingGates},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pod's labels, annotations, node selector and scheduling gates (-want +got):\n%s", diff)
	}
}

// TestKueuesUngatingChangesNothingASyncReads checks that what Kueue's
// TopologyUngater does to a pod (remove its topology scheduling gate, add
// the node selector of its domain) leaves the record a sync reads of it
// unchanged: the controller neither takes the pod for another's nor
// replaces it.
func TestKueuesUngatingChangesNothingASyncReads(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).NodeSelector("pool", "tas").Obj()
	job.Spec.Template.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/topology"}}
	gated := podbuild.New(job, podbuild.Spec{Index: 1})
	ungated := gated.DeepCopy()
	ungated.Spec.SchedulingGates = nil
	ungated.Spec.NodeSelector["kubernetes.io/hostname"] = "node-7"
	if diff := cmp.Diff(jobpod.Read(gated), jobpod.Read(ungated)); diff != "" {
		t.Errorf("record of the pod before and after Kueue ungated it (-before +after):\n%s", diff)
	}
}

func TestNewPodPutsIndexEnvFirstInEveryContainer(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(8).
		InitContainer("setup").Container("sidecar").
		Env("RANK", "$(JOB_COMPLETION_INDEX)").
		// A template value for JOB_COMPLETION_INDEX is replaced, not kept twice.
		Env(ibjv1.CompletionIndexEnvName, "stale").Obj()

	pod := podbuild.New(job, podbuild.Spec{Index: 5})

	all := append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	if len(all) != 3 {
		t.Fatalf("got %d containers, want 3", len(all))
	}
	for _, c := range all {
		want := []corev1.EnvVar{{Name: ibjv1.CompletionIndexEnvName, Value: "5"}, {Name: "RANK", Value: "$(JOB_COMPLETION_INDEX)"}}
		if len(c.Env) != len(want) || c.Env[0] != want[0] || c.Env[1] != want[1] {
			t.Errorf("container %s env = %v, want %v", c.Name, c.Env, want)
		}
	}
}

func TestNewPodFailureCountAnnotationsOnlyWithBackoffLimitPerIndex(t *testing.T) {
	cases := []struct {
		name        string
		job         *ibjv1.IndexedBatchJob
		wantPresent bool
	}{
		{"without backoffLimitPerIndex", harness.MakeIndexedBatchJob("a", "ns").Completions(4).Obj(), false},
		{"with backoffLimitPerIndex", harness.MakeIndexedBatchJob("a", "ns").Completions(4).BackoffLimitPerIndex(2).Obj(), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := podbuild.New(tc.job, podbuild.Spec{Index: 1, Attempt: 4, Failures: 3, Ignored: 1})
			failures, ok1 := pod.Annotations[ibjv1.IndexFailureCountAnnotation]
			ignored, ok2 := pod.Annotations[ibjv1.IndexIgnoredFailureCountAnnotation]
			if ok1 != tc.wantPresent || ok2 != tc.wantPresent {
				t.Fatalf("failure-count annotations present = %v/%v, want %v", ok1, ok2, tc.wantPresent)
			}
			if tc.wantPresent && (failures != "3" || ignored != "1") {
				t.Errorf("failure counts = %s/%s, want 3/1", failures, ignored)
			}
		})
	}
}

func TestPodStateHelpers(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Obj()
	cases := []struct {
		name                          string
		pod                           *jobpod.Pod
		active, terminating, finished bool
	}{
		{"pending", makePod(job, 0).obj(), true, false, false},
		{"running", makePod(job, 0).running().obj(), true, false, false},
		{"deleted while running", makePod(job, 0).running().deletedAt(testNow).obj(), false, true, false},
		{"succeeded", makePod(job, 0).succeededAt(testNow).obj(), false, false, true},
		{"failed and deleted", makePod(job, 0).failedAt(testNow, 1).deletedAt(testNow).obj(), false, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.pod.Active() != tc.active || tc.pod.Terminating() != tc.terminating || tc.pod.Finished() != tc.finished {
				t.Errorf("active/terminating/finished = %v/%v/%v, want %v/%v/%v",
					tc.pod.Active(), tc.pod.Terminating(), tc.pod.Finished(), tc.active, tc.terminating, tc.finished)
			}
		})
	}
}

func TestFinishTimePrefersLatestContainerTermination(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").InitContainer("setup").Container("sidecar").Obj()
	early, late := testNow.Add(-time.Minute), testNow.Add(-10*time.Second)
	cases := []struct {
		name string
		pod  *jobpod.Pod
		want time.Time
	}{
		{"latest container", makePod(job, 0).failedAt(early, 1).containerExit("sidecar", 0, late).obj(), late},
		{"init container", makePod(job, 0).initFailedAt(late, "setup", 2).obj(), late},
		{"ready condition without container status", makePod(job, 0).failedWithoutStatus().condition(corev1.PodReady, corev1.ConditionFalse).obj(), testNow.Add(-time.Hour)},
		{"deletion without status", makePod(job, 0).deletedAt(early).obj(), early},
		{"deletion of a pod still Ready", makePod(job, 0).condition(corev1.PodReady, corev1.ConditionTrue).deletedAt(early).obj(), early},
		{"creation as the last resort", makePod(job, 0).failedWithoutStatus().obj(), testNow.Add(-time.Hour)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.pod.FinishedAt; !got.Equal(tc.want) {
				t.Errorf("finishTime = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCountsAsFailedFollowsReplacementPolicy(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Obj()
	cases := []struct {
		name       string
		pod        *jobpod.Pod
		onlyFailed bool
		want       bool
	}{
		{"failed", makePod(job, 0).failedAt(testNow, 1).obj(), true, true},
		{"terminating, TerminatingOrFailed", makePod(job, 0).running().deletedAt(testNow).obj(), false, true},
		{"terminating, Failed", makePod(job, 0).running().deletedAt(testNow).obj(), true, false},
		{"succeeded while terminating", makePod(job, 0).succeededAt(testNow).deletedAt(testNow).obj(), false, false},
		{"discarded", makePod(job, 0).failedAt(testNow, 1).discarded().obj(), false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			policy := batchv1.TerminatingOrFailed
			if tc.onlyFailed {
				policy = batchv1.Failed
			}
			if got := jobpod.Classify(harness.MakeIndexedBatchJob("a", "ns").PodReplacementPolicy(policy).Obj(), tc.pod).Failed; got != tc.want {
				t.Errorf("failed = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReplacementPolicyDefaultsToFailedWithPodFailurePolicy(t *testing.T) {
	base := harness.MakeIndexedBatchJob("a", "ns")
	cases := []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		want bool
	}{
		{"default", base.Clone().Obj(), false},
		{"TerminatingOrFailed", base.Clone().PodReplacementPolicy(batchv1.TerminatingOrFailed).Obj(), false},
		{"Failed", base.Clone().PodReplacementPolicy(batchv1.Failed).Obj(), true},
		{"pod failure policy", base.Clone().PodFailurePolicy().Obj(), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := onlyReplaceFailed(tc.job); got != tc.want {
				t.Errorf("onlyReplaceFailed = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodRecordKeepsWhatASyncReads(t *testing.T) {
	job := harness.MakeIndexedBatchJob("train", "ns").BackoffLimitPerIndex(2).InitContainer("setup").Obj()
	job.UID = "job-uid"
	pod := makePodFor(job, podbuild.Spec{Index: 4, Attempt: 2, Failures: 1, Ignored: 1}).
		failedAt(testNow, 42).condition(corev1.DisruptionTarget, corev1.ConditionTrue).api()
	pod.Status.ContainerStatuses[0].RestartCount = 3
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "setup", RestartCount: 1,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, FinishedAt: metav1.NewTime(testNow.Add(-5 * time.Second))}}}}
	pod.ResourceVersion = "77"

	got := jobpod.Read(pod)
	if got.Name != pod.Name || got.Namespace != "ns" || got.UID != pod.UID || got.ResourceVersion != "77" ||
		!got.CreationTimestamp.Equal(&pod.CreationTimestamp) {
		t.Errorf("metadata = %+v, want the pod's name, namespace, UID, resourceVersion and creation", got.Meta)
	}
	want := jobpod.Pod{JobName: "train", OwnerUID: "job-uid", Index: 4, IndexOK: true, Attempt: 2, Failures: 1, Ignored: 1,
		Phase: corev1.PodFailed, Tracked: true, Restarts: 4, FinishedAt: testNow}
	if got.JobName != want.JobName || got.OwnerUID != want.OwnerUID || got.Index != want.Index || !got.IndexOK ||
		got.Attempt != want.Attempt || got.Failures != want.Failures || got.Ignored != want.Ignored || got.Phase != want.Phase ||
		!got.Tracked || got.Discarded || got.Ready || got.Restarts != want.Restarts || !got.FinishedAt.Equal(want.FinishedAt) {
		t.Errorf("cached pod = %+v, want %+v", *got, want)
	}
	// The failure policy still sees the exit code and the condition; the
	// init container that exited 0 is no failure.
	if len(got.Exits) != 1 || got.Exits[0] != (jobpod.Exit{Container: "main", Code: 42}) {
		t.Errorf("exits = %+v, want main with 42 only", got.Exits)
	}
	rule := harness.OnPodCondition(batchv1.PodFailurePolicyActionFailJob, corev1.DisruptionTarget, corev1.ConditionTrue)
	if a := actionOf(matchFailurePolicy(policyOf(rule), got)); a != batchv1.PodFailurePolicyActionFailJob {
		t.Errorf("condition rule on the cached pod = %s, want FailJob", a)
	}

	// A succeeded pod keeps no failure details: most cached pods are those.
	ok := jobpod.Read(makePod(job, 0).condition(corev1.PodReady, corev1.ConditionFalse).succeededAt(testNow).api())
	if ok.Exits != nil || ok.Conditions != nil {
		t.Errorf("succeeded pod keeps exits %v and conditions %v", ok.Exits, ok.Conditions)
	}
	if ready := jobpod.Read(makePod(job, 1).ready().api()); !ready.Ready || ready.Phase != corev1.PodRunning {
		t.Errorf("ready pod cached as ready=%v phase=%s", ready.Ready, ready.Phase)
	}
	if d := jobpod.Read(makePod(job, 1).failedAt(testNow, 1).discarded().withoutFinalizer().api()); !d.Discarded || d.Tracked {
		t.Errorf("discarded pod without finalizer cached as discarded=%v tracked=%v", d.Discarded, d.Tracked)
	}
	bad := makePod(job, 1).label(ibjv1.CompletionIndexLabel, "x").api()
	if c := jobpod.Read(bad); c.IndexOK || c.BadIndex != "x" {
		t.Errorf("malformed index cached as ok=%v raw=%q", c.IndexOK, c.BadIndex)
	}
	foreign := makePod(job, 1).api()
	foreign.OwnerReferences = nil
	if c := jobpod.Read(foreign); c.OwnerUID != "" {
		t.Errorf("pod without a controller cached with owner %q", c.OwnerUID)
	}
}

// Every key the operator writes on its pods is its own: a template that
// sets one (admitted while the webhook was off) gets the operator's value,
// or none where the operator writes none. A template's discarded
// annotation would otherwise have every pod let go as it starts.
func TestNewPodIgnoresReservedKeysOfTheTemplate(t *testing.T) {
	cases := []struct {
		key        string
		annotation bool
		want       string // the pod's value; "" for none
	}{
		{ibjv1.CompletionIndexLabel, false, "3"},
		{ibjv1.JobNameLabel, false, "train"},
		{ibjv1.ControllerUIDLabel, false, "job-uid"},
		{ibjv1.RestartAttemptLabel, false, ""},
		{ibjv1.CompletionIndexLabel, true, "3"},
		{ibjv1.AttemptAnnotation, true, "0"},
		{ibjv1.IndexFailureCountAnnotation, true, ""},
		{ibjv1.IndexIgnoredFailureCountAnnotation, true, ""},
		{ibjv1.DiscardedAnnotation, true, ""},
		{ibjv1.OOMKillsAnnotation, true, ""},
		{ibjv1.MemoryAnnotation, true, ""},
	}
	if want := len(ibjv1.ReservedPodLabels) + len(ibjv1.ReservedPodAnnotations); len(cases) != want {
		t.Fatalf("%d cases for %d reserved keys: a reserved key has no row", len(cases), want)
	}
	for _, tc := range cases {
		kind := "label"
		if tc.annotation {
			kind = "annotation"
		}
		t.Run(kind+" "+tc.key, func(t *testing.T) {
			b := harness.MakeIndexedBatchJob("train", "ns").UID("job-uid").Completions(8)
			if tc.annotation {
				b = b.PodAnnotation(tc.key, "from-template")
			} else {
				b = b.PodLabel(tc.key, "from-template")
			}
			pod := podbuild.New(b.Obj(), podbuild.Spec{Index: 3})
			got, ok := pod.Labels[tc.key]
			if tc.annotation {
				got, ok = pod.Annotations[tc.key]
			}
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("%s %s = %q (set: %v), want %q", kind, tc.key, got, ok, tc.want)
			}
			if rec := jobpod.Read(pod); rec.Discarded || rec.Index != 3 || rec.Attempt != 0 || rec.Failures != 0 {
				t.Errorf("the pod reads as %+v, want index 3, attempt 0, not discarded, no failures", rec)
			}
		})
	}
}
