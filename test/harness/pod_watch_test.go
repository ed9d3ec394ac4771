package harness

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

func TestPodLedgerCountsRunsByUIDAndFlagsTwoUnfinishedPodsOfAnIndex(t *testing.T) {
	pod := func(index, name string, phase corev1.PodPhase) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name),
				Labels: map[string]string{v1alpha1.JobNameLabel: "j", v1alpha1.CompletionIndexLabel: index}},
			Status: corev1.PodStatus{Phase: phase},
		}
	}
	var l PodLedger
	l.Observe([]corev1.Pod{pod("0", "a", corev1.PodRunning), pod("1", "b", corev1.PodRunning)})
	if l.Doubles() != "" {
		t.Errorf("Doubles() = %q with one unfinished pod per index", l.Doubles())
	}
	l.Observe([]corev1.Pod{pod("0", "a", corev1.PodFailed), pod("0", "c", corev1.PodPending), pod("1", "b", corev1.PodRunning)})
	if l.Doubles() != "" {
		t.Errorf("Doubles() = %q when the first pod of index 0 had failed", l.Doubles())
	}
	l.Observe([]corev1.Pod{pod("0", "c", corev1.PodRunning), pod("0", "d", corev1.PodPending), pod("1", "b", corev1.PodSucceeded)})

	if got := [3]int{l.RunsOf(0), l.RunsOf(1), l.RunsOf(2)}; got != [3]int{3, 1, 0} {
		t.Errorf("RunsOf(0, 1, 2) = %v, want [3 1 0]", got)
	}
	if d := l.Doubles(); !strings.HasPrefix(d, "index 0: [c d] at ") {
		t.Errorf("Doubles() = %q, want index 0 and its pods c and d", d)
	}
}

func TestPodLedgerFlagsUnfinishedPodsOfTwoGenerations(t *testing.T) {
	pod := func(index, name, generation string, phase corev1.PodPhase) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name),
				Labels: map[string]string{v1alpha1.JobNameLabel: "j", v1alpha1.CompletionIndexLabel: index, v1alpha1.RestartAttemptLabel: generation}},
			Status: corev1.PodStatus{Phase: phase},
		}
	}
	var l PodLedger
	l.Observe([]corev1.Pod{pod("0", "a", "0", corev1.PodFailed), pod("0", "c", "1", corev1.PodPending), pod("1", "b", "0", corev1.PodSucceeded)})
	if l.MixedGenerations() != "" {
		t.Errorf("MixedGenerations() = %q when only generation 1 had an unfinished pod", l.MixedGenerations())
	}
	l.Observe([]corev1.Pod{pod("0", "c", "1", corev1.PodRunning), pod("1", "d", "0", corev1.PodRunning)})
	if m := l.MixedGenerations(); !strings.Contains(m, "0:[d]") || !strings.Contains(m, "1:[c]") {
		t.Errorf("MixedGenerations() = %q, want pods d of generation 0 and c of generation 1", m)
	}
}
