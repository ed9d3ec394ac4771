package controller

import (
	"math"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// jobOrder decides which waiting job a worker takes next: jobs are served
// in the order they came, each charged for the pods it has created beyond
// a free allowance, so that a fleet finishes in the order it came while a
// big job cannot hold back the jobs that come after it.
//
// A job's place is its virtual time: when it came, plus the time the
// client's QPS needs for the work it was charged, each pod created and
// each sync as one request. The job with the earliest virtual time goes
// first. A small job (work of at most freeWork requests) is never
// charged, so jobs of a fleet keep the order they came in; a big one, or
// one whose pods keep changing, is, and once its virtual time passes a
// later job's arrival, the later job goes first. A waiting job's virtual
// time does not move, so every job is served in the end (aging): a job
// waits at most for the jobs whose virtual time was earlier when it came,
// and each of those only until its work moves it past. This is start-time fair
// queueing with a job as the flow, as the built-in controller's first in,
// first out queue would be if a job's syncs took no longer than one turn.
//
// The queue holds each waiting job once, at the highest priority it was
// added with; jobOrder gives every add the job's current priority
// (rankedQueue).
type jobOrder struct {
	clock clock.PassiveClock
	// base is when the order was made: priorities are milliseconds of
	// virtual time before it.
	base time.Time
	// perRequest is the virtual time a charged request costs: one over the
	// client's QPS.
	perRequest time.Duration
	// freeWork is how many of its requests a job is not charged for: one
	// second of the client's QPS.
	freeWork int64

	mu   sync.Mutex
	jobs map[types.NamespacedName]*jobTurn
	// queued are the jobs waiting in the queue, with the priority they
	// were added with and when they are ready.
	queued map[types.NamespacedName]queuedJob
}

// jobTurn is one job's place in the order.
type jobTurn struct {
	uid types.UID
	// arrival is when the job came: when this process first heard of it,
	// or its creationTimestamp if that is more than arrivalSlack earlier
	// (a job created before the process started).
	arrival time.Time
	// work is how many pods the job has created (all of its generations'
	// pods, each retry too) and how many syncs it had.
	work int64
	// notBefore is the earliest its next sync may start (decided): a sync
	// queued before then waits until then.
	notBefore time.Time
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
// a moment. The precise time the event came orders the jobs of a fleet
// created within one second.
const arrivalSlack = 2 * time.Second

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
		base:       clk.Now(),
		perRequest: time.Duration(float64(time.Second) / float64(qps)),
		freeWork:   int64(math.Ceil(float64(qps) * writeQueueSeconds)),
		jobs:       map[types.NamespacedName]*jobTurn{},
		queued:     map[types.NamespacedName]queuedJob{},
	}
}

// turn returns the job's place, making it (arrival now) for a job first
// heard of. mu is held.
func (o *jobOrder) turn(key types.NamespacedName) *jobTurn {
	t := o.jobs[key]
	if t == nil {
		t = &jobTurn{arrival: o.clock.Now()}
		o.jobs[key] = t
	}
	return t
}

// priorityOf is the queue priority of the job's place: the earlier its
// virtual time, the higher. mu is held.
func (o *jobOrder) priorityOf(t *jobTurn) int {
	charged := max(t.work-o.freeWork, 0)
	virtual := t.arrival.Sub(o.base) + time.Duration(charged)*o.perRequest
	ms := -virtual.Milliseconds()
	return int(min(max(ms, math.MinInt32), math.MaxInt32))
}

// seen updates the job's place from the job read by a sync, and counts the
// sync: a job that was deleted and created again under its name starts
// afresh, and a job created more than arrivalSlack before this process
// heard of it keeps its creationTimestamp as its arrival.
func (o *jobOrder) seen(job *ibjv1.IndexedBatchJob) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.turn(types.NamespacedName{Namespace: job.Namespace, Name: job.Name})
	if t.uid != job.UID {
		if t.uid != "" {
			*t = jobTurn{arrival: o.clock.Now()}
		}
		t.uid = job.UID
	}
	if created := job.CreationTimestamp.Time; !created.IsZero() && created.Add(arrivalSlack).Before(t.arrival) {
		t.arrival = created
	}
	t.work++
}

// charge counts n pods the job created.
func (o *jobOrder) charge(key types.NamespacedName, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.turn(key).work += int64(n)
}

// decided records that a sync of the job spent cost deciding (reading and
// grouping its pods and syncJob), so that its next sync waits
// decisionShare times that.
func (o *jobOrder) decided(key types.NamespacedName, cost time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.turn(key).notBefore = o.clock.Now().Add(decisionShare * cost)
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

// taken records that a worker took the job from the queue.
func (o *jobOrder) taken(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.queued, key)
}

// len is how many jobs the order holds a place for, for trackedEntries.
func (o *jobOrder) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.jobs)
}

// rankedQueue is the controller's priority queue with every add given the
// job's priority from the order, whoever adds it: the job and pod watches,
// a sync's requeue, a failed sync's retry. An add that would make the job's
// sync come before its pace allows (decided) waits until then.
type rankedQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	order *jobOrder
}

func (q rankedQueue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	for _, item := range items {
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
