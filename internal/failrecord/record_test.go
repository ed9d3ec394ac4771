package failrecord

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)

func attempt(ix, n int32, node string, at time.Duration) Attempt {
	return Attempt{Index: ix, Attempt: n, Time: t0.Add(at), Node: node, Container: "main", ExitCode: 1, HasExit: true,
		Reason: "Error", Action: ActionCount}
}

// A shard's encoding reads back as the attempts it holds, every field, and
// the ConfigMap's text is one attempt a line.
func TestShardRoundTrips(t *testing.T) {
	r := New()
	want := []Attempt{
		attempt(0, 0, "node-a", 0),
		{Index: 0, Attempt: 1, Time: t0.Add(time.Minute), Node: "node-b", Reason: ReasonDisruption, Rule: "#1", Action: ActionIgnore},
		{Index: 3, Attempt: 0, Time: t0, Node: "", Reason: "DeadlineExceeded", Action: ActionCount},
		{Index: 511, Attempt: 7, Time: t0, Node: "node-c", Container: "init", ExitCode: 42, HasExit: true, Reason: "Error", Rule: "bad_input", Action: ActionFailIndex},
	}
	for _, a := range want {
		if !r.Add(a) {
			t.Fatalf("Add(%+v) = false for a new attempt", a)
		}
	}
	data := r.EncodeShard(0)
	if n := strings.Count(string(data), "\n"); n != len(want) {
		t.Errorf("encoding has %d lines, want %d:\n%s", n, len(want), data)
	}
	got, bad := DecodeShard(string(data))
	if bad != 0 {
		t.Errorf("DecodeShard found %d bad lines in its own encoding", bad)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded attempts (-want +got):\n%s", diff)
	}
}

// The same index and attempt is recorded once; an index keeps its last
// MaxAttemptsPerIndex attempts.
func TestAddKeepsEachAttemptOnceAndTheLastOfAnIndex(t *testing.T) {
	r := New()
	if !r.Add(attempt(5, 0, "a", 0)) || r.Add(attempt(5, 0, "b", time.Second)) {
		t.Fatal("a repeated (index, attempt) was recorded twice")
	}
	for n := int32(1); n < 20; n++ {
		r.Add(attempt(5, n, "a", time.Duration(n)*time.Second))
	}
	got := r.Attempts(5)
	if len(got) != MaxAttemptsPerIndex || got[0].Attempt != 20-MaxAttemptsPerIndex || got[len(got)-1].Attempt != 19 {
		t.Errorf("index 5 keeps attempts %d..%d (%d of them), want the last %d: %d..19",
			got[0].Attempt, got[len(got)-1].Attempt, len(got), MaxAttemptsPerIndex, 20-MaxAttemptsPerIndex)
	}
}

// A shard never encodes past MaxShardBytes, even with every field at its
// bound for every index; every index keeps its last attempt.
func TestShardStaysUnderItsBound(t *testing.T) {
	r := New()
	long := strings.Repeat("n", 400) // cut to maxNode
	for ix := range int32(IndexesPerShard) {
		for n := range int32(MaxAttemptsPerIndex) {
			a := Attempt{Index: ix, Attempt: n, Time: t0, Node: long + fmt.Sprint(ix), Container: strings.Repeat("c", 99),
				ExitCode: -2147483648, HasExit: true, Reason: strings.Repeat("r", 99), Rule: strings.Repeat("u", 200), Action: Action(strings.Repeat("a", 99))}
			r.Add(a)
		}
	}
	data := r.EncodeShard(0)
	if len(data) > MaxShardBytes {
		t.Fatalf("shard encodes to %d bytes, over MaxShardBytes %d", len(data), MaxShardBytes)
	}
	got, bad := DecodeShard(string(data))
	if bad != 0 {
		t.Fatalf("%d bad lines", bad)
	}
	last := map[int32]bool{}
	for _, a := range got {
		if a.Attempt == MaxAttemptsPerIndex-1 {
			last[a.Index] = true
		}
		if len(line(a)) > maxLineBytes {
			t.Fatalf("line of %d bytes, over maxLineBytes %d", len(line(a)), maxLineBytes)
		}
	}
	if len(last) != IndexesPerShard {
		t.Errorf("%d indexes kept their last attempt, want all %d", len(last), IndexesPerShard)
	}
}

// What a user may have written into the ConfigMap is skipped, line by
// line, and counted; the rest is read.
func TestDecodeSkipsWhatItCannotRead(t *testing.T) {
	good := line(attempt(1, 0, "a", 0))
	data := "garbage\n" + good + "-1\t0\t2026-12-07T08:00:00Z\ta\t-\t-\t-\t-\tCount\n" + "1\t1\tyesterday\ta\t-\t-\t-\t-\tCount\n\n" +
		"2\t0\t2026-12-07T08:00:00Z\ta\tmain\tx\tError\t-\tCount\n"
	got, bad := DecodeShard(data)
	if bad != 4 || len(got) != 1 || got[0].Index != 1 {
		t.Errorf("decoded %+v with %d bad lines, want index 1's attempt and 4 bad lines", got, bad)
	}
}

// Merge takes a shard read from the API server beside what is still to be
// written, and leaves the shard as dirty as it was.
func TestMergeKeepsWhatIsStillToBeWritten(t *testing.T) {
	r := New()
	r.Add(attempt(1, 2, "new", time.Minute))
	r.Merge(0, "42", []Attempt{attempt(1, 0, "old", 0), attempt(1, 1, "old", time.Second), attempt(600, 0, "other-shard", 0)})
	if got := len(r.Attempts(1)); got != 3 {
		t.Errorf("index 1 has %d attempts after the merge, want 3", got)
	}
	if r.Attempts(600) != nil {
		t.Error("Merge of shard 0 took an attempt of shard 1")
	}
	if diff := cmp.Diff([]int{0}, r.Dirty()); diff != "" {
		t.Errorf("dirty shards (-want +got):\n%s", diff)
	}
	if r.Version(0) != "42" {
		t.Errorf("version %q, want 42", r.Version(0))
	}
	r.Written(0, "43")
	if len(r.Dirty()) != 0 || r.Version(0) != "43" {
		t.Errorf("after Written: dirty %v, version %q", r.Dirty(), r.Version(0))
	}
}

// Nodes counts what blames each node; a node reaching the threshold of
// distinct indexes is avoided from the failure that reached it. Ignored
// failures, disruptions and pods without a node blame nothing.
func TestNodesAndAvoidance(t *testing.T) {
	r := New()
	r.Add(attempt(0, 0, "bad", 0))
	r.Add(attempt(0, 1, "bad", time.Second))
	r.Add(attempt(1, 0, "bad", 2*time.Second))
	r.Add(attempt(2, 0, "ok", 3*time.Second))
	r.Add(Attempt{Index: 3, Attempt: 0, Time: t0, Node: "drained", Reason: ReasonDisruption, Action: ActionCount})
	r.Add(Attempt{Index: 4, Attempt: 0, Time: t0, Node: "ignored", Reason: "Error", HasExit: true, Action: ActionIgnore})
	r.Add(Attempt{Index: 5, Attempt: 0, Time: t0, Reason: "DeadlineExceeded", Action: ActionCount})
	r.Add(attempt(2, 1, "bad", 4*time.Second))
	nodes := r.Nodes(2)
	want := []Node{
		{Name: "bad", Failures: 4, Indexes: []int32{0, 1, 2}, Last: attempt(2, 1, "bad", 4*time.Second), AvoidedSince: t0.Add(2 * time.Second)},
		{Name: "ok", Failures: 1, Indexes: []int32{2}, Last: attempt(2, 0, "ok", 3*time.Second)},
	}
	if diff := cmp.Diff(want, nodes); diff != "" {
		t.Errorf("Nodes(2) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"bad"}, r.Avoided(2)); diff != "" {
		t.Errorf("Avoided(2) (-want +got):\n%s", diff)
	}
	if got := r.Avoided(0); got != nil {
		t.Errorf("Avoided(0) = %v, want none without a threshold", got)
	}
	// Index 2's retry avoids its own nodes, the most recent first, then
	// the job's.
	if diff := cmp.Diff([]string{"bad", "ok", "elsewhere"}, r.AvoidFor(2, []string{"bad", "elsewhere"})); diff != "" {
		t.Errorf("AvoidFor(2) (-want +got):\n%s", diff)
	}
	if got := r.AvoidFor(4, nil); got != nil {
		t.Errorf("AvoidFor(4) = %v: an ignored failure avoids no node", got)
	}
}

// A pod avoids at most MaxAvoidedNodes nodes.
func TestAvoidForIsBounded(t *testing.T) {
	r := New()
	var jobWide []string
	for i := range 100 {
		jobWide = append(jobWide, fmt.Sprintf("n%d", i))
	}
	if got := len(r.AvoidFor(0, jobWide)); got != MaxAvoidedNodes {
		t.Errorf("AvoidFor gives %d nodes, want at most %d", got, MaxAvoidedNodes)
	}
}

// Fields are cut to their bounds and cleaned of the separators.
func TestFieldsAreBounded(t *testing.T) {
	r := New()
	r.Add(Attempt{Index: 0, Time: t0, Node: "a\tb", Reason: "x\ny" + strings.Repeat("é", 100), Action: ActionCount})
	a := r.Attempts(0)[0]
	if a.Node != "a b" || strings.ContainsAny(a.Reason, "\n\t") || len(a.Reason) > maxReason {
		t.Errorf("bounded attempt %+v", a)
	}
	if got, _ := DecodeShard(string(r.EncodeShard(0))); len(got) != 1 || got[0].Reason != a.Reason {
		t.Errorf("a cut reason does not round-trip: %+v", got)
	}
}

// largeRecord is a job of 100,000 indexes with every tenth failing
// attempts times on realistic nodes (node names of a cloud's length).
func largeRecord(attempts int32) *Record {
	r := New()
	for ix := int32(0); ix < 100_000; ix += 10 {
		for n := range attempts {
			r.Add(Attempt{Index: ix, Attempt: n, Time: t0.Add(time.Duration(ix) * time.Second),
				Node: fmt.Sprintf("gke-train-pool-gpu-a100-%08x-%04d", ix%977, ix%53), Container: "trainer",
				ExitCode: 1, HasExit: true, Reason: "Error", Rule: "retryable_exit", Action: ActionCount})
		}
	}
	return r
}

// At 100,000 indexes with 10 % of them failing three times
// (backoffLimitPerIndex 2), every shard stays far under what a ConfigMap
// may hold, and their number is ceil(100,000/IndexesPerShard).
func TestRecordOfALargeJobFitsItsObjects(t *testing.T) {
	r := largeRecord(3)
	shards := r.Dirty()
	if len(shards) != (100_000+IndexesPerShard-1)/IndexesPerShard {
		t.Errorf("%d shards, want %d", len(shards), (100_000+IndexesPerShard-1)/IndexesPerShard)
	}
	largest, total := 0, 0
	for _, s := range shards {
		n := len(r.EncodeShard(s))
		largest, total = max(largest, n), total+n
	}
	if largest > MaxShardBytes {
		t.Errorf("largest shard %d bytes, over %d", largest, MaxShardBytes)
	}
	t.Logf("%d shards, largest %d bytes, total %d bytes, %d attempts", len(shards), largest, total, r.Len())
}

// BenchmarkLargeRecord reports the record of TestRecordOfALargeJobFitsItsObjects:
// its shards, the largest's bytes, all of them, and the time to encode
// every shard (what a restarted operator writes at most, and what the
// plugin reads).
func BenchmarkLargeRecord(b *testing.B) {
	r := largeRecord(3)
	b.ResetTimer()
	var largest, total int
	for b.Loop() {
		largest, total = 0, 0
		for _, s := range r.Dirty() {
			n := len(r.EncodeShard(s))
			largest, total = max(largest, n), total+n
		}
	}
	b.ReportMetric(float64(len(r.Dirty())), "shards")
	b.ReportMetric(float64(largest), "largest-shard-bytes")
	b.ReportMetric(float64(total), "record-bytes")
}
