package jobpod

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestBackoffDelayDoublesFromTenSecondsUpToTenMinutes(t *testing.T) {
	cases := []struct {
		failures int32
		want     time.Duration
	}{
		{-1, 0},
		{0, 0},
		{1, 10 * time.Second},
		{2, 20 * time.Second},
		{3, 40 * time.Second},
		{4, 80 * time.Second},
		{6, 320 * time.Second},
		{7, 10 * time.Minute}, // 640 s is past the cap
		{8, 10 * time.Minute},
		{100, 10 * time.Minute}, // 10 s × 2^99 would overflow a Duration
		{1 << 30, 10 * time.Minute},
	}
	for _, tc := range cases {
		if got := DefaultBackoff.Delay(tc.failures); got != tc.want {
			t.Errorf("Delay(%d) = %v, want %v", tc.failures, got, tc.want)
		}
	}
}

func TestBackoffDelayNeverDecreases(t *testing.T) {
	b := Backoff{Base: 3 * time.Second, Max: time.Hour}
	prev := time.Duration(0)
	for f := int32(0); f < 200; f++ {
		d := b.Delay(f)
		if d < prev || d > b.Max {
			t.Fatalf("Delay(%d) = %v after %v (max %v)", f, d, prev, b.Max)
		}
		prev = d
	}
}

func TestBackoffDelayWithBaseAboveMaxIsMax(t *testing.T) {
	b := Backoff{Base: time.Minute, Max: 30 * time.Second}
	if got := b.Delay(1); got != 30*time.Second {
		t.Errorf("Delay(1) = %v, want the cap 30s", got)
	}
}

func TestBackoffOfAJobTakesItsRetryBackoffOverTheDefaults(t *testing.T) {
	operator := Backoff{Base: 5 * time.Second, Max: time.Minute}
	cases := []struct {
		name  string
		spec  *ibjv1.RetryBackoff
		want  Backoff
		delay []time.Duration // for 1, 2, 3 … failures
	}{
		{"unset: the operator's", nil, operator, []time.Duration{5 * time.Second, 10 * time.Second}},
		{"both set", &ibjv1.RetryBackoff{InitialDelaySeconds: ptr.To[int32](1), MaxDelaySeconds: ptr.To[int32](3)},
			Backoff{Base: time.Second, Max: 3 * time.Second}, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}},
		{"only the cap", &ibjv1.RetryBackoff{MaxDelaySeconds: ptr.To[int32](7)},
			Backoff{Base: 5 * time.Second, Max: 7 * time.Second}, []time.Duration{5 * time.Second, 7 * time.Second}},
		{"zero delay replaces at once", &ibjv1.RetryBackoff{InitialDelaySeconds: ptr.To[int32](0)},
			Backoff{Base: 0, Max: time.Minute}, []time.Duration{0, 0, 0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.MakeIndexedBatchJob("a", "ns").Obj()
			job.Spec.RetryBackoff = tc.spec
			got := operator.ForJob(job)
			if got != tc.want {
				t.Errorf("forJob = %+v, want %+v", got, tc.want)
			}
			for i, want := range tc.delay {
				if d := got.Delay(int32(i + 1)); d != want {
					t.Errorf("Delay(%d) = %v, want %v", i+1, d, want)
				}
			}
		})
	}
}

// The next attempt of an index carries its latest pod's counts, plus that
// pod's own failure where it counted or an Ignore rule matched it; the
// per-index retry waits, from the pod's end, the backoff of the counted
// failures, or the matched rule's retry delay; an ignored failure without
// one waits nothing.
func TestIndexRetryAtCountsTheLatestFailure(t *testing.T) {
	end := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	pod := &Pod{Failures: 2, Ignored: 1, FinishedAt: end}
	cases := []struct {
		name                      string
		failure                   Failure
		wantFailures, wantIgnored int32
		wantAt                    time.Time
	}{
		{"counted", Failure{Failed: true, Counted: true}, 3, 1, end.Add(40 * time.Second)},
		{"ignored: at once", Failure{Failed: true, Ignored: true}, 2, 2, end},
		{"not a failure", Failure{}, 2, 1, end.Add(20 * time.Second)},
		{"counted by a rule with a delay: the rule's", Failure{Failed: true, Counted: true, Match: &Match{RetryDelay: ptr.To(5 * time.Second)}}, 3, 1, end.Add(5 * time.Second)},
		{"ignored by a rule with a delay: the rule's", Failure{Failed: true, Ignored: true, Match: &Match{RetryDelay: ptr.To(90 * time.Second)}}, 2, 2, end.Add(90 * time.Second)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			failures, ignored := NextCounts(pod, tc.failure)
			if failures != tc.wantFailures || ignored != tc.wantIgnored {
				t.Errorf("NextCounts = %d, %d; want %d, %d", failures, ignored, tc.wantFailures, tc.wantIgnored)
			}
			if at := DefaultBackoff.IndexRetryAt(pod, tc.failure); !at.Equal(tc.wantAt) {
				t.Errorf("IndexRetryAt = %s, want %s", at, tc.wantAt)
			}
		})
	}
}

// The job-wide backoff grows with the counted failures that ended after
// the last success and runs from the latest of them; an ignored failure
// grows nothing, and a rule's retry delay is that failure's own wait.
func TestJobEndsRetryAtCountsFailuresSinceTheLastSuccess(t *testing.T) {
	t0 := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	failed := Failure{Failed: true, Counted: true}
	ended := func(phase corev1.PodPhase, at time.Duration) *Pod {
		return &Pod{Phase: phase, FinishedAt: t0.Add(at)}
	}
	type end struct {
		pod     *Pod
		failure Failure
	}
	cases := []struct {
		name string
		ends []end
		want time.Time
	}{
		{"nothing ended", nil, time.Time{}},
		{"only successes", []end{{ended(corev1.PodSucceeded, 0), Failure{}}}, time.Time{}},
		{"one failure", []end{{ended(corev1.PodFailed, 0), failed}}, t0.Add(10 * time.Second)},
		{"two failures, from the latest", []end{
			{ended(corev1.PodFailed, 5*time.Second), failed}, {ended(corev1.PodFailed, 0), failed},
		}, t0.Add(25 * time.Second)},
		{"a success in between resets the count", []end{
			{ended(corev1.PodFailed, 0), failed}, {ended(corev1.PodSucceeded, time.Second), Failure{}},
			{ended(corev1.PodFailed, 2*time.Second), failed},
		}, t0.Add(12 * time.Second)},
		{"failures before the last success wait for nothing", []end{
			{ended(corev1.PodFailed, 0), failed}, {ended(corev1.PodSucceeded, time.Second), Failure{}},
		}, time.Time{}},
		{"an ignored failure is retried at once", []end{
			{ended(corev1.PodFailed, 0), Failure{Failed: true, Ignored: true}},
		}, t0},
		{"an ignored failure between counted ones grows nothing", []end{
			{ended(corev1.PodFailed, 0), failed}, {ended(corev1.PodFailed, time.Second), Failure{Failed: true, Ignored: true}},
			{ended(corev1.PodFailed, 2*time.Second), failed},
		}, t0.Add(22 * time.Second)},
		{"an ignored failure waits its rule's delay", []end{
			{ended(corev1.PodFailed, 0), failed},
			{ended(corev1.PodFailed, time.Second), Failure{Failed: true, Ignored: true, Match: &Match{RetryDelay: ptr.To(time.Minute)}}},
		}, t0.Add(61 * time.Second)},
		{"a Count rule's delay is its failure's wait, and the failure still counts", []end{
			{ended(corev1.PodFailed, 0), Failure{Failed: true, Counted: true, Match: &Match{RetryDelay: ptr.To(3 * time.Second)}}},
			{ended(corev1.PodFailed, time.Second), failed},
		}, t0.Add(21 * time.Second)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ends JobEnds
			for _, e := range tc.ends {
				ends.Add(e.pod, e.failure)
			}
			if got := ends.RetryAt(DefaultBackoff); !got.Equal(tc.want) {
				t.Errorf("RetryAt = %s, want %s", got, tc.want)
			}
		})
	}
}
