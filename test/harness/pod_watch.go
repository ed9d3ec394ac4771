package harness

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// PodLedger is what a test saw of one job's pods over time: every pod of
// each index (told apart by UID, since a name may come back once the pod
// it named is gone), the first moment an index had two unfinished pods,
// and the first moment unfinished pods of two generations (the
// restart-attempt label of a job that restarts its pods together) met.
// Safe for concurrent use.
type PodLedger struct {
	mu          sync.Mutex
	seen        map[int]map[types.UID]bool
	firstDouble string
	firstMixed  string
}

// Observe records one listing of the job's pods.
func (l *PodLedger) Observe(pods []corev1.Pod) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[int]map[types.UID]bool{}
	}
	unfinished := map[int][]string{}
	generations := map[string][]string{}
	for _, p := range pods {
		ix, _ := strconv.Atoi(p.Labels[v1alpha1.CompletionIndexLabel])
		if l.seen[ix] == nil {
			l.seen[ix] = map[types.UID]bool{}
		}
		l.seen[ix][p.UID] = true
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			unfinished[ix] = append(unfinished[ix], p.Name)
			if g, ok := p.Labels[v1alpha1.RestartAttemptLabel]; ok {
				generations[g] = append(generations[g], p.Name)
			}
		}
	}
	if len(generations) > 1 && l.firstMixed == "" {
		l.firstMixed = fmt.Sprintf("unfinished pods by generation %v at %s", generations, time.Now().Format(time.RFC3339Nano))
	}
	for ix, names := range unfinished {
		if len(names) > 1 && l.firstDouble == "" {
			l.firstDouble = fmt.Sprintf("index %d: %v at %s", ix, names, time.Now().Format(time.RFC3339Nano))
		}
	}
}

// RunsOf is how many distinct pods (by UID) were seen for an index.
func (l *PodLedger) RunsOf(index int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen[index])
}

// Doubles names the first index seen with two unfinished pods, and the
// pods, or is "".
func (l *PodLedger) Doubles() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.firstDouble
}

// MixedGenerations names the first moment unfinished pods of two
// generations were seen at once, and the pods, or is "".
func (l *PodLedger) MixedGenerations() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.firstMixed
}

// PodWatch lists the pods of one job on a steady tick, as `kubectl get pods
// -w` would, and records every listing in its PodLedger until stopped.
type PodWatch struct {
	PodLedger
	stop context.CancelFunc
	done chan struct{}
}

// WatchPods starts a PodWatch of the pods of job in namespace, listing them
// every interval. Stop it when the test ends.
func WatchPods(c client.Client, namespace, job string, every time.Duration) *PodWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &PodWatch{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			var list corev1.PodList
			// An error is the watch stopping, or a transient one the
			// next listing gets past.
			if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{v1alpha1.JobNameLabel: job}); err == nil {
				w.Observe(list.Items)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(every):
			}
		}
	}()
	return w
}

// Stop stops the watch and waits until it has; stopping twice is fine.
func (w *PodWatch) Stop() {
	w.stop()
	<-w.done
}
