package indexset

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestStringCompressesThreeOrMoreConsecutiveIndexes(t *testing.T) {
	cases := []struct {
		in   []int32
		want string
	}{
		{nil, ""},
		{[]int32{0}, "0"},
		{[]int32{1, 2}, "1,2"},
		{[]int32{0, 3, 4, 5, 6, 7}, "0,3-7"},
		{[]int32{7, 6, 5, 4, 3, 0, 3}, "0,3-7"},
		{[]int32{0, 1, 2, 4, 5, 9}, "0-2,4,5,9"},
		{[]int32{2147483646, 2147483647}, "2147483646,2147483647"},
	}
	for _, c := range cases {
		if got := Of(c.in...).String(); got != c.want {
			t.Errorf("Of(%v).String() = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestParseAcceptsUserOrderAndMerges(t *testing.T) {
	cases := map[string]string{
		"":            "",
		"0,3-7":       "0,3-7",
		"1,2":         "1,2",
		"1-2":         "1,2",
		"5,0-3,4":     "0-5",
		"3-7,5-9,1":   "1,3-9",
		"0-0":         "0",
		"10,8,9,8":    "8-10",
		"0-999":       "0-999",
		"99999-99999": "99999",
	}
	for in, want := range cases {
		s, err := Parse(in, 0)
		if err != nil {
			t.Fatalf("Parse(%q): %v", in, err)
		}
		if got := s.String(); got != want {
			t.Errorf("Parse(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseRejectsMalformedInput(t *testing.T) {
	for _, in := range []string{",", "1,", ",1", "a", "1-", "-1", "3-1", "1--2", " 1", "1 ", "+1", "1-2-3", "99999999999", "1,,2"} {
		if _, err := Parse(in, 0); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", in)
		}
	}
}

func TestParseRejectsIndexesAtOrAboveLimit(t *testing.T) {
	if _, err := Parse("0-7", 8); err != nil {
		t.Fatalf("Parse within limit: %v", err)
	}
	for _, in := range []string{"8", "0-8", "1,9"} {
		if _, err := Parse(in, 8); err == nil || !strings.Contains(err.Error(), "less than 8") {
			t.Errorf("Parse(%q, 8) = %v, want a limit error", in, err)
		}
	}
}

func TestSetOperations(t *testing.T) {
	s := Of(0, 3, 4, 5, 6, 7)
	if s.Len() != 6 {
		t.Errorf("Len = %d, want 6", s.Len())
	}
	for i, want := range map[int32]bool{-1: false, 0: true, 1: false, 2: false, 3: true, 7: true, 8: false} {
		if s.Has(i) != want {
			t.Errorf("Has(%d) = %v, want %v", i, !want, want)
		}
	}
	if got := s.Union(Of(1, 2, 9)).String(); got != "0-7,9" {
		t.Errorf("Union = %q", got)
	}
	if got := s.Add(8).String(); got != "0,3-8" {
		t.Errorf("Add = %q", got)
	}
	if n := s.CountIn(Of(0, 1, 2, 3)); n != 2 {
		t.Errorf("CountIn = %d, want 2", n)
	}
	if !s.Contains(Of(4, 5)) || s.Contains(Of(1)) {
		t.Errorf("Contains is wrong")
	}
	var got []int32
	s.Each(func(i int32) bool { got = append(got, i); return i < 4 })
	if len(got) != 3 || got[2] != 4 {
		t.Errorf("Each visited %v", got)
	}
}

// TestRandomSetsRoundTrip checks, on random sets, that formatting then
// parsing gives the same set and that Has agrees with the input.
func TestRandomSetsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := r.IntN(40)
		in := map[int32]bool{}
		var xs []int32
		for range n {
			x := int32(r.IntN(60))
			in[x] = true
			xs = append(xs, x)
		}
		s := Of(xs...)
		p, err := Parse(s.String(), 0)
		if err != nil {
			t.Fatalf("Parse(%q): %v", s.String(), err)
		}
		if p.String() != s.String() || p.Len() != len(in) {
			t.Fatalf("round trip of %v: %q -> %q", xs, s.String(), p.String())
		}
		for i := int32(-1); i < 61; i++ {
			if s.Has(i) != in[i] {
				t.Fatalf("Has(%d) wrong for %v", i, xs)
			}
		}
	}
}

// FuzzParse checks that Parse never panics and that whatever it accepts
// formats to a canonical string that parses back to itself.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "0", "0,3-7", "1,2", "5,0-3,4", "3-1", "a", "1,,2", "2147483647", "0-2147483647"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := Parse(in, 0)
		if err != nil {
			return
		}
		out := s.String()
		p, err := Parse(out, 0)
		if err != nil {
			t.Fatalf("canonical %q of %q does not parse: %v", out, in, err)
		}
		if p.String() != out {
			t.Fatalf("canonical form unstable: %q -> %q", out, p.String())
		}
		ivs := s.Intervals()
		for k := 1; k < len(ivs); k++ {
			if int64(ivs[k].First) <= int64(ivs[k-1].Last)+1 {
				t.Fatalf("intervals of %q not disjoint and sorted: %v", in, ivs)
			}
		}
	})
}

func TestRangeAndIntersect(t *testing.T) {
	cases := []struct {
		name string
		a, b Set
		want string
	}{
		{"a range", Range(2, 5), Range(0, 9), "2-5"},
		{"an empty range", Range(3, 2), Range(0, 9), ""},
		{"trimmed to a shorter range", Of(0, 3, 4, 5, 6, 7), Range(0, 4), "0,3,4"},
		{"disjoint", Of(1, 2), Of(5, 6), ""},
		{"interleaved", Of(0, 1, 2, 5, 6, 7, 9), Of(2, 3, 4, 5, 9, 10), "2,5,9"},
		{"with the empty set", Of(1, 2), Set{}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.a.Intersect(c.b).String(); got != c.want {
				t.Errorf("%v ∩ %v = %q, want %q", c.a, c.b, got, c.want)
			}
			if got := c.b.Intersect(c.a).String(); got != c.want {
				t.Errorf("%v ∩ %v = %q, want %q (the other way round)", c.b, c.a, got, c.want)
			}
			if n := c.a.CountIn(c.b); n != c.a.Intersect(c.b).Len() {
				t.Errorf("CountIn = %d, want the intersection's size", n)
			}
		})
	}
}

func TestAddMergesWithWhatItTouches(t *testing.T) {
	cases := []struct {
		name  string
		start string
		add   []int32 // one Add each
		want  string
	}{
		{"into the empty set", "", []int32{4}, "4"},
		{"extends an interval downwards", "3-5", []int32{2}, "2-5"},
		{"extends an interval upwards", "3-5", []int32{6}, "3-6"},
		{"joins two intervals", "0-2,4-6", []int32{3}, "0-6"},
		{"joins two single indexes", "1,3", []int32{2}, "1-3"},
		{"joins a single index to a range", "1,3-9", []int32{2}, "1-9"},
		{"a new interval between two", "0,10", []int32{5}, "0,5,10"},
		{"a new interval before all", "5-7", []int32{0}, "0,5-7"},
		{"a new interval after all", "5-7", []int32{9}, "5-7,9"},
		{"a duplicate inside", "3-5", []int32{4}, "3-5"},
		{"duplicates at the edges", "3-5", []int32{3, 5, 3}, "3-5"},
		{"a duplicate single index", "7", []int32{7}, "7"},
		{"out of order", "", []int32{5, 1, 3, 2, 4}, "1-5"},
		{"descending", "", []int32{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, "0-9"},
		{"every other, then the gaps", "0,2,4,6,8", []int32{7, 1, 5, 3}, "0-8"},
		{"the largest index of completions 2147483647", "2147483645", []int32{2147483646}, "2147483645,2147483646"},
		{"the largest index joins a range", "0-2147483645", []int32{2147483646}, "0-2147483646"},
		{"the largest int32, where last+1 overflows", "2147483646", []int32{2147483647}, "2147483646,2147483647"},
		{"already in the widest range", "0-2147483646", []int32{2147483646, 0, 1 << 30}, "0-2147483646"},
		{"between two large ranges", "0-1073741822,1073741824-2147483646", []int32{1073741823}, "0-2147483646"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start, err := Parse(c.start, 0)
			if err != nil {
				t.Fatal(err)
			}
			s := start
			for _, x := range c.add {
				s = s.Add(x)
				checkSet(t, s)
			}
			if got := s.String(); got != c.want {
				t.Errorf("%q + %v = %q, want %q", c.start, c.add, got, c.want)
			}
			if got := start.String(); got != c.start {
				t.Errorf("Add changed the set it was called on: %q became %q", c.start, got)
			}
			if got := start.Add(c.add...).String(); got != c.want {
				t.Errorf("%q + %v in one Add = %q, want %q", c.start, c.add, got, c.want)
			}
		})
	}
}

func TestLenOfLargeRanges(t *testing.T) {
	cases := []struct {
		set  Set
		want int
	}{
		{Range(0, 2147483646), 2147483647},
		{Range(0, 2147483647), 2147483648},
		{Of(0, 2147483647), 2},
		{Range(5, 2147483646).Add(0, 1), 2147483644},
	}
	for _, c := range cases {
		if got := c.set.Len(); got != c.want {
			t.Errorf("%v: Len = %d, want %d", c.set, got, c.want)
		}
	}
}

func TestUnionDifferenceAndOfIntervals(t *testing.T) {
	cases := []struct {
		name           string
		a, b           Set
		union, aMinusB string
	}{
		{"empty", Set{}, Set{}, "", ""},
		{"with the empty set", Of(1, 2), Set{}, "1,2", "1,2"},
		{"disjoint", Of(1, 2), Of(5, 6), "1,2,5,6", "1,2"},
		{"adjacent ranges merge", Range(0, 4), Range(5, 9), "0-9", "0-4"},
		{"a hole punched", Range(0, 9), Of(3, 7), "0-9", "0-2,4-6,8,9"},
		{"interleaved", Of(0, 1, 2, 5, 6, 7, 9), Of(2, 3, 4, 5, 9, 10), "0-7,9,10", "0,1,6,7"},
		{"one range over many", mustParse("0,2,4,6,8"), Range(1, 7), "0-8", "0,8"},
		{"all of it", Range(3, 5), Range(0, 2147483646), "0-2147483646", ""},
		{"the top of int32", Range(2147483640, 2147483647), Of(2147483647), "2147483640-2147483647", "2147483640-2147483646"},
		{"the rest of a huge range", Range(0, 2147483646), Range(0, 4), "0-2147483646", "5-2147483646"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, u := range []Set{c.a.Union(c.b), c.b.Union(c.a)} {
				checkSet(t, u)
				if got := u.String(); got != c.union {
					t.Errorf("union = %q, want %q", got, c.union)
				}
			}
			d := c.a.Difference(c.b)
			checkSet(t, d)
			if got := d.String(); got != c.aMinusB {
				t.Errorf("%v - %v = %q, want %q", c.a, c.b, got, c.aMinusB)
			}
			if got := OfIntervals(append(c.b.Intervals(), c.a.Intervals()...)...).String(); got != c.union {
				t.Errorf("OfIntervals of both = %q, want %q", got, c.union)
			}
		})
	}
	if got := OfIntervals(Interval{5, 3}, Interval{7, 9}, Interval{1, 2}, Interval{8, 10}).String(); got != "1,2,7-10" {
		t.Errorf("OfIntervals with an empty interval = %q", got)
	}
}

// mustParse is Parse of a string the test knows to be valid.
func mustParse(s string) Set {
	set, err := Parse(s, 0)
	if err != nil {
		panic(err)
	}
	return set
}
