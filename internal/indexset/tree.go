package indexset

// A Set is a weight-balanced binary search tree of its intervals, keyed by
// their first index (the balance of Adams' trees, with the parameters
// Haskell's Data.Set uses: delta 3, ratio 2, shown correct for insertion
// and deletion by Hirai and Yamamoto). Nodes are never changed once built:
// an update copies the path from the root to what it changes and shares the
// rest, so a Set is an immutable value that costs O(log n) to derive a new
// one from, where a sorted slice costs a copy of every interval.

// node is an interval and the subtree below it.
type node struct {
	iv          Interval
	left, right *node
	// size is the number of intervals in the subtree, what the balance
	// weighs; count is the number of indexes in it, so that Len is O(1).
	size  uint32
	count int64
}

const (
	// delta: a side may weigh up to delta times the other.
	delta = 3
	// ratio decides between a single and a double rotation.
	ratio = 2
)

func size(t *node) uint32 {
	if t == nil {
		return 0
	}
	return t.size
}

func count(t *node) int64 {
	if t == nil {
		return 0
	}
	return t.count
}

// width is the number of indexes in iv.
func width(iv Interval) int64 { return int64(iv.Last) - int64(iv.First) + 1 }

// mk is a new node over subtrees that are in balance.
func mk(iv Interval, l, r *node) *node {
	return &node{iv: iv, left: l, right: r, size: size(l) + size(r) + 1, count: count(l) + count(r) + width(iv)}
}

// balance is mk for subtrees that one insertion or deletion may have put
// out of balance, rotating once or twice to restore it.
func balance(iv Interval, l, r *node) *node {
	sl, sr := size(l), size(r)
	switch {
	case sl+sr <= 1:
		return mk(iv, l, r)
	case sr > delta*sl:
		if size(r.left) < ratio*size(r.right) {
			return mk(r.iv, mk(iv, l, r.left), r.right)
		}
		rl := r.left
		return mk(rl.iv, mk(iv, l, rl.left), mk(r.iv, rl.right, r.right))
	case sl > delta*sr:
		if size(l.right) < ratio*size(l.left) {
			return mk(l.iv, l.left, mk(iv, l.right, r))
		}
		lr := l.right
		return mk(lr.iv, mk(l.iv, l.left, lr.left), mk(iv, lr.right, r))
	}
	return mk(iv, l, r)
}

// insert adds iv, whose first index no interval of t has.
func insert(t *node, iv Interval) *node {
	if t == nil {
		return mk(iv, nil, nil)
	}
	if iv.First < t.iv.First {
		return balance(t.iv, insert(t.left, iv), t.right)
	}
	return balance(t.iv, t.left, insert(t.right, iv))
}

// remove drops the interval that starts at first, which t has.
func remove(t *node, first int32) *node {
	switch {
	case first < t.iv.First:
		return balance(t.iv, remove(t.left, first), t.right)
	case first > t.iv.First:
		return balance(t.iv, t.left, remove(t.right, first))
	}
	return glue(t.left, t.right)
}

// glue joins the two subtrees of a removed node, taking its replacement
// from the heavier side.
func glue(l, r *node) *node {
	switch {
	case l == nil:
		return r
	case r == nil:
		return l
	case l.size > r.size:
		m, rest := removeMax(l)
		return balance(m, rest, r)
	}
	m, rest := removeMin(r)
	return balance(m, l, rest)
}

func removeMin(t *node) (Interval, *node) {
	if t.left == nil {
		return t.iv, t.right
	}
	m, rest := removeMin(t.left)
	return m, balance(t.iv, rest, t.right)
}

func removeMax(t *node) (Interval, *node) {
	if t.right == nil {
		return t.iv, t.left
	}
	m, rest := removeMax(t.right)
	return m, balance(t.iv, t.left, rest)
}

// replace changes the interval that starts at first, which t has, to iv,
// which must keep its place in the order: the shape does not change.
func replace(t *node, first int32, iv Interval) *node {
	switch {
	case first < t.iv.First:
		return mk(t.iv, replace(t.left, first, iv), t.right)
	case first > t.iv.First:
		return mk(t.iv, t.left, replace(t.right, first, iv))
	}
	return mk(iv, t.left, t.right)
}

// floor is the interval with the greatest first index at or below k, nil
// when there is none. k is an int64 so that callers may pass x+1 or x-1 of
// any int32 x.
func floor(t *node, k int64) *Interval {
	var best *Interval
	for t != nil {
		if int64(t.iv.First) <= k {
			best = &t.iv
			t = t.right
		} else {
			t = t.left
		}
	}
	return best
}

// add is t with the indexes first..last added (first <= last). The
// intervals of t that overlap or touch them are a run in the order: the
// run is removed from its right end until its first interval is left,
// which then takes the union of them all, in its own place in the order.
func add(t *node, first, last int32) *node {
	p := floor(t, int64(last)+1)
	if p == nil || int64(p.Last) < int64(first)-1 {
		return insert(t, Interval{first, last})
	}
	if p.First <= first && last <= p.Last {
		return t
	}
	lo, hi := min(first, p.First), max(last, p.Last)
	for {
		q := floor(t, int64(p.First)-1)
		if q == nil || int64(q.Last) < int64(lo)-1 {
			return replace(t, p.First, Interval{lo, hi})
		}
		t = remove(t, p.First)
		lo, p = min(lo, q.First), q
	}
}

// countBelow is the number of indexes of t less than x.
func countBelow(t *node, x int64) int64 {
	var n int64
	for t != nil {
		switch {
		case x <= int64(t.iv.First):
			t = t.left
		case x <= int64(t.iv.Last):
			return n + count(t.left) + x - int64(t.iv.First)
		default:
			n += count(t.left) + width(t.iv)
			t = t.right
		}
	}
	return n
}

// build is the balanced tree of sorted, disjoint, non-adjacent intervals,
// its nodes allocated at once.
func build(ivs []Interval) *node {
	if len(ivs) == 0 {
		return nil
	}
	nodes := make([]node, len(ivs))
	var b func(lo, hi int) *node
	b = func(lo, hi int) *node {
		if lo >= hi {
			return nil
		}
		mid := lo + (hi-lo)/2
		n := &nodes[mid]
		n.iv, n.left, n.right = ivs[mid], b(lo, mid), b(mid+1, hi)
		n.size = size(n.left) + size(n.right) + 1
		n.count = count(n.left) + count(n.right) + width(n.iv)
		return n
	}
	return b(0, len(ivs))
}

// walk calls f for each interval in order until f returns false, and
// tells whether it went through them all.
func walk(t *node, f func(Interval) bool) bool {
	for t != nil {
		if !walk(t.left, f) || !f(t.iv) {
			return false
		}
		t = t.right
	}
	return true
}

// first is the interval of t with the lowest indexes; t is not nil.
func (t *node) first() Interval {
	for t.left != nil {
		t = t.left
	}
	return t.iv
}

// last is the interval of t with the highest indexes; t is not nil.
func (t *node) last() Interval {
	for t.right != nil {
		t = t.right
	}
	return t.iv
}
