package controller

import (
	"math"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
)

// jobOrder decides which waiting job a worker takes next: jobs are served
// in the order they came, each charged for the pods it has created beyond
// a free allowance, so that a fleet finishes in the order it came while a
// big job cannot hold back the jobs that come after it; among the jobs that
// came about together, those with the fewest pods left to create go first.
//
// This is start-time fair queueing with a job as the flow. A job's place is
// its virtual time: its arrival, plus the time the client's QPS needs for
// the work it was charged, each pod created and each sync as one request.
// A job's rank is its finish tag: its virtual time plus the time its pods
// still to create take, at most a free allowance's (finish), so that of
// the jobs that came within that second the one that ends soonest goes
// first, and a job waits behind newcomers for at most that second of
// their arrivals. The job with the earliest finish tag goes first.
//
// The order's own virtual time is that of the latest job a worker took
// (its start, not its finish tag); a job that comes arrives at it, or
// after the job that came before it (by the wall clock's time between
// them, at most maxArrivalGap), so that jobs keep the order they came in.
// A small job (work of at most freeWork requests) is never charged, so
// jobs of a fleet keep that order; a big one, or one whose pods keep
// changing, is, and a job that comes while it is served goes first once
// its virtual time passes the newcomer's. A waiting job's virtual time
// does not move, so every job is served in the end (aging).
//
// Arriving at the order's virtual time, not at the wall clock's, is what
// keeps a newcomer's wait short however many jobs share the client: while
// ten jobs share its QPS, each one's virtual time runs at a tenth of the
// wall clock's pace, and a job that came a second after them would wait
// for ten seconds of their work to pass its arrival. It waits instead for
// the free allowances they have left.
//
// The queue holds each waiting job once, at the highest priority it was
// added with; jobOrder gives every add the job's current priority
// (rankedQueue).
type jobOrder struct {
	clock clock.PassiveClock
	// perRequest is the virtual time a charged request costs: one over the
	// client's QPS.
	perRequest time.Duration
	// freeWork is how many of its requests a job is not charged for: one
	// second of the client's QPS.
	freeWork int64
	// now is the order's virtual time, which starts at 0 (priorities are
	// its milliseconds, negated): that of the latest job a worker took,
	// never less than it was.
	now time.Duration
	// lastArrival is the arrival given to the latest job that came, and
	// lastHeard when it came on the wall clock.
	lastArrival time.Duration
	lastHeard   time.Time

	mu   sync.Mutex
	jobs map[types.NamespacedName]*jobTurn
	// queued are the jobs waiting in the queue, with the priority they
	// were added with and when they are ready.
	queued map[types.NamespacedName]queuedJob
}

// jobTurn is one job's place in the order.
type jobTurn struct {
	uid types.UID
	// arrival is the job's virtual time when it came: the
	// order's when this process first heard of it or, for a job created
	// more than arrivalSlack before that (one there before the process
	// started or won its lease), a little before, by how much earlier it
	// was created (lateArrival).
	arrival time.Duration
	// heard is when this process first heard of the job.
	heard time.Time
	// work is how many pods the job has created (all of its generations'
	// pods, each retry too) and how many syncs it had.
	work int64
	// notBefore is the earliest its next sync may start (decided): a sync
	// queued before then waits until then.
	notBefore time.Time
	// toCreate is how many pods the job has still to create: what its
	// latest decision wanted less those created since, or, before its
	// first decision, what the job asks for (arriving). sized says it was
	// given.
	toCreate int64
	sized    bool
}

// decisionShare bounds the share of time a job's syncs spend deciding: a
// job is synced again no sooner than decisionShare times its last
// decision took after that decision. A decision reads every pod of the
// job, so a job of 100,000 pods whose pods change all the time would
// otherwise be synced back to back, each sync costing its size, and the
// cost of each of its pods would grow with the job. Paced, its syncs come
// less often the larger it is, and each sees more changes: a small job's
// decision takes microseconds and it is not held back.
const decisionShare = 10

// arrivalSlack is how much earlier than the watch event a live job's
// creationTimestamp may be: it has whole seconds only, and the event takes
// a moment. The order the events came in orders the jobs of a fleet
// created within one second.
const arrivalSlack = 2 * time.Second

// maxArrivalGap bounds how far apart in virtual time two jobs that came one
// after the other arrive. Jobs of a fleet come milliseconds apart and keep
// the wall clock's spacing (those that came within the same millisecond
// share a place and take turns). A job that comes a second after ten jobs
// that share the client arrives just after them, where the wall clock
// would have put it a second of each one's work behind them.
const maxArrivalGap = 10 * time.Millisecond

// lateSpan bounds how far before the order's virtual time a job heard of
// late arrives: a job created an hour before the process started must not
// hold back the jobs that come after the start for an hour of its work.
const lateSpan = time.Second

type queuedJob struct {
	priority int
	ready    time.Time
}

// newJobOrder makes the order for a client of the given QPS (no QPS: the
// creates of maxWritesPerSync a second).
func newJobOrder(clk clock.PassiveClock, qps float32) *jobOrder {
	if qps <= 0 {
		qps = maxWritesPerSync
	}
	return &jobOrder{
		clock:      clk,
		lastHeard:  clk.Now(),
		perRequest: time.Duration(float64(time.Second) / float64(qps)),
		freeWork:   int64(math.Ceil(float64(qps) * writeQueueSeconds)),
		jobs:       map[types.NamespacedName]*jobTurn{},
		queued:     map[types.NamespacedName]queuedJob{},
	}
}

// turn returns the job's place, making it (it arrives now) for a job first
// heard of. mu is held.
func (o *jobOrder) turn(key types.NamespacedName) *jobTurn {
	t := o.jobs[key]
	if t == nil {
		t = o.arrive()
		o.jobs[key] = t
	}
	return t
}

// arrive is the place of a job that comes now: at the order's virtual
// time, or after the job that came before by the time between them, at
// most maxArrivalGap. mu is held.
func (o *jobOrder) arrive() *jobTurn {
	now := o.clock.Now()
	gap := min(max(now.Sub(o.lastHeard), 0), maxArrivalGap)
	o.lastArrival, o.lastHeard = max(o.now, o.lastArrival+gap), now
	return &jobTurn{arrival: o.lastArrival, heard: now}
}

// lateArrival is the arrival of a job created at created and first heard
// of at heard, arrival: before arrival by a millisecond for each second
// the job was old (creationTimestamps have whole seconds), at most
// lateSpan, so that such jobs keep the order they were created in.
func lateArrival(arrival time.Duration, heard, created time.Time) time.Duration {
	age := heard.Sub(created) / time.Second
	return arrival - min(age*time.Millisecond, lateSpan)
}

// priorityOf is the queue priority of the job's place: the earlier its
// finish tag, the higher. mu is held.
func (o *jobOrder) priorityOf(t *jobTurn) int {
	ms := -o.finish(t).Milliseconds()
	return int(min(max(ms, math.MinInt32), math.MaxInt32))
}

// finish is the job's finish tag: its virtual time and the time its pods
// still to create take at the client's QPS, at most freeWork's. mu is held.
func (o *jobOrder) finish(t *jobTurn) time.Duration {
	return o.virtual(t) + time.Duration(min(t.toCreate, o.freeWork))*o.perRequest
}

// virtual is the job's virtual time: its arrival and the time its charged
// work takes at the client's QPS. mu is held.
func (o *jobOrder) virtual(t *jobTurn) time.Duration {
	charged := max(t.work-o.freeWork, 0)
	return t.arrival + time.Duration(charged)*o.perRequest
}

// seen updates the job's place from the job read by a sync, and counts the
// sync: a job that was deleted and created again under its name starts
// afresh, and a job created more than arrivalSlack before this process
// heard of it arrives a little earlier (lateArrival).
func (o *jobOrder) seen(job *ibjv1.IndexedBatchJob) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.turn(types.NamespacedName{Namespace: job.Namespace, Name: job.Name})
	if t.uid != job.UID {
		if t.uid != "" {
			*t = *o.arrive()
		}
		t.uid = job.UID
		if created := job.CreationTimestamp.Time; !created.IsZero() && created.Add(arrivalSlack).Before(t.heard) {
			t.arrival = lateArrival(t.arrival, t.heard, created)
		}
	}
	t.work++
}

// charge counts n pods the job created.
func (o *jobOrder) charge(key types.NamespacedName, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.turn(key)
	t.work += int64(n)
	t.toCreate = max(t.toCreate-int64(n), 0)
}

// decided records that a sync of the job spent cost deciding (reading and
// grouping its pods and syncJob), so that its next sync waits
// decisionShare times that, and that it decided to create creates pods.
func (o *jobOrder) decided(key types.NamespacedName, cost time.Duration, creates int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.turn(key)
	t.notBefore = o.clock.Now().Add(decisionShare * cost)
	t.toCreate, t.sized = int64(creates), true
}

// arriving gives a job that no decision has sized yet the pods it asks
// for, from work (the job as the cache holds it, work called without mu
// held), so that its first place already ranks by them.
func (o *jobOrder) arriving(key types.NamespacedName, work func(types.NamespacedName) int64) {
	o.mu.Lock()
	sized := o.turn(key).sized
	o.mu.Unlock()
	if sized || work == nil {
		return
	}
	n := work(key)
	o.mu.Lock()
	defer o.mu.Unlock()
	if t := o.turn(key); !t.sized {
		t.toCreate, t.sized = n, true
	}
}

// podsAskedFor is how many pods the job asks to be created now, as its spec
// and status say: its parallelism, at most its indexes (indexset.OfJob) not yet
// succeeded, less its active pods; none while it is suspended, once it
// finished, or when spec.indexes cannot be read (the sync starts none).
func podsAskedFor(job *ibjv1.IndexedBatchJob) int64 {
	if ptr.Deref(job.Spec.Suspend, false) || IsFinished(job) {
		return 0
	}
	indexes, err := indexset.OfJob(job)
	if err != nil {
		return 0
	}
	want := min(int64(ptr.Deref(job.Spec.Parallelism, 1)), int64(indexes.Len())-int64(job.Status.Succeeded)) - int64(job.Status.Active)
	return max(want, 0)
}

// forget drops a job that is gone.
func (o *jobOrder) forget(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.jobs, key)
}

// ahead reports whether a job other than key waits in the queue, ready,
// with a higher priority than key has now.
func (o *jobOrder) ahead(key types.NamespacedName) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	mine, now := o.priorityOf(o.turn(key)), o.clock.Now()
	for other, q := range o.queued {
		if other != key && q.priority > mine && !q.ready.After(now) {
			return true
		}
	}
	return false
}

// notReady is the readiness recorded for a failed sync's retry, which the
// queue's rate limiter delays by a time only it knows: none of a job's
// creates waits for it (ahead).
var notReady = time.Unix(math.MaxInt32, 0)

// enqueue is an add of the job to the queue as the order gives it: at the
// job's priority, and no sooner than its pace allows (decided) unless it is
// a failed sync's retry, which keeps the rate limiter's delay. It records
// the job as waiting, as the queue keeps it: at the highest priority it was
// added with and the earliest readiness (a retry's, when the rate limiter
// says: notReady).
func (o *jobOrder) enqueue(key types.NamespacedName, opts priorityqueue.AddOpts) priorityqueue.AddOpts {
	o.mu.Lock()
	defer o.mu.Unlock()
	t, now := o.turn(key), o.clock.Now()
	p := o.priorityOf(t)
	opts.Priority = &p
	if wait := t.notBefore.Sub(now); wait > opts.After && !opts.RateLimited {
		opts.After = wait
	}
	ready := now.Add(opts.After)
	if opts.RateLimited && opts.After == 0 {
		ready = notReady
	}
	if q, ok := o.queued[key]; ok {
		p = max(p, q.priority)
		if q.ready.Before(ready) {
			ready = q.ready
		}
	}
	o.queued[key] = queuedJob{priority: p, ready: ready}
	return opts
}

// taken records that a worker took the job from the queue: the order's
// virtual time moves on to the job's.
func (o *jobOrder) taken(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.queued, key)
	if t := o.jobs[key]; t != nil {
		o.now = max(o.now, o.virtual(t))
	}
}

// len is how many jobs the order holds a place for, for trackedEntries.
func (o *jobOrder) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.jobs)
}

// newRankedQueue makes the controller's queue: controller-runtime's priority
// queue with its rate limiter, ranked by order, its metrics those of any
// controller's queue but for the depth by priority (queueMetrics), a job
// first added sized by work.
func newRankedQueue(name string, order *jobOrder, work func(types.NamespacedName) int64, logger logr.Logger, limiter workqueue.TypedRateLimiter[reconcile.Request]) rankedQueue {
	return rankedQueue{order: order, work: work, PriorityQueue: priorityqueue.New(name, func(o *priorityqueue.Opts[reconcile.Request]) {
		o.Log = logger
		o.RateLimiter = limiter
		o.MetricProvider = queueMetrics{}
	})}
}

// rankedQueue is the controller's priority queue with every add given the
// job's priority from the order, whoever adds it: the job and pod watches,
// a sync's requeue, a failed sync's retry. An add that would make the job's
// sync come before its pace allows (decided) waits until then.
//
// A job first added before any of its syncs decided is sized by work (the
// pods it asks for, read from the cache: podsAskedFor), once.
type rankedQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	order *jobOrder
	work  func(types.NamespacedName) int64
}

func (q rankedQueue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	for _, item := range items {
		q.order.arriving(item.NamespacedName, q.work)
		q.PriorityQueue.AddWithOpts(q.order.enqueue(item.NamespacedName, o), item)
	}
}

func (q rankedQueue) Add(item reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{}, item)
}

func (q rankedQueue) AddAfter(item reconcile.Request, after time.Duration) {
	q.AddWithOpts(priorityqueue.AddOpts{After: after}, item)
}

func (q rankedQueue) AddRateLimited(item reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, item)
}

func (q rankedQueue) GetWithPriority() (reconcile.Request, int, bool) {
	item, p, shutdown := q.PriorityQueue.GetWithPriority()
	if !shutdown {
		q.order.taken(item.NamespacedName)
	}
	return item, p, shutdown
}

func (q rankedQueue) Get() (reconcile.Request, bool) {
	item, shutdown := q.PriorityQueue.Get()
	if !shutdown {
		q.order.taken(item.NamespacedName)
	}
	return item, shutdown
}
