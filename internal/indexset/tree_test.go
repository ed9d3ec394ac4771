package indexset

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// checkSet fails the test unless s is a well-formed tree: every node's
// size and count right, every node in balance, the intervals sorted,
// disjoint and non-adjacent.
func checkSet(t *testing.T, s Set) {
	t.Helper()
	var check func(n *node) (uint32, int64)
	check = func(n *node) (uint32, int64) {
		if n == nil {
			return 0, 0
		}
		sl, cl := check(n.left)
		sr, cr := check(n.right)
		if n.iv.First > n.iv.Last {
			t.Fatalf("interval %v is reversed", n.iv)
		}
		if n.size != sl+sr+1 || n.count != cl+cr+width(n.iv) {
			t.Fatalf("node %v: size %d count %d, want %d and %d", n.iv, n.size, n.count, sl+sr+1, cl+cr+width(n.iv))
		}
		if sl+sr > 1 && (sl > delta*sr || sr > delta*sl) {
			t.Fatalf("node %v out of balance: %d intervals left, %d right", n.iv, sl, sr)
		}
		return n.size, n.count
	}
	check(s.root)
	ivs := s.Intervals()
	for k := 1; k < len(ivs); k++ {
		if int64(ivs[k].First) <= int64(ivs[k-1].Last)+1 {
			t.Fatalf("intervals not sorted, disjoint and apart: %v", ivs)
		}
	}
	if s.NumIntervals() != len(ivs) {
		t.Fatalf("NumIntervals = %d, want %d", s.NumIntervals(), len(ivs))
	}
}

// model is the naive set the tests hold a Set against.
type model map[int32]bool

func (m model) sorted() []int32 {
	xs := make([]int32, 0, len(m))
	for x := range m {
		xs = append(xs, x)
	}
	slices.Sort(xs)
	return xs
}

// String is the compressed form written out index by index.
func (m model) String() string {
	xs := m.sorted()
	var parts []string
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && int64(xs[j+1]) == int64(xs[j])+1 {
			j++
		}
		switch j - i {
		case 0:
			parts = append(parts, strconv.Itoa(int(xs[i])))
		case 1:
			parts = append(parts, strconv.Itoa(int(xs[i])), strconv.Itoa(int(xs[j])))
		default:
			parts = append(parts, strconv.Itoa(int(xs[i]))+"-"+strconv.Itoa(int(xs[j])))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func (m model) clone() model {
	c := make(model, len(m))
	for x := range m {
		c[x] = true
	}
	return c
}

// universe is where the model tests draw indexes: two clusters, one at
// zero and one at the top of int32, so that merges at both ends and the
// overflow of last+1 are exercised.
func universe(k uint8) int32 {
	if k < 128 {
		return int32(k % 64)
	}
	return math.MaxInt32 - int32(k%64)
}

// agree fails the test unless s holds exactly the indexes of m.
func agree(t *testing.T, what string, s Set, m model) {
	t.Helper()
	checkSet(t, s)
	if got, want := s.String(), m.String(); got != want {
		t.Fatalf("%s: String = %q, want %q", what, got, want)
	}
	if s.Len() != len(m) {
		t.Fatalf("%s: Len = %d, want %d", what, s.Len(), len(m))
	}
	for k := range 256 {
		if x := universe(uint8(k)); s.Has(x) != m[x] {
			t.Fatalf("%s: Has(%d) = %v, want %v", what, x, s.Has(x), m[x])
		}
	}
	var each []int32
	s.Each(func(x int32) bool { each = append(each, x); return true })
	if !slices.Equal(each, m.sorted()) {
		t.Fatalf("%s: Each visited %v, want %v", what, each, m.sorted())
	}
}

// applyOps runs the operations that data spells, each on the set and the
// model, and checks after each that they agree, that the set it started
// from did not change, and that the counting operations agree too.
func applyOps(t *testing.T, data []byte) {
	var s Set
	m := model{}
	for len(data) >= 2 {
		op, arg := data[0]%6, data[1]
		data = data[2:]
		before, beforeModel := s, m.clone()
		var o Set
		om := model{}
		// The operand of the set operations: up to four indexes near arg.
		for k := range int(arg%4) + 1 {
			x := universe(arg + uint8(3*k))
			o, om[x] = o.Add(x), true
		}
		switch op {
		case 0, 1: // the controller's case: one index at a time
			x := universe(arg)
			s, m[x] = s.Add(x), true
		case 2:
			s = s.Union(o)
			for x := range om {
				m[x] = true
			}
		case 3:
			s = s.Intersect(o.Union(Range(0, 40)))
			for x := range m {
				if !om[x] && x > 40 {
					delete(m, x)
				}
			}
		case 4:
			s = s.Difference(o)
			for x := range om {
				delete(m, x)
			}
		case 5:
			p, err := Parse(s.String(), 0)
			if err != nil {
				t.Fatalf("Parse(%q): %v", s.String(), err)
			}
			s = p
		}
		agree(t, "after op "+strconv.Itoa(int(op)), s, m)
		agree(t, "the set before op "+strconv.Itoa(int(op)), before, beforeModel)
		inBoth := 0
		for x := range om {
			if m[x] {
				inBoth++
			}
		}
		if s.CountIn(o) != inBoth || o.CountIn(s) != inBoth {
			t.Fatalf("CountIn of %v and %v = %d and %d, want %d", s, o, s.CountIn(o), o.CountIn(s), inBoth)
		}
		if s.Contains(o) != (inBoth == len(om)) {
			t.Fatalf("%v Contains %v = %v", s, o, s.Contains(o))
		}
	}
}

// TestOperationsAgreeWithANaiveSet runs random sequences of operations
// against the naive model.
func TestOperationsAgreeWithANaiveSet(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 2))
	for range 300 {
		data := make([]byte, 2*r.IntN(100))
		for i := range data {
			data[i] = byte(r.UintN(256))
		}
		applyOps(t, data)
	}
}

// FuzzOperations is TestOperationsAgreeWithANaiveSet on inputs the fuzzer
// chooses.
func FuzzOperations(f *testing.F) {
	f.Add([]byte{0, 1, 0, 3, 0, 2})
	f.Add([]byte{0, 200, 0, 201, 1, 199, 2, 130, 4, 131, 5, 0})
	f.Add([]byte{2, 7, 3, 9, 4, 2, 0, 127, 0, 128})
	f.Fuzz(applyOps)
}

// TestLargeSetsStayBalanced adds 100,000 indexes in random order, one at a
// time, then removes most of them again, checking the tree on the way.
func TestLargeSetsStayBalanced(t *testing.T) {
	xs := shuffled(100_000)
	var s Set
	for i, x := range xs {
		s = s.Add(x)
		if i%10_000 == 0 {
			checkSet(t, s)
		}
	}
	checkSet(t, s)
	if s.Len() != len(xs) || s.NumIntervals() != len(xs) {
		t.Fatalf("Len %d and %d intervals, want %d of each", s.Len(), s.NumIntervals(), len(xs))
	}
	// Fill every gap: one interval is left.
	for _, x := range xs {
		s = s.Add(x + 1)
	}
	checkSet(t, s)
	if got := s.String(); got != "0-199999" {
		t.Fatalf("after filling the gaps: %q", got)
	}
}
