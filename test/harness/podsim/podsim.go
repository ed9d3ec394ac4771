// Package podsim plays the kubelet for the pods of a test, without nodes:
// each pod runs for a scripted time and ends with a scripted outcome, a pod
// deleted while running is stopped and failed as a kubelet would on
// shutdown, and the simulator keeps the ground truth of what happened. The
// truth is what the simulator wrote, not what a controller later reports,
// so a test can hold a controller's status against it.
//
// It also watches for the one thing an indexed job must never do: a second
// unfinished pod for an index that still has one. The simulator alone makes
// pods terminal, and it marks a pod finished the moment its status write is
// acknowledged, before any controller can have seen it, so the check has no
// false alarms from watch lag.
package podsim

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// Exit codes written for a pod's containers.
const (
	// ExitFailed is the exit code of a pod scripted to fail.
	ExitFailed int32 = 1
	// ExitKilled is the exit code of a pod stopped because it was deleted
	// (SIGKILL after the grace period, as the kubelet reports it).
	ExitKilled int32 = 137
)

// Plan is how one pod ends: after Run, with phase Failed if Fail, else
// Succeeded. A failed pod's containers exit with ExitCode, ExitFailed when
// it is 0.
type Plan struct {
	Run      time.Duration
	Fail     bool
	ExitCode int32
}

// Options configure a Simulator.
type Options struct {
	// Client writes pod status and makes the kubelet's final delete.
	Client kubernetes.Interface
	// Namespace limits the simulator to one namespace; empty is all.
	Namespace string
	// LabelSelector picks the pods to play; empty is all.
	LabelSelector string
	// IndexLabels are the pod labels that may carry the completion index;
	// the first one a pod has is used.
	IndexLabels []string
	// JobLabel, when set, is the pod label naming the pod's job: one
	// simulator then plays the pods of many jobs, keeping "one unfinished
	// pod per index" per job (and namespace).
	JobLabel string
	// Script decides each pod's plan when the simulator first sees it. It
	// is called once per pod UID, from one goroutine at a time.
	Script func(pod *corev1.Pod, index int) Plan
	// Shutdown is how long a deleted running pod takes to stop.
	Shutdown time.Duration
	// Workers is how many status writes run at once; default 8.
	Workers int
}

// Record is the ground truth of one pod: how it ended, as written by the
// simulator and acknowledged by the API server.
type Record struct {
	UID  types.UID
	Name string
	// Job is the pod's namespace and the value of Options.JobLabel
	// ("namespace/job"), empty without a JobLabel.
	Job   string
	Index int
	Phase corev1.PodPhase
	// Deleted: the pod was deleted while running and failed on shutdown.
	Deleted bool
	// ExitCode of its containers, as the simulator wrote it.
	ExitCode int32
	// Finished is when the simulator's terminal status write was
	// acknowledged (or, for a write whose answer was lost, when the watch
	// showed it).
	Finished time.Time
}

// Simulator is a fake kubelet for every pod its options select.
type Simulator struct {
	opts    Options
	queue   workqueue.TypedDelayingInterface[string]
	indexer cache.Indexer

	mu         sync.Mutex
	plans      map[types.UID]*plan
	live       map[slot]map[types.UID]string // unfinished pods seen (UID -> name) by job and index
	truth      map[types.UID]Record
	seen       int
	violations []string
}

// slot is one index of one job.
type slot struct {
	job   string
	index int
}

type plan struct {
	Plan
	due       time.Time
	deletedAt time.Time
}

// New returns a simulator; Run starts it.
func New(opts Options) *Simulator {
	if opts.Workers <= 0 {
		opts.Workers = 8
	}
	return &Simulator{
		opts:  opts,
		queue: workqueue.NewTypedDelayingQueue[string](),
		plans: map[types.UID]*plan{},
		live:  map[slot]map[types.UID]string{},
		truth: map[types.UID]Record{},
	}
}

// Run plays the kubelet until ctx ends. It returns once its cache has
// synced, with the workers running in the background.
func (s *Simulator) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(s.opts.Client, 0,
		informers.WithNamespace(s.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = s.opts.LabelSelector }))
	inf := factory.Core().V1().Pods().Informer()
	s.indexer = inf.GetIndexer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.observe,
		UpdateFunc: func(_, obj any) { s.observe(obj) },
		DeleteFunc: s.forget,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
		factory.Shutdown()
	}()
	for range s.opts.Workers {
		go func() {
			for s.next(ctx) {
			}
		}()
	}
	return nil
}

func terminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// job is the pod's job as Record.Job names it.
func (s *Simulator) job(pod *corev1.Pod) string {
	if s.opts.JobLabel == "" {
		return ""
	}
	return pod.Namespace + "/" + pod.Labels[s.opts.JobLabel]
}

func (s *Simulator) index(pod *corev1.Pod) (int, bool) {
	for _, l := range s.opts.IndexLabels {
		if v, ok := pod.Labels[l]; ok {
			i, err := strconv.Atoi(v)
			return i, err == nil
		}
	}
	return 0, false
}

// observe books a pod the watch shows: a new unfinished pod is checked
// against the others of its index and given its plan; a finished one is
// taken out of the unfinished set.
func (s *Simulator) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	index, ok := s.index(pod)
	if !ok {
		s.violate("pod %s has no valid index label %v", pod.Name, s.opts.IndexLabels)
		return
	}
	s.mu.Lock()
	if terminal(pod) {
		s.finishLocked(pod, index)
		s.mu.Unlock()
		if pod.DeletionTimestamp != nil && ptr.Deref(pod.DeletionGracePeriodSeconds, 1) != 0 {
			s.enqueue(pod, 0) // the kubelet's final delete is still owed
		}
		return
	}
	p := s.plans[pod.UID]
	if p == nil {
		if _, done := s.truth[pod.UID]; done {
			s.mu.Unlock()
			return // our terminal write is not in the cache yet
		}
		p = &plan{Plan: s.opts.Script(pod, index)}
		p.due = time.Now().Add(p.Run)
		s.plans[pod.UID] = p
		s.seen++
		at := slot{s.job(pod), index}
		others := s.live[at]
		if others == nil {
			others = map[types.UID]string{}
			s.live[at] = others
		}
		for uid, name := range others {
			s.violations = append(s.violations, fmt.Sprintf(
				"%sindex %d: pod %s (%s) created while pod %s (%s) had not finished", jobPrefix(at.job), index, pod.Name, pod.UID, name, uid))
		}
		others[pod.UID] = pod.Name
	}
	if pod.DeletionTimestamp != nil && p.deletedAt.IsZero() {
		p.deletedAt = time.Now()
		if stop := p.deletedAt.Add(s.opts.Shutdown); stop.Before(p.due) {
			p.due = stop
		}
	}
	wait := time.Until(p.due)
	s.mu.Unlock()
	s.enqueue(pod, wait)
}

// forget notes a pod gone from the API. A pod can only go after its
// terminal status (the simulator's final delete follows it), so one that
// goes unfinished was released by someone who should not have.
func (s *Simulator) forget(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	index, _ := s.index(pod)
	s.mu.Lock()
	defer s.mu.Unlock()
	at := slot{s.job(pod), index}
	if _, done := s.truth[pod.UID]; !done && !terminal(pod) {
		s.violations = append(s.violations, fmt.Sprintf("%sindex %d: pod %s (%s) removed before it finished", jobPrefix(at.job), index, pod.Name, pod.UID))
	}
	delete(s.live[at], pod.UID)
	if len(s.live[at]) == 0 {
		delete(s.live, at)
	}
	delete(s.plans, pod.UID)
}

// finishLocked books a pod the watch shows terminal.
func (s *Simulator) finishLocked(pod *corev1.Pod, index int) {
	delete(s.live[slot{s.job(pod), index}], pod.UID)
	if _, done := s.truth[pod.UID]; !done {
		// Observed terminal without our acknowledgement: our write went
		// through but its answer was lost (an API server restart).
		r := Record{UID: pod.UID, Name: pod.Name, Job: s.job(pod), Index: index, Phase: pod.Status.Phase, Finished: time.Now()}
		for _, c := range pod.Status.ContainerStatuses {
			if t := c.State.Terminated; t != nil {
				r.ExitCode = t.ExitCode
			}
		}
		s.truth[pod.UID] = r
	}
}

// jobPrefix names the job in a violation when the simulator plays many.
func jobPrefix(job string) string {
	if job == "" {
		return ""
	}
	return "job " + job + ", "
}

func (s *Simulator) violate(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

func (s *Simulator) enqueue(pod *corev1.Pod, after time.Duration) {
	key, err := cache.MetaNamespaceKeyFunc(pod)
	if err != nil {
		return
	}
	if after <= 0 {
		s.queue.Add(key)
	} else {
		s.queue.AddAfter(key, after)
	}
}

func (s *Simulator) next(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	if err := s.sync(ctx, key); err != nil && ctx.Err() == nil {
		// A conflict or an unreachable API server: try again from the
		// newest cached state.
		s.queue.AddAfter(key, 100*time.Millisecond)
	}
	return true
}

func (s *Simulator) sync(ctx context.Context, key string) error {
	obj, ok, err := s.indexer.GetByKey(key)
	if err != nil || !ok {
		return err
	}
	pod := obj.(*corev1.Pod)
	if terminal(pod) {
		return s.finalDelete(ctx, pod)
	}
	s.mu.Lock()
	p := s.plans[pod.UID]
	_, done := s.truth[pod.UID]
	s.mu.Unlock()
	if p == nil || done {
		return nil
	}
	if wait := time.Until(p.due); wait > 0 {
		s.queue.AddAfter(key, wait)
		return nil
	}
	deleted := pod.DeletionTimestamp != nil
	phase, exit, reason := corev1.PodSucceeded, int32(0), "Completed"
	switch {
	case deleted:
		phase, exit, reason = corev1.PodFailed, ExitKilled, "Error"
	case p.Fail:
		phase, exit, reason = corev1.PodFailed, cmp.Or(p.ExitCode, ExitFailed), "Error"
	}
	now := metav1.Now()
	started := metav1.NewTime(p.due.Add(-p.Run))
	out := pod.DeepCopy()
	out.Status.Phase = phase
	out.Status.StartTime = &started
	out.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: now}}
	out.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: exit, Reason: reason, StartedAt: started, FinishedAt: now,
			}},
		})
	}
	written, err := s.opts.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, out, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	index, _ := s.index(pod)
	s.mu.Lock()
	delete(s.live[slot{s.job(pod), index}], pod.UID)
	s.truth[pod.UID] = Record{UID: pod.UID, Name: pod.Name, Job: s.job(pod), Index: index, Phase: phase, Deleted: deleted, ExitCode: exit, Finished: time.Now()}
	s.mu.Unlock()
	return s.finalDelete(ctx, written)
}

// finalDelete is the kubelet's last call for a pod deleted while it ran:
// once its containers are stopped and its status written, delete it with
// grace period 0 (finalizers still hold it), by UID so that a newer pod of
// the same name is never hit.
func (s *Simulator) finalDelete(ctx context.Context, pod *corev1.Pod) error {
	if pod.DeletionTimestamp == nil || ptr.Deref(pod.DeletionGracePeriodSeconds, 1) == 0 {
		return nil
	}
	err := s.opts.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// Running lists the pods that run now: seen, unfinished, not being deleted.
func (s *Simulator) Running() []*corev1.Pod {
	var out []*corev1.Pod
	for _, obj := range s.indexer.List() {
		pod := obj.(*corev1.Pod)
		if terminal(pod) || pod.DeletionTimestamp != nil {
			continue
		}
		s.mu.Lock()
		_, planned := s.plans[pod.UID]
		_, done := s.truth[pod.UID]
		s.mu.Unlock()
		if planned && !done {
			out = append(out, pod)
		}
	}
	return out
}

// Truth is the record of every pod that finished, by job, index and then
// in the order of their names.
func (s *Simulator) Truth() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Record, 0, len(s.truth))
	for _, r := range s.truth {
		out = append(out, r)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Job != out[b].Job {
			return out[a].Job < out[b].Job
		}
		if out[a].Index != out[b].Index {
			return out[a].Index < out[b].Index
		}
		return out[a].Name < out[b].Name
	})
	return out
}

// Seen is how many pods the simulator has run.
func (s *Simulator) Seen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen
}

// Violations lists what the controller under test did that it must never
// do: two unfinished pods for one index, a pod released unfinished.
func (s *Simulator) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}
