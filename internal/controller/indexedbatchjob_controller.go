// Package controller reconciles IndexedBatchJobs: a thin reconciler (this
// file and apply.go) around a pure decision core (syncJob in sync.go, its
// phases in sync.go and manage.go, the status setters in status.go).
package controller

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podcache"
	"github.com/indexed-batch-job/indexed-batch-job/internal/serverload"
)

// podLister gives a sync the pods of a job: podcache.Source, or a test's
// fixed set. The pods are the cache's own: read them, never write to them.
// It keeps a job's settled pods out of its syncs: a sync lists the pods
// that can still change, not every pod of a large job.
type podLister interface {
	// List returns the pods labelled with the job's name, including pods
	// left behind by a deleted job of the same name.
	List(namespace, job string) ([]*jobpod.Pod, error)
	// ListUnsettled lists the job's pods but those settled for the job of
	// UID owner, and gives the indexes of those (a superset) and the
	// latest end among them.
	ListUnsettled(namespace, job string, owner types.UID) ([]*jobpod.Pod, indexset.Set, time.Time)
	// Settle keeps the pods out of ListUnsettled until they change.
	Settle(namespace, job string, owner types.UID, pods []*jobpod.Pod)
	// Unsettle brings the settled pods back into ListUnsettled.
	Unsettle(namespace, job string)
	// Get returns the pod of that name labelled with the job's name, nil if
	// there is none.
	Get(namespace, job, name string) *jobpod.Pod
	// FailureSeen is when the lister saw the job's latest failure that no
	// sync has counted yet, zero if none or unknown (syncInput.failureSeen).
	FailureSeen(namespace, job string) time.Time
	// Len is how many pods it holds, and FailingJobs how many jobs have a
	// failure no sync has counted yet, for trackedEntries.
	Len() int
	FailingJobs() int
}

// The operator's pods come from a podcache.Source.
var _ podLister = (*podcache.Source)(nil)

// Reconciler runs IndexedBatchJobs.
type Reconciler struct {
	client   client.Client
	recorder events.EventRecorder
	clock    clock.PassiveClock
	backoff  Backoff

	// jobs is what is remembered of each job between its syncs
	// (job_state.go).
	jobs *jobStates
	// writes is how many pod writes a sync sends at once (writesPerSync),
	// at most; load, when set, narrows it while the API server is slow
	// (writeWindow) and says when it is busy.
	writes int
	load   *serverload.Monitor
	// order ranks the jobs waiting for a worker (order.go): every add to
	// the controller's queue carries the job's priority, and a sync with
	// many pods to create gives its worker up once it has sent its share
	// and a job ahead of it waits (createPods). Nil in tests without a
	// queue, where no job waits.
	order *jobOrder
	// wake queues a job's sync (the controller's queue), nil in tests
	// without one.
	wake func(reconcile.Request)
	// strays lets go of pods edited out of their job (strays.go).
	strays *strayReleases
	// later removes, in the background, the finalizers of pods whose result
	// is counted already (release.go).
	later *laterReleases
	// pods is the cache of the jobs' pods (podcache.Source), set up by
	// SetupWithManager.
	pods podLister
	// podWrites sends pod creates and finalizer patches without decoding
	// the answers (podcache.Writer); set up by SetupWithManager, nil in
	// tests that give the Reconciler a client only.
	podWrites *podcache.Writer
	// apiReader reads from the API server, past the manager's cache, which
	// holds only the operator's own Services (see ensureService); it is
	// the manager's API reader once SetupWithManager ran.
	apiReader client.Reader
	// memoryCaps remembers, by namespace, what its LimitRanges let an OOM
	// raise reach, for memoryCapRecheckInterval (memory_cap.go).
	memoryCaps *utilcache.Expiring
}

// NewReconciler returns a Reconciler that writes through c, reports events
// to recorder (nil reports none), reads the time from clk and delays the
// replacement of failed pods by backoff.
func NewReconciler(c client.Client, recorder events.EventRecorder, clk clock.PassiveClock, backoff Backoff) *Reconciler {
	caps := utilcache.NewExpiring()
	if full, ok := clk.(clock.Clock); ok { // a fake clock in tests
		caps = utilcache.NewExpiringWithClock(full)
	}
	r := &Reconciler{client: c, apiReader: c, recorder: recorder, clock: clk, backoff: backoff, jobs: newJobStates(),
		writes: maxWritesPerSync, memoryCaps: caps}
	r.later = newLaterReleases(r)
	r.strays = newStrayReleases(r)
	return r
}

// SetServerLoad lets the reconciler follow how busy the API server is:
// creates go in batches no larger than m's window, and, while it is busy,
// status writes that only move counters wait longer (holdCounters).
func (r *Reconciler) SetServerLoad(m *serverload.Monitor) {
	r.load = m
	registerServerLoadMetrics(m)
}

// SetReleaseBound sets how long a counted pod's finalizer removal waits
// for the client's spare budget before it shares the budget with the foreground
// (DefaultReleaseBound without a call). Call it before the manager starts.
func (r *Reconciler) SetReleaseBound(d time.Duration) { r.later.bound = d }

// writeWindow is how many writes a sync sends at once now.
func (r *Reconciler) writeWindow() int {
	if r.load == nil {
		return r.writes
	}
	return max(min(r.writes, r.load.Window()), 1)
}

// serverBusy: the API server is busy now (SetServerLoad).
func (r *Reconciler) serverBusy() bool { return r.load != nil && r.load.Busy() }

// +kubebuilder:rbac:groups=batch.indexedjob.dev,resources=indexedbatchjobs,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=batch.indexedjob.dev,resources=indexedbatchjobs/status,verbs=get;update
// +kubebuilder:rbac:groups=batch.indexedjob.dev,resources=indexedbatchjobs/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile reads the job and its pods from the cache, creates the job's
// headless Service if it asks for one (service.go) and its Workload and
// PodGroup if it asks for gang scheduling (gang.go), lets syncJob decide,
// then applies the plan (apply.go). A job that is gone or being deleted
// only has its pods' finalizers released.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, err error) {
	defer observeSync(time.Now(), &err)
	job, err := r.getJob(ctx, req.NamespacedName)
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case job == nil:
		return ctrl.Result{}, r.releaseForeignPods(ctx, req.Namespace, req.Name, "")
	case isManagedElsewhere(job):
		log.FromContext(ctx).V(4).Info("Skipped job managed by another controller", "managedBy", *job.Spec.ManagedBy)
		return ctrl.Result{}, nil
	case job.DeletionTimestamp != nil:
		r.jobs.forget(job.UID)
		return ctrl.Result{}, r.releaseForeignPods(ctx, job.Namespace, job.Name, "")
	case r.jobs.jobStale(job.UID, job.ResourceVersion):
		// Our own last status write is not in the cache yet; its update
		// event will bring the job back. Deciding now could retry an index
		// that write marked failed.
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	// A Service the API server refuses is reported in the status; the pods
	// run all the same, and the error brings a retry.
	svc, svcErr := r.ensureService(ctx, job)
	// A PodGroup the API server refuses is reported in the status, and the
	// pods wait for it (syncJob holds them); the error brings a retry.
	gang, gangErr := r.ensureGang(ctx, job)
	satisfied := r.observeCache(job)
	memoryCap := r.memoryCap(ctx, job)
	// The decision's own time, without a request's: what paces the job's
	// syncs (jobOrder.decided).
	deciding := time.Now()
	_, p, err := r.decide(ctx, job, satisfied, func(in *syncInput) {
		in.service = svc
		in.gang = gang
		in.memoryCap = memoryCap
	})
	if err != nil {
		return ctrl.Result{}, errors.Join(svcErr, gangErr, err)
	}
	if r.order != nil {
		r.order.decided(req.NamespacedName, time.Since(deciding), len(p.create))
	}
	result, err := r.apply(ctx, job, p)
	if err = errors.Join(svcErr, gangErr, err); err != nil {
		return ctrl.Result{}, err
	}
	return result, nil
}

// getJob reads the job from the cache, nil when it is gone. It keeps
// r.jobs current, dropping the state of a job that is gone or was deleted
// and created again under the same name.
func (r *Reconciler) getJob(ctx context.Context, key types.NamespacedName) (*ibjv1.IndexedBatchJob, error) {
	job := &ibjv1.IndexedBatchJob{}
	if err := r.client.Get(ctx, key, job); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
		r.jobs.gone(key)
		if r.order != nil {
			r.order.forget(key)
		}
		return nil, nil
	}
	if r.order != nil {
		r.order.seen(job)
	}
	r.jobs.seen(key, job.UID)
	return job, nil
}

// isManagedElsewhere: spec.managedBy names another controller, which the
// operator leaves the job to.
func isManagedElsewhere(job *ibjv1.IndexedBatchJob) bool {
	return job.Spec.ManagedBy != nil && *job.Spec.ManagedBy != ibjv1.ControllerName
}

// observeCache updates the job's expectations from what the cache shows
// before the job's pods are listed, so that what it shows now the list
// shows too: it forgets the finalizer removals the cache shows, and
// reports whether the cache shows every pod this process created for the
// job (satisfied).
func (r *Reconciler) observeCache(job *ibjv1.IndexedBatchJob) (satisfied bool) {
	now := r.clock.Now()
	r.jobs.observeFinalizers(job.UID, func(name string) *jobpod.Pod { return r.pods.Get(job.Namespace, job.Name, name) }, now)
	return r.jobs.podsSeen(job.UID, r.ownPod(job), now)
}

// decide lets syncJob decide for the job from its pods, as the cache shows
// them (satisfied: observeCache), with what complete adds to the input.
// The sync reads the pods the cache did not settle for the job; one that
// needs those too (plan.needAllPods) is made again from every pod of the
// job, all of them unsettled. apply settles the pods the plan names.
func (r *Reconciler) decide(ctx context.Context, job *ibjv1.IndexedBatchJob, satisfied bool, complete func(*syncInput)) (syncInput, plan, error) {
	in, err := r.readSyncInput(ctx, job, satisfied, true, complete)
	if err != nil {
		return syncInput{}, plan{}, err
	}
	p := syncJob(in)
	if !p.needAllPods {
		return in, p, nil
	}
	r.pods.Unsettle(job.Namespace, job.Name)
	// The foreign pods, never settled, were released by the first read
	// already.
	if in, err = r.readSyncInput(ctx, job, satisfied, false, complete); err != nil {
		return syncInput{}, plan{}, err
	}
	return in, syncJob(in), nil
}

// readSyncInput lists the job's unsettled pods (releasing the foreign ones
// with releaseForeign, see ownPods) and makes the sync's input of them,
// with what complete adds.
func (r *Reconciler) readSyncInput(ctx context.Context, job *ibjv1.IndexedBatchJob, satisfied, releaseForeign bool, complete func(*syncInput)) (syncInput, error) {
	pods, floors, err := r.ownPods(ctx, job, releaseForeign)
	if err != nil {
		return syncInput{}, err
	}
	in := r.syncInput(job, pods.own, floors, satisfied)
	in.settled, in.settledSuccess = pods.settled, pods.settledSuccess
	failures, err := r.loadFailures(ctx, job)
	if err != nil {
		return syncInput{}, err
	}
	in.failures, in.recordRefused = failures.record, failures.refused
	complete(&in)
	return in, nil
}

// settle keeps the pods (plan.settle, plan.settleReleased) out of the
// job's next syncs.
func (r *Reconciler) settle(job *ibjv1.IndexedBatchJob, pods []*jobpod.Pod, more ...*jobpod.Pod) {
	if len(pods)+len(more) > 0 {
		r.pods.Settle(job.Namespace, job.Name, job.UID, append(slices.Clip(pods), more...))
	}
}

// jobPodsListed are the cached pods a job controls but the settled ones,
// whose indexes are settled and the latest end among them settledSuccess.
type jobPodsListed struct {
	own            []*jobpod.Pod
	settled        indexset.Set
	settledSuccess time.Time
}

// ownPods returns the cached pods the job controls but the settled ones,
// and the attempts past the names the others hold (nameFloors). With
// releaseForeign, foreign pods (labelled with the job's name but not
// controlled by it) lose their tracking finalizer, with an event.
func (r *Reconciler) ownPods(ctx context.Context, job *ibjv1.IndexedBatchJob, releaseForeign bool) (jobPodsListed, map[int32]int32, error) {
	listed, settled, settledSuccess := r.pods.ListUnsettled(job.Namespace, job.Name, job.UID)
	out := jobPodsListed{settled: settled, settledSuccess: settledSuccess}
	own, foreign := splitByOwner(listed, job.UID)
	if !releaseForeign {
		foreign = nil
	}
	if err := r.forEachPod(ctx, foreign, r.removeFinalizer); err != nil {
		return out, nil, err
	}
	for _, pod := range foreign {
		r.emit(job, foreignPodEvent(pod.Name))
	}
	var others []*jobpod.Pod
	if len(own) < len(listed) {
		for _, pod := range listed {
			if pod.OwnerUID != job.UID {
				others = append(others, pod)
			}
		}
	}
	out.own = own
	return out, nameFloors(others), nil
}

// ownPod says whether the cache holds a pod of the name that the job
// controls.
func (r *Reconciler) ownPod(job *ibjv1.IndexedBatchJob) func(name string) bool {
	return func(name string) bool {
		pod := r.pods.Get(job.Namespace, job.Name, name)
		return pod != nil && pod.OwnerUID == job.UID && pod.UIDLabel == job.UID
	}
}

// foreignPodEvent says that a pod labelled with the job's name but not
// controlled by it was let go.
func foreignPodEvent(pod string) event {
	return warningEvent("ForeignPod", "Released pod %s without counting it: it carries this job's labels but is not controlled by it", pod)
}

// splitByOwner divides the pods labelled with a job's name into those the
// job with UID owner controls (and whose controller-uid label names it) and
// the foreign ones that still carry a finalizer of the operator: pods of a
// deleted job or of an earlier job of the same name, or edited out of the
// job, which must not stay stuck. An empty owner (the job is gone) makes
// every tracked pod foreign.
//
// When every pod is the job's, as nearly always, own is pods itself.
func splitByOwner(pods []*jobpod.Pod, owner types.UID) (own, foreign []*jobpod.Pod) {
	for i, pod := range pods {
		if owner != "" && pod.OwnerUID == owner && pod.UIDLabel == owner {
			if own != nil {
				own = append(own, pod)
			}
			continue
		}
		if own == nil {
			own = append(make([]*jobpod.Pod, 0, len(pods)), pods[:i]...)
		}
		if pod.Finalized() {
			foreign = append(foreign, pod)
		}
	}
	if own == nil {
		return pods, foreign
	}
	return own, foreign
}

// releaseForeignPods removes the tracking finalizer of the foreign pods
// labelled with the job's name (see splitByOwner).
func (r *Reconciler) releaseForeignPods(ctx context.Context, namespace, name string, owner types.UID) error {
	listed, err := r.pods.List(namespace, name)
	if err != nil {
		return err
	}
	_, foreign := splitByOwner(listed, owner)
	return r.forEachPod(ctx, foreign, r.removeFinalizer)
}

// syncInput is what syncJob decides from: the job, its pods, the time,
// whether the cache showed every pod this process created for it before
// they were listed (satisfied), and the
// pod names others hold (floors, from the cache, and takenFloors), and the
// deleted failed pods that are gone (observeGone).
func (r *Reconciler) syncInput(job *ibjv1.IndexedBatchJob, pods []*jobpod.Pod, floors map[int32]int32, satisfied bool) syncInput {
	now := r.clock.Now()
	lastWrite, heldStart := r.jobs.statusWrites(job.UID)
	gone := r.jobs.observeGone(job, pods)
	return syncInput{
		failureSeen:           r.pods.FailureSeen(job.Namespace, job.Name),
		job:                   job,
		pods:                  pods,
		now:                   now,
		backoff:               r.backoff,
		expectationsSatisfied: satisfied,
		lastStatusWrite:       lastWrite,
		heldStart:             heldStart,
		lastCreateRefused:     r.jobs.lastCreateRefused(job.UID),
		mutatedUntil:          r.jobs.mutatedUntil(job, now),
		serverBusy:            r.serverBusy(),
		nameFloors:            r.jobs.takenFloors(job.UID, goneFloors(gone, floors)),
		gone:                  gone,
	}
}

// newQueue makes the controller's queue as controller-runtime makes it by
// default (a priority queue with the given rate limiter), with every add
// ranked by r.order, and keeps its Add to wake a job's sync.
func (r *Reconciler) newQueue(logger logr.Logger) func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	return func(name string, limiter workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		q := newRankedQueue(name, r.order, r.podsAskedFor, logger.WithValues("controller", name), limiter)
		r.wake = q.Add
		return q
	}
}

// podsAskedFor is how many pods the job asks to be created now, as the
// cache holds it (podsAskedFor), none when it is not there.
func (r *Reconciler) podsAskedFor(key types.NamespacedName) int64 {
	job := &ibjv1.IndexedBatchJob{}
	if err := r.client.Get(context.Background(), key, job); err != nil {
		return 0
	}
	return podsAskedFor(job)
}

// othersAhead reports whether a job that goes before this one (order.go)
// waits for a worker.
func (r *Reconciler) othersAhead(job *ibjv1.IndexedBatchJob) bool {
	return r.order != nil && r.order.ahead(types.NamespacedName{Namespace: job.Namespace, Name: job.Name})
}

// maxSyncRetryDelay caps the delay before a failed sync is retried.
// controller-runtime's default cap is 1000 s: a job whose pods a full
// quota refused would then notice the freed quota only a quarter of an
// hour later. Upstream's Job controller caps its retries of failed API
// calls at 60 s too.
const maxSyncRetryDelay = time.Minute

// syncRetryLimiter is controller-runtime's default rate limiter (per job:
// 5 ms doubling on each failed sync; overall 10 retries a second, bursts of
// 100) with the per-job delay capped at maxSyncRetryDelay. A job whose pod
// creates keep failing is thus retried ever more slowly, never in a hot
// loop, and at least once a minute.
func syncRetryLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxSyncRetryDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// podEventBatchPeriod is how long a pod's creation, deletion or failure
// waits for the job's sync, so that the pod events that land together (two
// failures, the pods of a lost node) are decided together, as upstream's
// pod update batch period: a failure a moment after another never starts a
// pod that the job's end then stops. A success syncs at once.
const podEventBatchPeriod = time.Second

// SetupWithManager registers the controller: jobs and their headless
// Services, from the manager's cache (which holds only the operator's
// Services, see CacheOptions), so that a deleted Service is created again;
// and their pods, from a podcache.Source of its own over the given
// namespaces (all when empty).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, namespaces []string, maxConcurrentReconciles int) error {
	pods, err := podcache.New(mgr.GetConfig(), namespaces, podcache.Options{FinalizerGone: r.later.observed, Strayed: r.strays.add, BatchPeriod: podEventBatchPeriod, Now: r.clock.Now})
	if err != nil {
		return err
	}
	r.pods = pods
	if r.podWrites, err = podcache.NewWriter(mgr.GetConfig()); err != nil {
		return err
	}
	r.apiReader = mgr.GetAPIReader()
	r.writes = writesPerSync(mgr.GetConfig().QPS, maxConcurrentReconciles)
	r.order = newJobOrder(r.clock, mgr.GetConfig().QPS)
	// The tracked-entries gauge reports this reconciler while its manager
	// runs it, and forgets it once stopped.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		tracked.add(r)
		defer tracked.remove(r)
		<-ctx.Done()
		return nil
	})); err != nil {
		return err
	}
	if err := mgr.Add(r.later); err != nil {
		return err
	}
	if err := mgr.Add(r.strays); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&ibjv1.IndexedBatchJob{}).
		Owns(&corev1.Service{}).
		WatchesRawSource(pods).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: maxConcurrentReconciles,
			RateLimiter:             syncRetryLimiter(),
			NewQueue:                r.newQueue(mgr.GetLogger()),
		}).
		Named("indexedbatchjob").
		Complete(r)
}
