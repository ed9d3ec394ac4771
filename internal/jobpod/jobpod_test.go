package jobpod

import (
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

func TestIndexReadsTheLabelThenTheAnnotation(t *testing.T) {
	cases := []struct {
		name              string
		label, annotation *string
		want              int32
		wantOK            bool
	}{
		{"label", ptr.To("2"), ptr.To("2"), 2, true},
		{"annotation when the label is missing", nil, ptr.To("3"), 3, true},
		{"neither", nil, nil, 0, false},
		{"empty", ptr.To(""), ptr.To("1"), 0, false},
		{"negative", ptr.To("-1"), nil, 0, false},
		{"leading zero", ptr.To("01"), nil, 0, false},
		{"plus sign", ptr.To("+1"), nil, 0, false},
		{"spaces", ptr.To(" 1"), nil, 0, false},
		{"beyond int32", ptr.To(strconv.FormatInt(1<<31, 10)), nil, 0, false},
		{"malformed label with a good annotation", ptr.To("x"), ptr.To("1"), 0, false},
		{"label edited to another index", ptr.To("0"), ptr.To("1"), 0, false},
		{"annotation edited to another index", ptr.To("1"), ptr.To("7"), 0, false},
		{"label alone", ptr.To("4"), nil, 4, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}, Annotations: map[string]string{}}}
			if tc.label != nil {
				pod.Labels[ibjv1.CompletionIndexLabel] = *tc.label
			}
			if tc.annotation != nil {
				pod.Annotations[ibjv1.CompletionIndexLabel] = *tc.annotation
			}
			if got, ok := Index(pod); got != tc.want || ok != tc.wantOK {
				t.Errorf("Index = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestCountIsZeroWhenMissingOrMalformed(t *testing.T) {
	for value, want := range map[string]int32{"": 0, "x": 0, "-3": 0, "7": 7, "99999999999": 0} {
		if got := Count(map[string]string{"k": value}, "k"); got != want {
			t.Errorf("Count(%q) = %d, want %d", value, got, want)
		}
	}
}

func TestFinishTime(t *testing.T) {
	created := time.Date(2026, 1, 1, 11, 0, 0, 0, time.UTC)
	early, late := created.Add(time.Minute), created.Add(2*time.Minute)
	terminated := func(name string, at time.Time) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(at)}}}
	}
	ready := func(s corev1.ConditionStatus) corev1.PodCondition {
		return corev1.PodCondition{Type: corev1.PodReady, Status: s, LastTransitionTime: metav1.NewTime(early)}
	}
	cases := []struct {
		name string
		pod  corev1.Pod
		want time.Time
	}{
		{"latest container, init containers included", corev1.Pod{Status: corev1.PodStatus{
			InitContainerStatuses: []corev1.ContainerStatus{terminated("setup", late)},
			ContainerStatuses:     []corev1.ContainerStatus{terminated("main", early)},
		}}, late},
		{"not Ready any more", corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{ready(corev1.ConditionFalse)}}}, early},
		{"still Ready: the deletion", corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: ptr.To(metav1.NewTime(late.Add(30 * time.Second))), DeletionGracePeriodSeconds: ptr.To[int64](30)},
			Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{ready(corev1.ConditionTrue)}},
		}, late},
		{"creation as the last resort", corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}, created},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := FinishTime(&tc.pod); !got.Equal(tc.want) {
				t.Errorf("FinishTime = %v, want %v", got, tc.want)
			}
		})
	}
}

// FuzzIndex checks that Index never panics and accepts exactly the
// canonical decimal form of a non-negative int32, from the label or, when
// the label is missing, from the annotation.
func FuzzIndex(f *testing.F) {
	for _, s := range []string{"0", "7", "01", "-1", "+1", " 1", "2147483647", "2147483648", "", "x"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, v string, asLabel bool) {
		pod := &corev1.Pod{}
		if asLabel {
			pod.Labels = map[string]string{ibjv1.CompletionIndexLabel: v}
		} else {
			pod.Annotations = map[string]string{ibjv1.CompletionIndexLabel: v}
		}
		got, ok := Index(pod)
		n, err := strconv.ParseInt(v, 10, 32)
		want := err == nil && n >= 0 && strconv.FormatInt(n, 10) == v
		if ok != want {
			t.Fatalf("Index(%q) ok = %v, want %v", v, ok, want)
		}
		if ok && int64(got) != n {
			t.Fatalf("Index(%q) = %d, want %d", v, got, n)
		}
	})
}
