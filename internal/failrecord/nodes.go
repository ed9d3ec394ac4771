package failrecord

import (
	"cmp"
	"slices"
	"time"
)

// Node is what the record says of one node: the job's failures there
// that count against it (Attempt.Blames), the distinct indexes they were
// of, the last of them, and since when the whole job avoids it.
type Node struct {
	Name     string
	Failures int
	Indexes  []int32 // ascending
	Last     Attempt
	// AvoidedSince is when the node's distinct failed indexes reached the
	// job's threshold (spec.nodeAvoidance.failedIndexesPerNode): the time
	// of that failure. Zero when the job does not avoid it.
	AvoidedSince time.Time
}

// Nodes summarizes the record by node, the most failures first (then by
// name). threshold is spec.nodeAvoidance.failedIndexesPerNode, 0 when the
// job sets none.
func (r *Record) Nodes(threshold int) []Node {
	type acc struct {
		n    Node
		seen map[int32]bool
	}
	byNode := map[string]*acc{}
	for _, ix := range r.Indexes() {
		for _, a := range r.byIndex[ix] {
			if !a.Blames() {
				continue
			}
			x := byNode[a.Node]
			if x == nil {
				x = &acc{n: Node{Name: a.Node}, seen: map[int32]bool{}}
				byNode[a.Node] = x
			}
			x.n.Failures++
			if !x.seen[a.Index] {
				x.seen[a.Index] = true
				x.n.Indexes = append(x.n.Indexes, a.Index)
			}
			if later(a, x.n.Last) {
				x.n.Last = a
			}
		}
	}
	out := make([]Node, 0, len(byNode))
	for _, x := range byNode {
		if t := r.tally[x.n.Name]; threshold > 0 && t != nil && len(t.firsts) >= threshold {
			x.n.AvoidedSince = t.firsts[threshold-1]
		}
		out = append(out, x.n)
	}
	slices.SortFunc(out, func(a, b Node) int {
		return cmp.Or(cmp.Compare(b.Failures, a.Failures), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// later: a failed after b (by time, then index and attempt), or b is
// empty.
func later(a, b Attempt) bool {
	if b.Node == "" {
		return true
	}
	if c := a.Time.Compare(b.Time); c != 0 {
		return c > 0
	}
	return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(a.Attempt, b.Attempt)) > 0
}

// nodeTally is what Avoided needs of one node.
type nodeTally struct {
	indexes map[int32]bool
	// firsts are when each distinct index first failed there, ascending.
	firsts []time.Time
}

// count tallies an attempt that blames its node.
func (r *Record) count(a Attempt) {
	t := r.tally[a.Node]
	if t == nil {
		t = &nodeTally{indexes: map[int32]bool{}}
		r.tally[a.Node] = t
	}
	if t.indexes[a.Index] {
		return
	}
	t.indexes[a.Index] = true
	i, _ := slices.BinarySearchFunc(t.firsts, a.Time, time.Time.Compare)
	t.firsts = slices.Insert(t.firsts, i, a.Time)
}

// Avoided returns the nodes every later pod of the job avoids: those where
// at least threshold distinct indexes failed, by when they became avoided
// (then by name). None when threshold is 0. It reads one tally a node,
// not the attempts.
func (r *Record) Avoided(threshold int) []string {
	if threshold <= 0 {
		return nil
	}
	type avoided struct {
		name  string
		since time.Time
	}
	var list []avoided
	for name, t := range r.tally {
		if len(t.firsts) >= threshold {
			list = append(list, avoided{name, t.firsts[threshold-1]})
		}
	}
	slices.SortFunc(list, func(a, b avoided) int {
		return cmp.Or(a.since.Compare(b.since), cmp.Compare(a.name, b.name))
	})
	out := make([]string, len(list))
	for i, a := range list {
		out[i] = a.name
	}
	return out
}

// AvoidFor returns the nodes the next pod of index ix avoids, at most
// MaxAvoidedNodes: the nodes where ix failed, the most recent first, then
// the job's avoided ones (jobWide, from Avoided) not among them.
func (r *Record) AvoidFor(ix int32, jobWide []string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(n string) {
		if n != "" && !seen[n] && len(out) < MaxAvoidedNodes {
			seen[n] = true
			out = append(out, n)
		}
	}
	list := r.byIndex[ix]
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].Blames() {
			add(list[i].Node)
		}
	}
	for _, n := range jobWide {
		add(n)
	}
	return out
}
