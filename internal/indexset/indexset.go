// Package indexset holds sets of completion indexes as sorted, disjoint
// intervals, and their compressed text form ("0,3-7") used by
// status.completedIndexes, status.failedIndexes and successPolicy rules.
//
// A set's cost follows its number of intervals, not its number of indexes:
// 0-2147483646 is one interval. Add, Has and CountIn of a few intervals
// take logarithmic time and Len constant time, so a sync that records
// finished pods one index at a time stays O(pods × log intervals).
package indexset

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// Interval is the closed range of indexes First..Last.
type Interval struct {
	First, Last int32
}

// Set is an immutable set of indexes: sorted, disjoint, non-adjacent
// intervals. The zero value is the empty set. Operations return new sets
// that share what they did not change with the sets they came from.
type Set struct {
	root *node
}

// Of returns the set of the given indexes, in any order, duplicates allowed.
func Of(indexes ...int32) Set {
	switch len(indexes) {
	case 0:
		return Set{}
	case 1:
		return Range(indexes[0], indexes[0])
	}
	xs := slices.Clone(indexes)
	slices.Sort(xs)
	ivs := make([]Interval, 0, len(xs))
	for _, x := range xs {
		if n := len(ivs); n > 0 && int64(x) <= int64(ivs[n-1].Last)+1 {
			ivs[n-1].Last = max(ivs[n-1].Last, x)
			continue
		}
		ivs = append(ivs, Interval{x, x})
	}
	return Set{root: build(ivs)}
}

// OfIntervals returns the set of the indexes of the given intervals, in any
// order, overlapping or not. An interval whose Last is below its First is
// empty.
func OfIntervals(ivs ...Interval) Set {
	kept := make([]Interval, 0, len(ivs))
	for _, iv := range ivs {
		if iv.First <= iv.Last {
			kept = append(kept, iv)
		}
	}
	return normalize(kept)
}

// Range returns the indexes first..last; the empty set when last < first.
func Range(first, last int32) Set {
	if last < first {
		return Set{}
	}
	return Set{root: mk(Interval{first, last}, nil, nil)}
}

// Parse reads a comma-separated list of indexes and ranges ("0,3-7"). It
// accepts any order and overlaps, as a user may write them, and merges them.
// It rejects empty parts, negative numbers, reversed ranges and indexes at or
// above limit (a limit of 0 or less means no limit).
func Parse(s string, limit int32) (Set, error) {
	if s == "" {
		return Set{}, nil
	}
	ivs := make([]Interval, 0, strings.Count(s, ",")+1)
	for part := range strings.SplitSeq(s, ",") {
		first, last, isRange := strings.Cut(part, "-")
		a, err := parseIndex(first)
		if err != nil {
			return Set{}, fmt.Errorf("index %q: %w", part, err)
		}
		b := a
		if isRange {
			if b, err = parseIndex(last); err != nil {
				return Set{}, fmt.Errorf("range %q: %w", part, err)
			}
			if b < a {
				return Set{}, fmt.Errorf("range %q: the first index is greater than the last", part)
			}
		}
		if limit > 0 && b >= limit {
			return Set{}, fmt.Errorf("index %q: must be less than %d", part, limit)
		}
		ivs = append(ivs, Interval{a, b})
	}
	return normalize(ivs), nil
}

// parseIndex reads a non-negative int32 written in decimal digits only.
func parseIndex(s string) (int32, error) {
	if s == "" {
		return 0, errNotAnIndex
	}
	var v int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, errNotAnIndex
		}
		if v = 10*v + int64(c-'0'); v > math.MaxInt32 {
			return 0, errNotAnIndex
		}
	}
	return int32(v), nil
}

var errNotAnIndex = errors.New("not a non-negative integer")

// normalize sorts intervals (First <= Last each), merges overlapping and
// adjacent ones, and builds the set. Already sorted input, as a status the
// operator wrote, is not sorted again.
func normalize(ivs []Interval) Set {
	if len(ivs) == 0 {
		return Set{}
	}
	byFirst := func(a, b Interval) int { return cmp.Compare(a.First, b.First) }
	if !slices.IsSortedFunc(ivs, byFirst) {
		slices.SortFunc(ivs, byFirst)
	}
	out := ivs[:1]
	for _, iv := range ivs[1:] {
		last := &out[len(out)-1]
		if int64(iv.First) <= int64(last.Last)+1 {
			last.Last = max(last.Last, iv.Last)
			continue
		}
		out = append(out, iv)
	}
	return Set{root: build(out)}
}

// String is the compressed form: ascending, three or more consecutive
// indexes as a range "a-b", two as "a,b".
func (s Set) String() string {
	var b strings.Builder
	b.Grow(int(size(s.root)) * 8)
	var digits [11]byte
	number := func(x int32) { b.Write(strconv.AppendInt(digits[:0], int64(x), 10)) }
	walk(s.root, func(iv Interval) bool {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		number(iv.First)
		switch {
		case iv.Last == iv.First+1:
			b.WriteByte(',')
			number(iv.Last)
		case iv.Last > iv.First:
			b.WriteByte('-')
			number(iv.Last)
		}
		return true
	})
	return b.String()
}

// Intervals returns the set's intervals, sorted.
func (s Set) Intervals() []Interval {
	if s.root == nil {
		return nil
	}
	ivs := make([]Interval, 0, s.root.size)
	walk(s.root, func(iv Interval) bool {
		ivs = append(ivs, iv)
		return true
	})
	return ivs
}

// NumIntervals is the number of intervals of the set: what its size in
// memory and the time of its linear operations follow.
func (s Set) NumIntervals() int { return int(size(s.root)) }

// Len is the number of indexes in the set, in constant time.
func (s Set) Len() int { return int(count(s.root)) }

// Has tells whether i is in the set, in logarithmic time.
func (s Set) Has(i int32) bool {
	for t := s.root; t != nil; {
		switch {
		case i < t.iv.First:
			t = t.left
		case i > t.iv.Last:
			t = t.right
		default:
			return true
		}
	}
	return false
}

// Add returns s with the given indexes added: O(log n) for each index, n
// the number of intervals of s.
func (s Set) Add(indexes ...int32) Set {
	if len(indexes) == 1 {
		return Set{root: add(s.root, indexes[0], indexes[0])}
	}
	return s.Union(Of(indexes...))
}

// Union returns the indexes in s or o: the intervals of the smaller set
// added one by one to the larger, O(m log n), or both merged in one pass,
// O(n + m), whichever is less.
func (s Set) Union(o Set) Set {
	small, large := o, s
	if size(s.root) < size(o.root) {
		small, large = s, o
	}
	m, n := int(size(small.root)), int(size(large.root))
	if m == 0 {
		return large
	}
	if m*bits.Len(uint(n)) > n+m {
		return normalize(append(large.Intervals(), small.Intervals()...))
	}
	t := large.root
	walk(small.root, func(iv Interval) bool {
		t = add(t, iv.First, iv.Last)
		return true
	})
	return Set{root: t}
}

// Intersect returns the indexes in both s and o.
func (s Set) Intersect(o Set) Set {
	if s.root == nil || o.root == nil {
		return Set{}
	}
	// The common case: the job's indexes, one range, cover the set.
	if o.covers(s) {
		return s
	}
	if s.covers(o) {
		return o
	}
	a, b := s.Intervals(), o.Intervals()
	var ivs []Interval
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		x, y := a[i], b[j]
		if lo, hi := max(x.First, y.First), min(x.Last, y.Last); lo <= hi {
			ivs = append(ivs, Interval{lo, hi})
		}
		if x.Last < y.Last {
			i++
		} else {
			j++
		}
	}
	return Set{root: build(ivs)}
}

// covers tells, in logarithmic time, whether s is one interval holding
// every index of o.
func (s Set) covers(o Set) bool {
	if s.root == nil || s.root.size != 1 || o.root == nil {
		return o.root == nil
	}
	return s.root.iv.First <= o.root.first().First && o.root.last().Last <= s.root.iv.Last
}

// Difference returns the indexes in s and not in o.
func (s Set) Difference(o Set) Set {
	if s.root == nil || o.root == nil {
		return s
	}
	a, b := s.Intervals(), o.Intervals()
	ivs := make([]Interval, 0, len(a))
	j := 0
	for _, x := range a {
		lo := int64(x.First)
		for j < len(b) && b[j].Last < x.First {
			j++
		}
		for k := j; k < len(b) && b[k].First <= x.Last; k++ {
			if int64(b[k].First) > lo {
				ivs = append(ivs, Interval{int32(lo), b[k].First - 1})
			}
			lo = int64(b[k].Last) + 1
		}
		if lo <= int64(x.Last) {
			ivs = append(ivs, Interval{int32(lo), x.Last})
		}
	}
	return Set{root: build(ivs)}
}

// CountIn is the number of indexes of s that are also in o: each interval
// of the smaller set counted in the larger, O(m log n).
func (s Set) CountIn(o Set) int {
	small, large := o, s
	if size(s.root) < size(o.root) {
		small, large = s, o
	}
	var n int64
	walk(small.root, func(iv Interval) bool {
		n += countBelow(large.root, int64(iv.Last)+1) - countBelow(large.root, int64(iv.First))
		return true
	})
	return int(n)
}

// Contains tells whether every index of o is in s.
func (s Set) Contains(o Set) bool { return s.CountIn(o) == o.Len() }

// Each calls f for every index in ascending order until f returns false.
func (s Set) Each(f func(int32) bool) {
	walk(s.root, func(iv Interval) bool {
		for i := int64(iv.First); i <= int64(iv.Last); i++ {
			if !f(int32(i)) {
				return false
			}
		}
		return true
	})
}
