package controller

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// A job's repeated events are paced: a job of thousands of pods would
// otherwise write an event in nearly every sync, until client-go's spam
// filter cut it off after 25 of each type and dropped the rest unseen. So
// SuccessfulCreate and SuccessfulDelete go at most once every
// countEventInterval, each counting the pods since the last; a job's first
// namedIndexFailures indexes failed for good get an IndexFailed event each,
// and the later ones are counted in one IndexFailed event at most every
// moreFailuresInterval, and so are its pods created with memory raised
// after OOM kills (MemoryRaised) and those whose raise Kueue's quota held
// back (MemoryRaiseHeldBack). What is held back goes in the first sync
// after its interval (the sync is requeued for it), or at once when the
// job finishes.
const (
	countEventInterval   = 10 * time.Second
	namedIndexFailures   = 5
	moreFailuresInterval = time.Minute
)

// eventPace is the part of a job's state (job_state.go) that its paced
// events keep: what they hold back, and how many were named.
type eventPace struct {
	created, deleted heldCount
	// failures, raised and heldBack are the IndexFailed, MemoryRaised and
	// MemoryRaiseHeldBack events.
	failures, raised, heldBack namedThenCounted
}

// holds: the job's events were paced (something held back, or named).
func (p *eventPace) holds() bool { return *p != eventPace{} }

// namedThenCounted is a kind of event whose first namedIndexFailures
// events are reported one by one and the later ones counted.
type namedThenCounted struct {
	named int
	more  heldCount
}

// report turns msgs into events: one each while fewer than
// namedIndexFailures were named, then the rest counted in one event (more)
// per moreFailuresInterval. wait is how long a held count waits.
func (c *namedThenCounted) report(msgs []string, now time.Time, flush bool, one func(msg string) event, more func(n int) event) (out []event, wait time.Duration) {
	extra := 0
	for _, msg := range msgs {
		if c.named < namedIndexFailures {
			c.named++
			out = append(out, one(msg))
		} else {
			extra++
		}
	}
	n, wait := c.more.add(extra, now, moreFailuresInterval, flush)
	if n > 0 {
		out = append(out, more(n))
	}
	return out, wait
}

// heldCount is a count reported by at most one event per interval.
type heldCount struct {
	held int
	next time.Time
}

// add adds n to the count and returns what to report now: all of it once
// the interval since the last report has passed, or if flush; otherwise
// nothing, and how long until it may go.
func (c *heldCount) add(n int, now time.Time, interval time.Duration, flush bool) (report int, wait time.Duration) {
	c.held += n
	if c.held == 0 {
		return 0, 0
	}
	if !flush && now.Before(c.next) {
		return 0, c.next.Sub(now)
	}
	report, c.held, c.next = c.held, 0, now.Add(interval)
	return report, 0
}

// pacedEvents are the events a sync reports: its pods created and deleted
// and its indexes failed for good, paced by the job's eventPace, then the
// plan's other events. wait is when the sync should come back to report
// what was held (zero: nothing held).
func (e *jobStates) pacedEvents(job types.UID, jobName string, p *plan, created int, now time.Time) (out []event, wait time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	pace := &e.state(job).events
	flush := p.newlyFinished != nil
	held := func(w time.Duration) {
		if w > 0 && (wait == 0 || w < wait) {
			wait = w
		}
	}
	n, w := pace.created.add(created, now, countEventInterval, flush)
	if n > 0 {
		out = append(out, normalEvent("SuccessfulCreate", "Created %d pod(s)", n))
	}
	held(w)
	if n, w = pace.deleted.add(len(p.delete), now, countEventInterval, flush); n > 0 {
		out = append(out, normalEvent("SuccessfulDelete", "Deleted %d pod(s)", n))
	}
	held(w)
	for _, kind := range []struct {
		pace *namedThenCounted
		msgs []string
		one  func(string) event
		more func(int) event
	}{
		{&pace.failures, p.indexFailures, func(msg string) event { return warningEvent("IndexFailed", "%s", msg) }, func(n int) event {
			return warningEvent("IndexFailed", "%d more %s failed for good; `kubectl ibj indexes %s --failed` lists them with the reasons",
				n, plural(n, "index", "indexes"), jobName)
		}},
		{&pace.raised, raisedMessages(p.memoryRaised), func(msg string) event { return normalEvent("MemoryRaised", "%s", msg) }, func(n int) event {
			return normalEvent("MemoryRaised", "%d more %s memory raised after OOM kills; `kubectl ibj indexes %s -o wide` shows each index's memory",
				n, plural(n, "pod got its", "pods got their"), jobName)
		}},
		{&pace.heldBack, p.memoryHeldBack, func(msg string) event { return warningEvent("MemoryRaiseHeldBack", "%s", msg) }, func(n int) event {
			return warningEvent("MemoryRaiseHeldBack", "%d more %s memory requests kept at what Kueue admitted; only their limits were raised",
				n, plural(n, "pod got its", "pods got their"))
		}},
	} {
		evs, w := kind.pace.report(kind.msgs, now, flush, kind.one, kind.more)
		out = append(out, evs...)
		held(w)
	}
	return append(out, p.events...), wait
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// raisedMessages are the MemoryRaised events' messages.
func raisedMessages(raised []raisedPod) []string {
	out := make([]string, len(raised))
	for i, r := range raised {
		out[i] = r.message
	}
	return out
}
