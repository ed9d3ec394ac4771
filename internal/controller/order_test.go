package controller

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func request(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}
}

// priority is the job's current priority (what enqueue gives its adds).
func (o *jobOrder) priority(key types.NamespacedName) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.priorityOf(o.turn(key))
}

// rankedQueueOf is a controller queue ranked by a fresh order at the given
// QPS.
func rankedQueueOf(t *testing.T, clk *clocktesting.FakeClock, qps float32) rankedQueue {
	t.Helper()
	q := rankedQueue{order: newJobOrder(clk, qps), PriorityQueue: priorityqueue.New[reconcile.Request]("test")}
	t.Cleanup(q.ShutDown)
	return q
}

// drain takes every job from the queue, in the order a worker gets them.
func drain(t *testing.T, q rankedQueue, n int) []string {
	t.Helper()
	var got []string
	for range n {
		done := make(chan reconcile.Request, 1)
		go func() {
			item, _, _ := q.GetWithPriority()
			done <- item
		}()
		select {
		case item := <-done:
			got = append(got, item.Name)
			q.Done(item)
		case <-time.After(5 * time.Second):
			t.Fatalf("the queue gave %v, then nothing", got)
		}
	}
	return got
}

// Jobs that came one after the other are served in the order they came,
// whatever order their events are added in and whoever adds them: a pod
// event of the first job, added last, still goes first.
func TestQueueServesJobsInTheOrderTheyCame(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	q := rankedQueueOf(t, clk, 100)
	for _, name := range []string{"a", "b", "c"} {
		q.Add(request(name)) // its creation
		clk.Step(10 * time.Millisecond)
	}
	got := drain(t, q, 3)
	if want := []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
	// Their pod events, added in reverse after a batch period, keep the
	// order.
	for _, name := range []string{"c", "b", "a"} {
		q.AddAfter(request(name), 10*time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if got, want := drain(t, q, 3), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
}

// A job charged for creates beyond its free allowance goes behind a job
// that came after it: the big job that came first cannot hold back the
// small job that came later, nor one that comes while it waits, whatever
// the wall clock says.
func TestQueueLetsALaterJobPassABigOne(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	q := rankedQueueOf(t, clk, 10) // 10 free requests, 100 ms each after
	big := request("big").NamespacedName
	q.order.priority(big)
	clk.Step(time.Second)
	q.order.priority(request("small").NamespacedName)
	q.order.charge(big, 10)
	if p, s := q.order.priority(big), q.order.priority(request("small").NamespacedName); p <= s {
		t.Fatalf("big job, charged nothing yet, has priority %d, the later small job %d; want big first", p, s)
	}
	q.order.charge(big, 11) // 1.1 s of its requests' time past its arrival
	q.Add(request("big"))
	q.Add(request("small"))
	clk.Step(time.Second)
	q.Add(request("later")) // two seconds after big on the wall clock
	if got, want := drain(t, q, 3), []string{"small", "later", "big"}; !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
}

// A job waiting at a virtual time is served before the jobs that come once
// the order's virtual time has passed it: newcomers arrive at the virtual
// time of the latest job a worker took, each after the one before, so a big
// job waits at most for the newcomers of the time it is ahead, one per
// maxArrivalGap when they come slower than that.
func TestQueueServesAWaitingJobInTheEnd(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	q := rankedQueueOf(t, clk, 10) // 10 free requests, 100 ms each after
	big := request("big")
	q.order.priority(big.NamespacedName)
	q.order.charge(big.NamespacedName, 10+2) // 200 ms past its arrival
	q.Add(big)
	served := newcomersBefore(t, q, clk, "big")
	if want := int(200 * time.Millisecond / maxArrivalGap); served == 0 || served > want {
		t.Fatalf("big job, 200 ms ahead, served after %d newcomers; want after at most %d", served, want)
	}
}

// newcomersBefore adds a job a second, each taken by a worker, until the
// worker takes the waiting job name instead, and returns how many came
// before it (0 when it never was, after 1,000).
func newcomersBefore(t *testing.T, q rankedQueue, clk *clocktesting.FakeClock, name string) int {
	t.Helper()
	for i := range 1000 {
		clk.Step(time.Second)
		q.Add(request(fmt.Sprintf("newcomer-%d", i)))
		if got := drain(t, q, 1); got[0] == name {
			return i
		}
	}
	return 0
}

// A job that comes while ten jobs share the client goes before them once
// they are past their free allowances, however long after them it came on
// the wall clock: they were served a tenth of the client's QPS each, and
// their virtual times, not the wall clock, say where the newcomer stands.
func TestQueueLetsANewcomerPassJobsThatShareTheClient(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	q := rankedQueueOf(t, clk, 10) // 10 free requests, 100 ms each after
	var load []reconcile.Request
	for i := range 10 {
		load = append(load, request(fmt.Sprintf("load-%d", i)))
		q.order.priority(load[i].NamespacedName)
		clk.Step(100 * time.Millisecond)
	}
	// A worker takes each; its sync creates pods for twenty seconds of
	// the client's QPS, a tenth each: each job is charged for a second past
	// its free allowance.
	for _, r := range load {
		q.Add(r)
	}
	drain(t, q, len(load))
	for _, r := range load {
		q.order.charge(r.NamespacedName, 20)
		q.Add(r)
	}
	clk.Step(20 * time.Second)
	q.Add(request("newcomer"))
	if got := drain(t, q, 1); got[0] != "newcomer" {
		t.Fatalf("served %v first, want the newcomer", got)
	}
}

// ahead sees only jobs that wait, are ready and come first: not the job
// itself, not one whose batch period has not passed, not a failed sync's
// retry, and not once a worker took it.
func TestAheadSeesOnlyReadyJobsThatComeFirst(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	o := newJobOrder(clk, 10)
	early, late := request("early").NamespacedName, request("late").NamespacedName
	o.priority(early)
	clk.Step(time.Second)
	if o.ahead(late) {
		t.Fatal("ahead with nobody waiting")
	}
	o.enqueue(late, priorityqueue.AddOpts{})
	o.enqueue(early, priorityqueue.AddOpts{After: time.Second})
	if o.ahead(early) {
		t.Fatal("a later job is ahead of an earlier one")
	}
	if o.ahead(late) {
		t.Fatal("a job whose batch period has not passed is ahead")
	}
	clk.Step(time.Second)
	if !o.ahead(late) {
		t.Fatal("the earlier job, ready, is not ahead")
	}
	o.taken(early)
	if o.ahead(late) {
		t.Fatal("a job a worker took is still ahead")
	}
	o.enqueue(early, priorityqueue.AddOpts{RateLimited: true})
	if o.ahead(late) {
		t.Fatal("a failed sync's retry, whose delay only the rate limiter knows, is ahead")
	}
}

// A job created more than arrivalSlack before the process heard of it (it was
// there when the operator started) arrives a millisecond earlier for each
// second it is older, at most lateSpan: jobs there at the start keep their
// creation order, and one an hour old does not hold back the jobs after it
// for an hour of its work. A job deleted and created again under its name
// starts afresh; a job found gone is forgotten.
func TestOrderArrivalFollowsTheJob(t *testing.T) {
	start := time.Now()
	clk := clocktesting.NewFakeClock(start)
	o := newJobOrder(clk, 10)
	clk.Step(time.Minute)
	job := func(name string, age time.Duration) *ibjv1.IndexedBatchJob {
		j := harness.MakeIndexedBatchJob(name, "ns").UID(types.UID(name + "-1")).Obj()
		j.CreationTimestamp = metav1.NewTime(clk.Now().Add(-age).Truncate(time.Second))
		return j
	}
	old, older, fresh := job("old", 10*time.Second), job("older", time.Hour), job("fresh", 0)
	for _, j := range []*ibjv1.IndexedBatchJob{fresh, old, older} {
		o.seen(j)
	}
	// Heard of together, a minute after the order was made: at
	// maxArrivalGap of its virtual time.
	for _, c := range []struct {
		name string
		want time.Duration
	}{
		{"fresh", maxArrivalGap},
		{"old", maxArrivalGap - 10*time.Millisecond},
		{"older", maxArrivalGap - lateSpan},
	} {
		if p := o.priority(request(c.name).NamespacedName); p != -int(c.want.Milliseconds()) {
			t.Errorf("job %s has priority %d, want %d", c.name, p, -c.want.Milliseconds())
		}
	}
	o.charge(request("old").NamespacedName, 1000)
	clk.Step(time.Minute)
	again := old.DeepCopy()
	again.UID, again.CreationTimestamp = "old-2", metav1.NewTime(clk.Now())
	o.seen(again)
	if p, want := o.priority(request("old").NamespacedName), -int((2 * maxArrivalGap).Milliseconds()); p != want {
		t.Errorf("job created again under its name has priority %d, want %d (a fresh arrival, nothing charged)", p, want)
	}
	o.forget(request("old").NamespacedName)
	if o.len() != 2 {
		t.Errorf("order holds %d jobs after one was forgotten, want 2", o.len())
	}
}

// A job whose pods keep changing is charged for its syncs too: however
// early it came, a job that came later goes first once the busy job's
// syncs passed its free allowance.
func TestQueueChargesABusyJobForItsSyncs(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	o := newJobOrder(clk, 10) // 10 free requests, 100 ms each after
	busy := harness.MakeIndexedBatchJob("busy", "ns").UID("busy-1").Obj()
	o.seen(busy)
	clk.Step(time.Second)
	later := request("later").NamespacedName
	o.priority(later)
	for range 9 {
		o.seen(busy)
	}
	if b, l := o.priority(request("busy").NamespacedName), o.priority(later); b <= l {
		t.Fatalf("after 10 syncs the busy job has priority %d, the later job %d; want the busy job first while its syncs are free", b, l)
	}
	o.seen(busy)
	if b, l := o.priority(request("busy").NamespacedName), o.priority(later); b >= l {
		t.Fatalf("after 11 syncs the busy job has priority %d, the later job %d; want the later job first", b, l)
	}
}

// A job's next sync waits decisionShare times its last decision took,
// whoever queues it; a failed sync's retry keeps the rate limiter's delay.
func TestQueuePacesAJobByItsDecisions(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	q := rankedQueueOf(t, clk, 100)
	big := request("big")
	q.order.decided(big.NamespacedName, 10*time.Millisecond, 0)
	if got := q.order.enqueue(big.NamespacedName, priorityqueue.AddOpts{}).After; got != decisionShare*10*time.Millisecond {
		t.Fatalf("an add waits %v after a decision of 10ms, want %v", got, decisionShare*10*time.Millisecond)
	}
	if got := q.order.enqueue(big.NamespacedName, priorityqueue.AddOpts{RateLimited: true}).After; got != 0 {
		t.Fatalf("a failed sync's retry waits %v for the pace, want the rate limiter's delay alone", got)
	}
	q.order.taken(big.NamespacedName)
	start := time.Now()
	q.Add(big)
	if got := drain(t, q, 1); !slices.Equal(got, []string{"big"}) {
		t.Fatalf("served %v", got)
	}
	if took := time.Since(start); took < decisionShare*10*time.Millisecond {
		t.Fatalf("the sync came after %v, before its pace allowed (%v)", took, decisionShare*10*time.Millisecond)
	}
	clk.Step(time.Second)
	if got := q.order.enqueue(big.NamespacedName, priorityqueue.AddOpts{}).After; got != 0 {
		t.Fatalf("an add waits %v once the pace has passed, want none", got)
	}
}

// sizedQueueOf is rankedQueueOf whose jobs ask for the given pods when
// first added (podsAskedFor), counting each time it is asked.
func sizedQueueOf(t *testing.T, clk *clocktesting.FakeClock, qps float32, sizes map[string]int64, asked map[string]int) rankedQueue {
	t.Helper()
	q := rankedQueueOf(t, clk, qps)
	q.work = func(key types.NamespacedName) int64 {
		asked[key.Name]++
		return sizes[key.Name]
	}
	return q
}

// Of the jobs that came together, the one with the fewest pods to create
// goes first, as their first adds say (the queue asks each job once), and
// jobs of one size keep the order they came in.
func TestQueueServesTheJobWithFewerPodsToCreateFirst(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	asked := map[string]int{}
	q := sizedQueueOf(t, clk, 200, map[string]int64{"big": 200, "mid": 50, "small": 5, "a": 10, "b": 10, "c": 10}, asked)
	for _, name := range []string{"big", "mid", "small"} {
		q.Add(request(name))
		clk.Step(2 * time.Millisecond)
	}
	if got, want := drain(t, q, 3), []string{"small", "mid", "big"}; !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
	clk.Step(time.Second)
	for _, name := range []string{"a", "b", "c"} {
		q.Add(request(name))
		clk.Step(time.Millisecond)
	}
	q.Add(request("a")) // its pod's event: the job is sized already
	if got, want := drain(t, q, 3), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("jobs of one size served %v, want %v", got, want)
	}
	for name, n := range asked {
		if n != 1 {
			t.Errorf("the queue asked for job %s's pods %d times, want once", name, n)
		}
	}
}

// A job's pods to create follow its decisions, not its first add: the
// latest decision's creates, less the pods created since. A job with its
// pods created ranks at its virtual time.
func TestOrderFollowsTheDecidedCreates(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	o := newJobOrder(clk, 10) // 100 ms a request, 10 free
	job := request("job").NamespacedName
	o.arriving(job, func(types.NamespacedName) int64 { return 3 })
	at := o.priority(job)
	o.decided(job, 0, 5)
	if p, want := o.priority(job), at-200; p != want {
		t.Fatalf("priority %d after a decision to create 5 pods, want %d (the 3 the job asked for, replaced)", p, want)
	}
	o.charge(job, 5)
	if p, want := o.priority(job), at+300; p != want {
		t.Fatalf("priority %d once its 5 pods are created, want %d (at its virtual time)", p, want)
	}
	o.arriving(job, func(types.NamespacedName) int64 { t.Fatal("a decided job was asked for its pods again"); return 0 })
	o.decided(job, 0, 1000)
	if p, want := o.priority(job), at+300-1000; p != want {
		t.Fatalf("priority %d with 1,000 pods to create, want %d (its free allowance's time, at most)", p, want)
	}
}

// A job with many pods to create waits behind the smaller jobs that come
// after it for at most a free allowance's time of their arrivals, one per
// maxArrivalGap when they come slower than that: the order still serves it
// in the end.
func TestQueueServesAJobWithManyPodsToCreateInTheEnd(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	q := sizedQueueOf(t, clk, 10, map[string]int64{"big": 100_000}, map[string]int{}) // a free allowance: 1 s
	q.Add(request("big"))
	served := newcomersBefore(t, q, clk, "big")
	if want := int(time.Second / maxArrivalGap); served == 0 || served > want {
		t.Fatalf("big job served after %d newcomers; want after at least one and at most %d", served, want)
	}
}

// podsAskedFor: a job's parallelism, at most its indexes (those
// spec.indexes lists) not yet succeeded, less its active pods; none while
// suspended or once finished.
func TestPodsAskedFor(t *testing.T) {
	for _, c := range []struct {
		name                                   string
		completions, parallelism, succ, active int32
		indexes                                string
		suspend, finished                      bool
		want                                   int64
	}{
		{name: "new", completions: 10, parallelism: 3, want: 3},
		{name: "wide", completions: 10, parallelism: 100, want: 10},
		{name: "nearly done", completions: 10, parallelism: 3, succ: 9, want: 1},
		{name: "running", completions: 10, parallelism: 3, active: 2, want: 1},
		{name: "more active than wanted", completions: 10, parallelism: 3, succ: 9, active: 3, want: 0},
		{name: "a subset of its indexes", completions: 100, parallelism: 100, indexes: "0-4,90", want: 6},
		{name: "a subset, partly done", completions: 100, parallelism: 100, indexes: "0-4,90", succ: 2, active: 1, want: 3},
		{name: "unreadable indexes: none, as the sync starts none", completions: 10, parallelism: 100, indexes: "x", want: 0},
		{name: "suspended", completions: 10, parallelism: 3, suspend: true, want: 0},
		{name: "finished", completions: 10, parallelism: 3, finished: true, want: 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			job := harness.MakeIndexedBatchJob("j", "ns").Completions(c.completions).Parallelism(c.parallelism).Obj()
			job.Spec.Suspend = &c.suspend
			if c.indexes != "" {
				job.Spec.Indexes = &c.indexes
			}
			job.Status.Succeeded, job.Status.Active = c.succ, c.active
			if c.finished {
				job.Status.Conditions = []metav1.Condition{{Type: ibjv1.ConditionComplete, Status: metav1.ConditionTrue}}
			}
			if got := podsAskedFor(job); got != c.want {
				t.Fatalf("podsAskedFor = %d, want %d", got, c.want)
			}
		})
	}
}
