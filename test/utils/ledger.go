package utils

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// PodLedger is what a test kubelet saw of one job's pods over time: every
// pod of each index, the most pods unfinished at once, and the first moment
// an index had two unfinished pods. Safe for concurrent use.
type PodLedger struct {
	mu          sync.Mutex
	seen        map[int]map[types.UID]bool
	peak        int
	firstDouble string
}

// Observe records one listing of the job's pods.
func (l *PodLedger) Observe(pods []corev1.Pod) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[int]map[types.UID]bool{}
	}
	unfinished := map[int]int{}
	total := 0
	for _, p := range pods {
		ix, _ := strconv.Atoi(p.Labels[v1alpha1.CompletionIndexLabel])
		if l.seen[ix] == nil {
			l.seen[ix] = map[types.UID]bool{}
		}
		l.seen[ix][p.UID] = true
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			unfinished[ix]++
			total++
			if unfinished[ix] > 1 && l.firstDouble == "" {
				l.firstDouble = fmt.Sprintf("index %d at %s", ix, time.Now().Format(time.RFC3339Nano))
			}
		}
	}
	l.peak = max(l.peak, total)
}

// RunsOf is how many distinct pods (by UID) were seen for an index.
func (l *PodLedger) RunsOf(index int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen[index])
}

// Doubles names the first index seen with two unfinished pods, or "".
func (l *PodLedger) Doubles() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.firstDouble
}

// PeakUnfinished is the most pods seen unfinished at once.
func (l *PodLedger) PeakUnfinished() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.peak
}
