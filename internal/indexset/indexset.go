// Package indexset holds sets of completion indexes as sorted, disjoint
// intervals, and their compressed text form ("0,3-7") used by
// status.completedIndexes, status.failedIndexes and successPolicy rules.
package indexset

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Interval is the closed range of indexes First..Last.
type Interval struct {
	First, Last int32
}

// Set is an immutable set of indexes: sorted, disjoint, non-adjacent
// intervals. The zero value is the empty set.
type Set struct {
	ivs []Interval
}

// Of returns the set of the given indexes, in any order, duplicates allowed.
func Of(indexes ...int32) Set {
	if len(indexes) == 0 {
		return Set{}
	}
	xs := append([]int32(nil), indexes...)
	sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
	var ivs []Interval
	for _, x := range xs {
		if n := len(ivs); n > 0 && int64(x) <= int64(ivs[n-1].Last)+1 {
			ivs[n-1].Last = max(ivs[n-1].Last, x)
			continue
		}
		ivs = append(ivs, Interval{x, x})
	}
	return Set{ivs: ivs}
}

// Range returns the indexes first..last; the empty set when last < first.
func Range(first, last int32) Set {
	if last < first {
		return Set{}
	}
	return Set{ivs: []Interval{{first, last}}}
}

// Parse reads a comma-separated list of indexes and ranges ("0,3-7"). It
// accepts any order and overlaps, as a user may write them, and merges them.
// It rejects empty parts, negative numbers, reversed ranges and indexes at or
// above limit (a limit of 0 or less means no limit).
func Parse(s string, limit int32) (Set, error) {
	if s == "" {
		return Set{}, nil
	}
	var ivs []Interval
	for _, part := range strings.Split(s, ",") {
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

func parseIndex(s string) (int32, error) {
	if s == "" || strings.TrimSpace(s) != s || s[0] == '+' {
		return 0, fmt.Errorf("not a non-negative integer")
	}
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("not a non-negative integer")
	}
	return int32(v), nil
}

// normalize sorts intervals and merges overlapping and adjacent ones.
func normalize(ivs []Interval) Set {
	if len(ivs) == 0 {
		return Set{}
	}
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].First < ivs[j].First })
	out := ivs[:1]
	for _, iv := range ivs[1:] {
		last := &out[len(out)-1]
		if int64(iv.First) <= int64(last.Last)+1 {
			last.Last = max(last.Last, iv.Last)
			continue
		}
		out = append(out, iv)
	}
	return Set{ivs: out}
}

// String is the compressed form: ascending, three or more consecutive
// indexes as a range "a-b", two as "a,b".
func (s Set) String() string {
	var b strings.Builder
	for i, iv := range s.ivs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(iv.First)))
		switch {
		case iv.Last == iv.First+1:
			b.WriteByte(',')
			b.WriteString(strconv.Itoa(int(iv.Last)))
		case iv.Last > iv.First:
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(int(iv.Last)))
		}
	}
	return b.String()
}

// Intervals returns the set's intervals, sorted.
func (s Set) Intervals() []Interval { return append([]Interval(nil), s.ivs...) }

// Len is the number of indexes in the set.
func (s Set) Len() int {
	n := 0
	for _, iv := range s.ivs {
		n += int(iv.Last-iv.First) + 1
	}
	return n
}

// Has tells whether i is in the set, in logarithmic time.
func (s Set) Has(i int32) bool {
	k := sort.Search(len(s.ivs), func(k int) bool { return s.ivs[k].Last >= i })
	return k < len(s.ivs) && s.ivs[k].First <= i
}

// Union returns the indexes in s or o.
func (s Set) Union(o Set) Set {
	if len(o.ivs) == 0 {
		return s
	}
	if len(s.ivs) == 0 {
		return o
	}
	return normalize(append(append([]Interval(nil), s.ivs...), o.ivs...))
}

// Add returns s with the given indexes added.
func (s Set) Add(indexes ...int32) Set { return s.Union(Of(indexes...)) }

// Intersect returns the indexes in both s and o.
func (s Set) Intersect(o Set) Set {
	var ivs []Interval
	i, j := 0, 0
	for i < len(s.ivs) && j < len(o.ivs) {
		a, b := s.ivs[i], o.ivs[j]
		if lo, hi := max(a.First, b.First), min(a.Last, b.Last); lo <= hi {
			ivs = append(ivs, Interval{lo, hi})
		}
		if a.Last < b.Last {
			i++
		} else {
			j++
		}
	}
	return Set{ivs: ivs}
}

// CountIn is the number of indexes of s that are also in o.
func (s Set) CountIn(o Set) int {
	n := 0
	i, j := 0, 0
	for i < len(s.ivs) && j < len(o.ivs) {
		a, b := s.ivs[i], o.ivs[j]
		lo, hi := max(a.First, b.First), min(a.Last, b.Last)
		if lo <= hi {
			n += int(hi-lo) + 1
		}
		if a.Last < b.Last {
			i++
		} else {
			j++
		}
	}
	return n
}

// Contains tells whether every index of o is in s.
func (s Set) Contains(o Set) bool { return s.CountIn(o) == o.Len() }

// Each calls f for every index in ascending order until f returns false.
func (s Set) Each(f func(int32) bool) {
	for _, iv := range s.ivs {
		for i := int64(iv.First); i <= int64(iv.Last); i++ {
			if !f(int32(i)) {
				return
			}
		}
	}
}
