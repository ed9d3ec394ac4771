package podcache

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// Settled pods leave ListUnsettled and stay in List and Get; a change
// brings one back, the same version again (a relist) does not; a job of
// another UID, or Unsettle, brings them all back; a deleted one goes.
func TestSettledPodsLeaveTheUnsettledList(t *testing.T) {
	s := &Source{}
	h := s.handler(func(reconcile.Request) {}, func(reconcile.Request) {})
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	pod := func(ix int32, rv string) *jobpod.Pod {
		n := strconv.Itoa(int(ix))
		return &jobpod.Pod{Meta: jobpod.Meta{Namespace: "ns", Name: "a-" + n, UID: types.UID("u" + n), ResourceVersion: rv},
			JobName: "a", Index: ix, IndexOK: true, FinishedAt: t0.Add(time.Duration(ix) * time.Second)}
	}
	names := func(pods []*jobpod.Pod) []string {
		out := []string{}
		for _, p := range pods {
			out = append(out, p.Name)
		}
		slices.Sort(out)
		return out
	}
	unsettled := func(owner types.UID) ([]string, indexset.Set, time.Time) {
		pods, ixs, last := s.ListUnsettled("ns", "a", owner)
		return names(pods), ixs, last
	}
	var pods []*jobpod.Pod
	for ix := range int32(4) {
		pods = append(pods, pod(ix, "1"))
		h.OnAdd(pods[ix], false)
	}

	s.Settle("ns", "a", "job", []*jobpod.Pod{pods[0], pods[2]})
	got, ixs, last := unsettled("job")
	if !slices.Equal(got, []string{"a-1", "a-3"}) || ixs.String() != "0,2" || !last.Equal(pods[2].FinishedAt) {
		t.Errorf("after settling a-0 and a-2: listed %v, settled indexes %q, latest end %v; want a-1 a-3, 0,2, %v", got, ixs, last, pods[2].FinishedAt)
	}
	if all, _ := s.List("ns", "a"); len(all) != 4 || s.Get("ns", "a", "a-2") != pods[2] {
		t.Errorf("List has %d pods, Get(a-2) = %v; want all 4 and the settled pod", len(all), s.Get("ns", "a", "a-2"))
	}
	// A pod the cache no longer holds as listed is not settled.
	s.Settle("ns", "a", "job", []*jobpod.Pod{pod(1, "1")})
	if got, _, _ := unsettled("job"); !slices.Equal(got, []string{"a-1", "a-3"}) {
		t.Errorf("a stale copy of a-1 settled it: listed %v", got)
	}

	// A relist brings the same version: it stays settled.
	same := pod(0, "1")
	h.OnUpdate(pods[0], same)
	// A change brings a pod back.
	changed := pod(2, "2")
	h.OnUpdate(pods[2], changed)
	if got, _, _ := unsettled("job"); !slices.Equal(got, []string{"a-1", "a-2", "a-3"}) || s.Get("ns", "a", "a-0") != same {
		t.Errorf("after a relist of a-0 and a change of a-2: listed %v, Get(a-0) = %v; want a-1 a-2 a-3 and the relisted a-0", got, s.Get("ns", "a", "a-0"))
	}

	// A job of another UID (the job deleted and made again) lists them all.
	if got, ixs, _ := unsettled("new-job"); len(got) != 4 || ixs.Len() != 0 {
		t.Errorf("another UID lists %v with settled indexes %q, want all 4 and none", got, ixs)
	}
	if got, _, _ := unsettled("job"); len(got) != 4 {
		t.Errorf("after another UID listed them, listed %v, want all 4", got)
	}

	// Unsettle brings them back; a deleted settled pod goes, its index
	// stays among the settled ones until then.
	s.Settle("ns", "a", "job", []*jobpod.Pod{same, pods[3]})
	h.OnDelete(same)
	if got, ixs, _ := unsettled("job"); !slices.Equal(got, []string{"a-1", "a-2"}) || ixs.String() != "0,3" {
		t.Errorf("after a-0 settled and deleted: listed %v, settled indexes %q; want a-1 a-2, 0,3", got, ixs)
	}
	if all, _ := s.List("ns", "a"); len(all) != 3 {
		t.Errorf("List has %d pods after a deletion, want 3", len(all))
	}
	s.Unsettle("ns", "a")
	if got, ixs, last := unsettled("job"); len(got) != 3 || ixs.Len() != 0 || !last.IsZero() {
		t.Errorf("after Unsettle: listed %v, settled indexes %q, latest end %v; want all 3, none, zero", got, ixs, last)
	}
	for _, p := range []*jobpod.Pod{pods[1], changed, pods[3]} {
		h.OnDelete(p)
	}
	if len(s.jobs.byJob) != 0 {
		t.Errorf("%d jobs still listed, want none", len(s.jobs.byJob))
	}
}
