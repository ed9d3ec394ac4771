// Package podsim is the one kubelet stand-in of the tests: the envtest
// suites, the e2e specs on kwok and the benchmark all run their pods on it.
// Each pod runs for a scripted time and ends with a scripted outcome (an
// exit code or an eviction), a pod deleted while running is stopped and
// failed as a kubelet would on shutdown, and the simulator keeps the ground
// truth of what happened. The truth is what the simulator wrote, not what a
// controller later reports, so a test can hold a controller's status against
// it.
//
// On a control plane with no scheduler (envtest) it also binds each pod to a
// node, so that deleting the pod is graceful as on a real node, and reports
// the pod Running before it ends it (ForJob). For scale (the benchmark, the
// fleets) a pod goes from Pending to its end in one status write.
//
// It also watches for the one thing an indexed job must never do: a second
// unfinished pod for an index that still has one. The simulator alone makes
// pods terminal, and it marks a pod finished the moment its status write is
// acknowledged, before any controller can have seen it, so the check has no
// false alarms from watch lag.
package podsim

import (
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
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// Exit codes written for a pod's containers.
const (
	// ExitFailed is the exit code scripts give a pod that fails.
	ExitFailed int32 = 1
	// ExitKilled is the exit code of a pod stopped because it was deleted
	// or evicted (SIGKILL, as the kubelet reports it).
	ExitKilled int32 = 137
)

// Plan is how one pod ends.
type Plan struct {
	// Run is how long the pod runs before it ends, counted from its start.
	Run time.Duration
	// ExitCode ends every container with this code: phase Succeeded for
	// 0, Failed otherwise.
	ExitCode int32
	// Disrupted fails the pod as an eviction does: condition
	// DisruptionTarget, every container killed (ExitKilled). It wins over
	// ExitCode.
	Disrupted bool
	// OOMKilled ends the pod as the kernel's OOM killer does: every
	// container terminated with exit code 137 (ExitKilled) and reason
	// OOMKilled. It wins over ExitCode; Disrupted wins over it.
	OOMKilled bool
	// Hold keeps the pod running past Run: the simulator asks Script again
	// every Options.Recheck until a plan says otherwise, so a test can let
	// the pod end later.
	Hold bool
	// InPlace are exit codes of the pod's first container before its
	// outcome, each Run after the container (re)started. One that a
	// restart rule of the container matches (its restartPolicyRules, as
	// the kubelet reads them) restarts it in place: its restartCount grows,
	// its lastState is that exit, the pod stays Running, and the plan goes
	// on. The first that none matches ends the pod with that code instead
	// of ExitCode, as a kubelet would.
	//
	// The outcome itself (ExitCode, or OOMKilled's 137) is an exit of the
	// first container too: where a restart rule of it matches, the kubelet
	// restarts it in place instead of ending the pod, and the container,
	// run again, exits the same way after Run (at least Options.Recheck),
	// until the pod is deleted. A script that fails a pod "as its
	// annotations say" thus crash-loops in place on a pod whose restart
	// rules take its code, and ends it on any other.
	InPlace []int32
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
	// Script decides each pod's plan when the pod starts, with its index
	// (-1 for a pod without a valid index label), and again while the plan
	// says Hold. It is called from one goroutine at a time and must not
	// call the Simulator.
	Script func(pod *corev1.Pod, index int) Plan
	// Shutdown is how long a deleted running pod takes to stop.
	Shutdown time.Duration
	// Workers is how many status writes run at once; default 8.
	Workers int
	// Node, when set, is the node an unbound pod is bound to (through the
	// binding subresource, as a scheduler does) before it runs. A pod
	// bound to a node is deleted gracefully, so the simulator stops it
	// and makes the final delete; the API server deletes an unbound pod at
	// once.
	Node string
	// ReportRunning writes each pod Running and Ready before its plan
	// starts, as a kubelet does once the containers run. Without it a pod
	// starts when first seen and goes from Pending to its end in one
	// status write.
	ReportRunning bool
	// Recheck is how often a plan that says Hold is asked again; default
	// 50ms.
	Recheck time.Duration
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
	// InPlace is how many times the simulator restarted its first
	// container in place (Plan.InPlace, and the plan's outcome where a
	// restart rule matched it).
	InPlace int32
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
	cancel  context.CancelFunc
	stopped chan struct{}

	mu              sync.Mutex
	runs            map[types.UID]*run            // unfinished pods seen, until gone
	live            map[slot]map[types.UID]string // unfinished pods (UID -> name) by job and index
	unfinished      int                           // pods in live
	peak            int                           // most pods in live at once
	booked          sets.Set[types.UID]           // every pod seen
	perSlot         map[slot]int                  // pods seen by job and index
	truth           map[types.UID]Record
	seen            int
	finished        int // pods ended as their plans said
	holdTerminating bool
	violations      []string
	doubles         []string
	// generations are the unfinished pods of jobs that restart their pods
	// together, by UID: a pod's generation must never meet another's.
	generations map[types.UID]generation
}

// generation is an unfinished pod's restart-attempt label, and its job.
type generation struct{ job, name, value string }

// slot is one index of one job.
type slot struct {
	job   string
	index int
}

// run is the simulator's book of one unfinished pod.
type run struct {
	index     int
	plan      Plan
	started   time.Time // zero until the plan starts
	due       time.Time // when the plan, or a deletion, ends the pod; zero before either
	deletedAt time.Time
	inPlace   int // the plan's InPlace exits made so far
}

// New returns a simulator; Run starts it.
func New(opts Options) *Simulator {
	if opts.Workers <= 0 {
		opts.Workers = 8
	}
	if opts.Recheck <= 0 {
		opts.Recheck = 50 * time.Millisecond
	}
	return &Simulator{
		opts:        opts,
		queue:       workqueue.NewTypedDelayingQueue[string](),
		stopped:     make(chan struct{}),
		runs:        map[types.UID]*run{},
		live:        map[slot]map[types.UID]string{},
		generations: map[types.UID]generation{},
		booked:      sets.New[types.UID](),
		perSlot:     map[slot]int{},
		truth:       map[types.UID]Record{},
	}
}

// Run plays the kubelet until ctx ends or Stop is called. It returns once
// its cache has synced, with the workers running in the background.
func (s *Simulator) Run(ctx context.Context) error {
	ctx, s.cancel = context.WithCancel(ctx)
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
		s.cancel()
		close(s.stopped)
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		s.cancel()
		factory.Shutdown()
		close(s.stopped)
		return fmt.Errorf("pod simulator: cache never synced: %w", context.Cause(ctx))
	}
	var workers sync.WaitGroup
	for range s.opts.Workers {
		workers.Go(func() {
			for s.next(ctx) {
			}
		})
	}
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
		factory.Shutdown()
		workers.Wait()
		close(s.stopped)
	}()
	return nil
}

// Stop stops a running simulator and waits until it has; stopping twice
// is fine.
func (s *Simulator) Stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	<-s.stopped
}

// HoldTerminating keeps deleted pods as they are, not stopped and not
// finally deleted, as a slow node would, until called with false.
func (s *Simulator) HoldTerminating(hold bool) {
	s.mu.Lock()
	s.holdTerminating = hold
	s.mu.Unlock()
	if hold || s.indexer == nil {
		return
	}
	for _, obj := range s.indexer.List() {
		s.enqueue(obj.(*corev1.Pod), 0)
	}
}

// job is the pod's job as Record.Job names it.
func (s *Simulator) job(pod *corev1.Pod) string {
	if s.opts.JobLabel == "" {
		return ""
	}
	return pod.Namespace + "/" + pod.Labels[s.opts.JobLabel]
}

// index is the pod's completion index, -1 when it has no valid one.
func (s *Simulator) index(pod *corev1.Pod) (int, bool) {
	for _, l := range s.opts.IndexLabels {
		if v, ok := pod.Labels[l]; ok {
			if i, err := strconv.Atoi(v); err == nil && i >= 0 {
				return i, true
			}
			return -1, false
		}
	}
	return -1, false
}

// observe books a pod the watch shows: a new unfinished pod is checked
// against the others of its index and, once it runs, given its plan; a
// finished one is taken out of the unfinished set.
func (s *Simulator) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	index, valid := s.index(pod)
	at := slot{s.job(pod), index}
	s.mu.Lock()
	if !s.booked.Has(pod.UID) {
		s.booked.Insert(pod.UID)
		s.perSlot[at]++
		if !valid {
			s.violations = append(s.violations, fmt.Sprintf("pod %s has no valid index label %v", pod.Name, s.opts.IndexLabels))
		}
	}
	if terminal(pod) {
		s.finishLocked(pod, at)
		s.mu.Unlock()
		if pod.DeletionTimestamp != nil && ptr.Deref(pod.DeletionGracePeriodSeconds, 1) != 0 {
			s.enqueue(pod, 0) // the kubelet's final delete is still owed
		}
		return
	}
	r := s.runs[pod.UID]
	if r == nil {
		if _, done := s.truth[pod.UID]; done {
			s.mu.Unlock()
			return // our terminal write is not in the cache yet
		}
		r = &run{index: index}
		s.runs[pod.UID] = r
		s.seen++
		if valid {
			s.addLiveLocked(at, pod)
		}
	}
	if r.started.IsZero() && (!s.opts.ReportRunning || pod.Status.Phase == corev1.PodRunning) {
		// Without ReportRunning a pod starts when first seen; with it, a
		// pod someone else marked Running starts now.
		s.startLocked(r, pod, time.Now())
	}
	if pod.DeletionTimestamp != nil && r.deletedAt.IsZero() {
		r.deletedAt = time.Now()
		if stop := r.deletedAt.Add(s.opts.Shutdown); r.due.IsZero() || stop.Before(r.due) {
			r.due = stop
		}
	}
	var wait time.Duration
	if !r.due.IsZero() {
		wait = time.Until(r.due)
	}
	s.mu.Unlock()
	s.enqueue(pod, wait)
}

// startLocked starts a pod's plan at now.
func (s *Simulator) startLocked(r *run, pod *corev1.Pod, now time.Time) {
	r.plan = s.opts.Script(pod, r.index)
	r.started = now
	if due := now.Add(r.plan.Run); r.due.IsZero() || due.Before(r.due) {
		r.due = due
	}
}

// addLiveLocked books an unfinished pod of an index, and a violation if
// the index has another.
func (s *Simulator) addLiveLocked(at slot, pod *corev1.Pod) {
	others := s.live[at]
	if others == nil {
		others = map[types.UID]string{}
		s.live[at] = others
	}
	for uid, name := range others {
		v := fmt.Sprintf("%sindex %d: pod %s (%s) created while pod %s (%s) had not finished", jobPrefix(at.job), at.index, pod.Name, pod.UID, name, uid)
		s.violations = append(s.violations, v)
		s.doubles = append(s.doubles, v)
	}
	others[pod.UID] = pod.Name
	if value, ok := pod.Labels[v1alpha1.RestartAttemptLabel]; ok {
		for uid, g := range s.generations {
			if g.job == at.job && g.value != value {
				s.violations = append(s.violations, fmt.Sprintf("%spod %s (%s) of generation %s created while pod %s (%s) of generation %s had not finished",
					jobPrefix(at.job), pod.Name, pod.UID, value, g.name, uid, g.value))
			}
		}
		s.generations[pod.UID] = generation{job: at.job, name: pod.Name, value: value}
	}
	s.unfinished++
	s.peak = max(s.peak, s.unfinished)
}

// removeLiveLocked takes a pod out of the unfinished set.
func (s *Simulator) removeLiveLocked(at slot, uid types.UID) {
	if _, ok := s.live[at][uid]; !ok {
		return
	}
	delete(s.live[at], uid)
	delete(s.generations, uid)
	s.unfinished--
	if len(s.live[at]) == 0 {
		delete(s.live, at)
	}
}

// forget notes a pod gone from the API. A pod bound to a node can only go
// after its terminal status (the simulator's final delete follows it), so
// one that goes unfinished was released by someone who should not have.
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
	if _, done := s.truth[pod.UID]; !done && !terminal(pod) && pod.Spec.NodeName != "" {
		s.violations = append(s.violations, fmt.Sprintf("%sindex %d: pod %s (%s) removed before it finished", jobPrefix(at.job), index, pod.Name, pod.UID))
	}
	s.removeLiveLocked(at, pod.UID)
	delete(s.runs, pod.UID)
}

// finishLocked books a pod the watch shows terminal.
func (s *Simulator) finishLocked(pod *corev1.Pod, at slot) {
	s.removeLiveLocked(at, pod.UID)
	if _, done := s.truth[pod.UID]; !done {
		// Observed terminal without our acknowledgement: our write went
		// through but its answer was lost (an API server restart), or
		// someone else ended the pod.
		r := Record{UID: pod.UID, Name: pod.Name, Job: at.job, Index: at.index, Phase: pod.Status.Phase, Finished: time.Now()}
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

// sync moves one pod a step on: the final delete of a finished pod, or
// for an unfinished one, binding it, reporting it Running, or ending it
// once its plan (or its deletion) says so.
func (s *Simulator) sync(ctx context.Context, key string) error {
	obj, ok, err := s.indexer.GetByKey(key)
	if err != nil || !ok {
		return err
	}
	pod := obj.(*corev1.Pod)
	deleted := pod.DeletionTimestamp != nil
	s.mu.Lock()
	hold := deleted && s.holdTerminating
	r := s.runs[pod.UID]
	_, done := s.truth[pod.UID]
	s.mu.Unlock()
	switch {
	case hold:
		return nil // HoldTerminating(false) looks at every pod again
	case terminal(pod):
		return s.finalDelete(ctx, pod)
	case r == nil || done:
		return nil
	case !deleted && s.opts.Node != "" && pod.Spec.NodeName == "":
		return s.bind(ctx, pod)
	}
	s.mu.Lock()
	waiting := r.started.IsZero() && r.due.IsZero()
	s.mu.Unlock()
	if waiting {
		return s.markRunning(ctx, key, pod, r)
	}

	s.mu.Lock()
	if !deleted && r.plan.Hold && !time.Now().Before(r.due) {
		r.plan = s.opts.Script(pod, r.index)
		r.due = r.started.Add(r.plan.Run)
	}
	plan, due := r.plan, r.due
	s.mu.Unlock()
	s.mu.Lock()
	inPlace := r.inPlace
	s.mu.Unlock()
	if restartCount(pod) < inPlace {
		// The cache has not seen our last restart in place yet: a write
		// from this copy would undo it.
		s.queue.AddAfter(key, s.opts.Recheck)
		return nil
	}
	switch wait := time.Until(due); {
	case wait > 0:
		s.queue.AddAfter(key, wait)
		return nil
	case inPlace < len(plan.InPlace) && !deleted:
		return s.exitInPlace(ctx, key, pod, r, plan.InPlace[inPlace], false)
	case plan.Hold && !deleted:
		s.queue.AddAfter(key, s.opts.Recheck)
		return nil
	case !deleted && restartsAtEnd(pod, plan):
		return s.exitInPlace(ctx, key, pod, r, endExit(plan), true)
	}
	return s.end(ctx, pod, r, plan, deleted)
}

// endExit is the exit code of the pod's containers at the plan's outcome,
// but for an eviction (Disrupted), which no container restart rule sees.
func endExit(plan Plan) int32 {
	if plan.OOMKilled {
		return ExitKilled
	}
	return plan.ExitCode
}

// restartsAtEnd: the plan's outcome is an exit of the pod's first
// container that one of its restart rules matches, so the kubelet
// restarts the container in place rather than end the pod.
func restartsAtEnd(pod *corev1.Pod, plan Plan) bool {
	return !plan.Disrupted && len(pod.Spec.Containers) > 0 && RestartRuleMatches(&pod.Spec.Containers[0], endExit(plan))
}

// bind binds the pod to Options.Node, as a scheduler does; the watch
// brings the bound pod back.
func (s *Simulator) bind(ctx context.Context, pod *corev1.Pod) error {
	err := s.opts.Client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: s.opts.Node},
	}, metav1.CreateOptions{})
	return ignoreGone(err)
}

// markRunning reports a pod Running and Ready, and starts its plan.
func (s *Simulator) markRunning(ctx context.Context, key string, pod *corev1.Pod, r *run) error {
	out := pod.DeepCopy()
	now := time.Now()
	MarkRunning(out, now)
	if _, err := s.opts.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
		return ignoreGone(err)
	}
	s.mu.Lock()
	if r.started.IsZero() {
		s.startLocked(r, pod, now)
	}
	wait := time.Until(r.due)
	s.mu.Unlock()
	s.queue.AddAfter(key, wait)
	return nil
}

// exitInPlace has the pod's first container exit with code: restarted in
// place where a restart rule of it matches the code (the plan then goes
// on, Run later), else the pod's end with that code. atEnd: the exit is
// the plan's outcome (an OOM kill where the plan says OOMKilled), which
// the container, run again, repeats at least Recheck later.
func (s *Simulator) exitInPlace(ctx context.Context, key string, pod *corev1.Pod, r *run, code int32, atEnd bool) error {
	if len(pod.Spec.Containers) == 0 || !RestartRuleMatches(&pod.Spec.Containers[0], code) {
		s.mu.Lock()
		plan := r.plan
		s.mu.Unlock()
		plan.ExitCode, plan.Disrupted, plan.OOMKilled = code, false, false
		return s.end(ctx, pod, r, plan, false)
	}
	if len(pod.Status.ContainerStatuses) == 0 && s.opts.ReportRunning {
		// The cache has not seen the pod Running yet.
		s.queue.AddAfter(key, s.opts.Recheck)
		return nil
	}
	out := pod.DeepCopy()
	now := time.Now()
	if len(out.Status.ContainerStatuses) == 0 {
		MarkRunning(out, now) // a restart in place reports the pod Running
	}
	name := pod.Spec.Containers[0].Name
	MarkRestartedInPlace(out, name, code, now)
	s.mu.Lock()
	oom := atEnd && r.plan.OOMKilled
	s.mu.Unlock()
	for i := range out.Status.ContainerStatuses {
		if cs := &out.Status.ContainerStatuses[i]; oom && cs.Name == name && cs.LastTerminationState.Terminated != nil {
			cs.LastTerminationState.Terminated.Reason = "OOMKilled"
		}
	}
	if _, err := s.opts.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
		return err // a conflict: tried again from the newest state
	}
	s.mu.Lock()
	r.inPlace++
	next := r.plan.Run
	if atEnd {
		// A crash loop at the plan's outcome: never a tighter loop of
		// status writes than Recheck.
		next = max(next, s.opts.Recheck)
	}
	r.due = now.Add(next)
	wait := time.Until(r.due)
	s.mu.Unlock()
	s.queue.AddAfter(key, wait)
	return nil
}

// restartCount is the pod's first container's restart count.
func restartCount(pod *corev1.Pod) int {
	if len(pod.Status.ContainerStatuses) == 0 {
		return 0
	}
	return int(pod.Status.ContainerStatuses[0].RestartCount)
}

// end writes the pod's terminal status, as its plan says or, for a
// deleted pod, killed; then books it and makes the final delete.
func (s *Simulator) end(ctx context.Context, pod *corev1.Pod, r *run, plan Plan, deleted bool) error {
	exit, disrupted := plan.ExitCode, plan.Disrupted
	if disrupted || deleted || plan.OOMKilled {
		exit = ExitKilled
	}
	disrupted = disrupted && !deleted
	out := pod.DeepCopy()
	s.mu.Lock()
	if out.Status.StartTime == nil && !r.started.IsZero() {
		out.Status.StartTime = ptr.To(metav1.NewTime(r.started))
	}
	s.mu.Unlock()
	MarkTerminated(out, exit, disrupted, time.Now())
	if plan.OOMKilled && !disrupted && !deleted {
		MarkOOMKilled(out)
	}
	written, err := s.opts.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, out, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	at := slot{s.job(pod), r.index}
	s.mu.Lock()
	s.removeLiveLocked(at, pod.UID)
	s.truth[pod.UID] = Record{UID: pod.UID, Name: pod.Name, Job: at.job, Index: r.index, Phase: out.Status.Phase, Deleted: deleted, ExitCode: exit,
		InPlace: int32(r.inPlace), Finished: time.Now()}
	if !deleted {
		s.finished++
	}
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
	return ignoreGone(s.opts.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	}))
}

// ignoreGone drops the errors of a write that lost a race: the pod is
// gone, or changed since it was read (the watch brings it back).
func ignoreGone(err error) error {
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
		_, planned := s.runs[pod.UID]
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

// Seen is how many unfinished pods the simulator has run.
func (s *Simulator) Seen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen
}

// Finished is how many pods the simulator has ended as their plans said;
// pods it killed because they were deleted are not counted.
func (s *Simulator) Finished() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.finished
}

// RunsOf is how many pods (told apart by UID, finished or not) the
// simulator has seen for an index, in a simulator without JobLabel.
func (s *Simulator) RunsOf(index int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.perSlot[slot{index: index}]
}

// PeakUnfinished is the most pods with an index that were unfinished at
// once.
func (s *Simulator) PeakUnfinished() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// Doubles lists each time an index got a second unfinished pod: the
// violations an indexed job controller must never commit, even with pods
// that someone else created.
func (s *Simulator) Doubles() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.doubles...)
}

// Violations lists what the controller under test did that it must never
// do: two unfinished pods for one index, a pod without a valid index, a
// pod bound to a node released unfinished, a pod of one generation of a
// job that restarts its pods together created while a pod of another had
// not finished.
func (s *Simulator) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}
