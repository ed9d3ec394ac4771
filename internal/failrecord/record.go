// Package failrecord is the failure record of a job: each failed attempt
// of each index (its node, container, exit code or reason, the rule that
// matched, the time), kept by the operator in ConfigMaps the job owns, so
// that why an index failed outlives its pods, and which nodes the job's
// pods avoid (spec.nodeAvoidance) outlives the operator's restarts. The
// controller writes it; `kubectl ibj` reads it. The package holds the
// record, its encoding and its bounds; it makes no API call.
//
// The bounds, so that no object grows past what the API server takes and
// the operator's memory stays in proportion to the job:
//   - an index keeps its last MaxAttemptsPerIndex failed attempts;
//   - a shard holds IndexesPerShard consecutive indexes, and its encoding
//     is at most MaxShardBytes (the oldest attempts of the indexes with the
//     most go first; every index keeps its last one, which fits: each field
//     is cut to its bound, so a line is at most maxLineBytes);
//   - a job of c completions has at most ceil(c/IndexesPerShard) shards.
package failrecord

import (
	"cmp"
	"slices"
	"time"
	"unique"
)

const (
	// MaxAttemptsPerIndex is how many failed attempts of one index the
	// record keeps: the last ones.
	MaxAttemptsPerIndex = 8
	// IndexesPerShard is how many consecutive indexes one ConfigMap holds.
	IndexesPerShard = 512
	// MaxShardBytes bounds one shard's encoding, well under the 1 MiB a
	// ConfigMap's data may hold.
	MaxShardBytes = 512 << 10
	// MaxAvoidedNodes is how many nodes one pod avoids at most: its
	// index's most recent ones first, then the job's by when they became
	// avoided. It bounds what each pod's affinity carries.
	MaxAvoidedNodes = 32
)

// Action is what a failure policy rule made of a failure, as the record
// states it: the rule's action, or Count when no rule matched.
type Action string

// The actions a record line names.
const (
	ActionCount      Action = "Count"
	ActionIgnore     Action = "Ignore"
	ActionFailIndex  Action = "FailIndex"
	ActionFailJob    Action = "FailJob"
	ActionRestartJob Action = "RestartJob"
)

// ReasonDisruption is the Reason of an attempt whose pod had the
// DisruptionTarget condition: the cluster ended it (an eviction, a
// preemption, a node drained or lost). It says nothing of the node's
// health, so it counts against no node.
const ReasonDisruption = "DisruptionTarget"

// Attempt is one failed attempt of an index.
type Attempt struct {
	Index   int32
	Attempt int32
	Time    time.Time
	// Node is the node the pod ran on, "" when it never had one.
	Node string
	// Container and ExitCode name the first container that exited
	// non-zero (HasExit false when none did: an eviction, a deadline).
	Container string
	ExitCode  int32
	HasExit   bool
	// Reason is the container's termination reason (Error, OOMKilled),
	// else the pod's (Evicted, DeadlineExceeded), else ReasonDisruption.
	Reason string
	// Rule is the matched podFailurePolicy rule's name, or its position
	// as "#i" when it has none; "" when no rule matched.
	Rule   string
	Action Action
}

// Blames says whether the attempt counts against its node: a failure the
// job counted (no Ignore rule matched), on a node, not a disruption.
func (a Attempt) Blames() bool {
	return a.Node != "" && a.Action != ActionIgnore && a.Reason != ReasonDisruption
}

// Record is a job's failure record in memory. It is not safe for
// concurrent use; the controller holds one per job under the job's lock.
type Record struct {
	byIndex map[int32][]Attempt
	// dirty are the shards changed since they were last written.
	dirty map[int]bool
	// tally is, by node, the distinct indexes whose failures blame it
	// and when each first did: what Avoided reads without a pass over
	// every attempt. It counts every attempt ever added, so a node once
	// avoided stays so, even after its attempts were trimmed.
	tally map[string]*nodeTally
	// versions are the resourceVersions of the shards as last read or
	// written: a write of a shard read before is an update at that
	// version, one never read a create.
	versions map[int]string
}

// New returns an empty record.
func New() *Record {
	return &Record{byIndex: map[int32][]Attempt{}, dirty: map[int]bool{}, versions: map[int]string{}, tally: map[string]*nodeTally{}}
}

// ShardOf is the shard that holds index ix.
func ShardOf(ix int32) int { return int(ix) / IndexesPerShard }

// Add records a failed attempt; it reports false when the record had it
// already (the same index and attempt). Its fields are cut to their bounds.
func (r *Record) Add(a Attempt) bool {
	a = bounded(a)
	list := r.byIndex[a.Index]
	i, found := slices.BinarySearchFunc(list, a.Attempt, func(x Attempt, n int32) int { return cmp.Compare(x.Attempt, n) })
	if found {
		return false
	}
	list = slices.Insert(list, i, a)
	if len(list) > MaxAttemptsPerIndex {
		list = slices.Delete(list, 0, len(list)-MaxAttemptsPerIndex)
	}
	r.byIndex[a.Index] = list
	r.dirty[ShardOf(a.Index)] = true
	if a.Blames() {
		r.count(a)
	}
	return true
}

// Merge takes the attempts of a shard read from the API server, with the
// shard's resourceVersion, beside what the record holds already (attempts
// recorded before the shard was read are kept: they are still to be
// written).
func (r *Record) Merge(shard int, version string, attempts []Attempt) {
	r.versions[shard] = version
	for _, a := range attempts {
		if ShardOf(a.Index) != shard {
			continue
		}
		dirty := r.dirty[shard]
		r.Add(a)
		r.dirty[shard] = dirty
	}
}

// Attempts returns the recorded attempts of index ix, oldest first.
func (r *Record) Attempts(ix int32) []Attempt { return r.byIndex[ix] }

// Indexes returns the indexes that have recorded failures, ascending.
func (r *Record) Indexes() []int32 {
	out := make([]int32, 0, len(r.byIndex))
	for ix := range r.byIndex {
		out = append(out, ix)
	}
	slices.Sort(out)
	return out
}

// Len is the number of attempts the record holds.
func (r *Record) Len() int {
	n := 0
	for _, l := range r.byIndex {
		n += len(l)
	}
	return n
}

// Dirty returns the shards changed since they were last written,
// ascending.
func (r *Record) Dirty() []int {
	out := make([]int, 0, len(r.dirty))
	for s, d := range r.dirty {
		if d {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// Written marks shard as written at version.
func (r *Record) Written(shard int, version string) {
	delete(r.dirty, shard)
	r.versions[shard] = version
}

// Version is the resourceVersion shard was last read or written at, ""
// when it never was.
func (r *Record) Version(shard int) string { return r.versions[shard] }

// shardAttempts returns the attempts of one shard, by index then attempt.
func (r *Record) shardAttempts(shard int) []Attempt {
	var out []Attempt
	first := int32(shard * IndexesPerShard)
	for ix := first; ix < first+IndexesPerShard; ix++ {
		out = append(out, r.byIndex[ix]...)
	}
	return out
}

// Field bounds: a node name is a DNS subdomain, a container name a DNS
// label; reasons and rule names longer than these are cut.
const (
	maxNode      = 253
	maxContainer = 63
	maxReason    = 64
	maxRule      = 128
)

func bounded(a Attempt) Attempt {
	a.Node = intern(clean(a.Node, maxNode))
	a.Container = intern(clean(a.Container, maxContainer))
	a.Reason = intern(clean(a.Reason, maxReason))
	a.Rule = intern(clean(a.Rule, maxRule))
	a.Action = Action(intern(clean(string(a.Action), maxReason)))
	a.Time = a.Time.UTC().Truncate(time.Second)
	return a
}

// intern shares one copy of the strings many attempts repeat (node
// names, reasons, rules).
func intern(s string) string { return unique.Make(s).Value() }
