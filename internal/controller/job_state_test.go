package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// fillJobState gives the job with UID uid something in every part of its
// state.
func fillJobState(s *jobStates, uid types.UID, now time.Time) {
	s.expectCreate(uid, "a-0-0", now)
	s.removedFinalizers(uid, []*jobpod.Pod{{Meta: jobpod.Meta{UID: "pod"}}}, now)
	s.pacedEvents(uid, "a", &plan{}, 1, now)
	s.takeName(uid, 0, 0)
	job := harness.MakeIndexedBatchJob("a", "ns").UID(uid).Obj()
	s.observeGone(job, []*jobpod.Pod{makePod(job, 0).failedAt(now, 1).deletedAt(now).obj()})
	s.takeService(uid, "a", now)
	s.gangGiven(uid, gangOf(2), now)
}

// gangOf is a ready gang of minCount pods, as ensureGang remembers it.
func gangOf(minCount int32) podGroup {
	return podGroup{name: "a-1", field: "scheduling", gang: true, minCount: minCount}
}

// gangKnown reports whether s still knows the job's gang of minCount at now.
func gangKnown(s *jobStates, uid types.UID, minCount int32, now time.Time) bool {
	_, ok := s.gangCurrent(uid, minCount, now)
	return ok
}

// Every part of a job's state goes with the job: when it is found gone,
// and when another job takes its name.
func TestJobStateGoesWithTheJob(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	full := map[string]int{"job_states": 1, "job_uids": 1, "expected_creates": 1, "expected_finalizers": 1,
		"paced_events": 1, "taken_pod_names": 1, "gone_pods": 1, "taken_services": 1, "gangs": 1}
	empty := map[string]int{"job_states": 0, "job_uids": 0, "expected_creates": 0, "expected_finalizers": 0,
		"paced_events": 0, "taken_pod_names": 0, "gone_pods": 0, "taken_services": 0, "gangs": 0}

	s := newJobStates()
	s.seen(key, "old")
	fillJobState(s, "old", testNow)
	if diff := cmp.Diff(full, s.sizes()); diff != "" {
		t.Fatalf("a job with every part (-want +got):\n%s", diff)
	}
	if got, ok := s.keyOf("old"); !ok || got != key {
		t.Errorf("keyOf = %v, %v; want %v", got, ok, key)
	}

	// Deleted and created again under its name: the new job starts afresh.
	s.seen(key, "new")
	want := map[string]int{"job_states": 1, "job_uids": 1, "expected_creates": 0, "expected_finalizers": 0,
		"paced_events": 0, "taken_pod_names": 0, "gone_pods": 0, "taken_services": 0, "gangs": 0}
	if diff := cmp.Diff(want, s.sizes()); diff != "" {
		t.Errorf("after a job of the same name (-want +got):\n%s", diff)
	}
	if _, ok := s.keyOf("old"); ok {
		t.Errorf("the old job's name is still known by its UID")
	}
	if s.serviceTaken("new", testNow) || gangKnown(s, "new", 2, testNow) || !s.podsSeen("new", among(), testNow) {
		t.Errorf("the new job inherited the old one's Service, gang or expected creates")
	}

	fillJobState(s, "new", testNow)
	s.gone(key)
	if diff := cmp.Diff(empty, s.sizes()); diff != "" {
		t.Errorf("after the job is gone (-want +got):\n%s", diff)
	}
}

// A taken Service name and a gang's minCount are trusted for their recheck
// intervals only.
func TestJobStateRechecksServiceAndGang(t *testing.T) {
	s := newJobStates()
	s.takeService("job", "a", testNow)
	s.gangGiven("job", gangOf(3), testNow)
	if !s.serviceTaken("job", testNow.Add(serviceRecheckInterval-time.Second)) {
		t.Errorf("a Service name found taken is asked about again within its interval")
	}
	if s.serviceTaken("job", testNow.Add(serviceRecheckInterval)) {
		t.Errorf("a Service name found taken is not asked about again after its interval")
	}
	if !gangKnown(s, "job", 3, testNow.Add(gangRecheckInterval-time.Second)) {
		t.Errorf("the gang is written again within its interval")
	}
	if gangKnown(s, "job", 4, testNow) {
		t.Errorf("a gang of another size is taken as current")
	}
	if gangKnown(s, "job", 3, testNow.Add(gangRecheckInterval)) {
		t.Errorf("the gang is not written again after its interval")
	}
}

// splitByOwner keeps the job's own pods in their order, and as foreign only
// the others that still hold a finalizer of the operator.
func TestSplitByOwner(t *testing.T) {
	pod := func(name string, owner, label types.UID, tracked bool) *jobpod.Pod {
		return &jobpod.Pod{Meta: jobpod.Meta{Name: name}, OwnerUID: owner, UIDLabel: label, Tracked: tracked}
	}
	a, b := pod("a", "job", "job", true), pod("b", "job", "job", false)
	old := pod("old", "earlier", "earlier", true)
	edited := pod("edited", "job", "other", true)
	released := pod("released", "earlier", "earlier", false)
	names := func(pods []*jobpod.Pod) []string {
		out := []string{}
		for _, p := range pods {
			out = append(out, p.Name)
		}
		return out
	}
	for _, tc := range []struct {
		pods                 []*jobpod.Pod
		owner                types.UID
		wantOwn, wantForeign []string
	}{
		{[]*jobpod.Pod{a, b}, "job", []string{"a", "b"}, []string{}},
		{[]*jobpod.Pod{old, a, released, edited, b}, "job", []string{"a", "b"}, []string{"old", "edited"}},
		{[]*jobpod.Pod{a, old, b}, "", []string{}, []string{"a", "old"}},
		{nil, "job", []string{}, []string{}},
	} {
		own, foreign := splitByOwner(tc.pods, tc.owner)
		if diff := cmp.Diff(tc.wantOwn, names(own)); diff != "" {
			t.Errorf("own of %v (-want +got):\n%s", names(tc.pods), diff)
		}
		if diff := cmp.Diff(tc.wantForeign, names(foreign)); diff != "" {
			t.Errorf("foreign of %v (-want +got):\n%s", names(tc.pods), diff)
		}
	}
}
