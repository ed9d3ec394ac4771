package indexset

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// The benchmarks use only the package's exported API, so that the same file
// runs against an earlier version of the package for a before/after
// comparison (docs/bench/indexset.md).

// benchIndexes is the size of the benchmarks' sets: 100,000 indexes, every
// other one of 0..199,998, so 100,000 intervals of one index each, the
// worst case for an interval set.
const benchIndexes = 100_000

// everyOther is the set of the even indexes below 2n: n intervals.
func everyOther(n int) Set {
	xs := make([]int32, n)
	for i := range xs {
		xs[i] = int32(2 * i)
	}
	return Of(xs...)
}

// shuffled is the even indexes below 2n in a fixed random order.
func shuffled(n int) []int32 {
	xs := make([]int32, n)
	for i := range xs {
		xs[i] = int32(2 * i)
	}
	r := rand.New(rand.NewPCG(7, 11))
	r.Shuffle(len(xs), func(i, j int) { xs[i], xs[j] = xs[j], xs[i] })
	return xs
}

// BenchmarkAdd adds one index to a set of 100,000 intervals: an odd index
// joins two intervals, an even one is already there, and one past the end
// extends the last. Each Add starts from the same set (sets are immutable).
func BenchmarkAdd(b *testing.B) {
	s := everyOther(benchIndexes)
	r := rand.New(rand.NewPCG(3, 5))
	for _, c := range []struct {
		name string
		next func() int32
	}{
		{"joins-two-intervals", func() int32 { return int32(2*r.IntN(benchIndexes-1) + 1) }},
		{"already-there", func() int32 { return int32(2 * r.IntN(benchIndexes)) }},
		{"extends-the-last", func() int32 { return 2*benchIndexes - 1 }},
		{"new-interval-past-the-end", func() int32 { return 2*benchIndexes + 1 }},
	} {
		xs := make([]int32, 1024)
		for i := range xs {
			xs[i] = c.next()
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var sink Set
			for i := 0; b.Loop(); i++ {
				sink = s.Add(xs[i%len(xs)])
			}
			_ = sink
		})
	}
}

// BenchmarkAddOneAtATime builds a set of n indexes from the empty set, one
// Add at a time in random order (every other index, so it ends with n
// intervals), as the controller's sync records finished pods.
func BenchmarkAddOneAtATime(b *testing.B) {
	for _, n := range []int{1_000, 10_000, benchIndexes} {
		xs := shuffled(n)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var s Set
				for _, x := range xs {
					s = s.Add(x)
				}
				if s.Len() != n {
					b.Fatalf("Len = %d, want %d", s.Len(), n)
				}
			}
		})
	}
}

// BenchmarkSync is one sync of the controller on a job whose
// status.completedIndexes holds 100,000 intervals: parse it, add the
// indexes of 1,000 pods that finished since (in ascending order, as
// recordFinishedPods visits them, each joining two intervals), check each
// with Has as it does, count, and format the status again.
func BenchmarkSync(b *testing.B) {
	status := everyOther(benchIndexes).String()
	r := rand.New(rand.NewPCG(1, 9))
	finished := make([]int32, 1000)
	for i := range finished {
		finished[i] = int32(2*r.IntN(benchIndexes-1) + 1)
	}
	slices.Sort(finished)
	wanted := Range(0, 2*benchIndexes-1)
	b.ReportAllocs()
	for b.Loop() {
		s, err := Parse(status, 0)
		if err != nil {
			b.Fatal(err)
		}
		s = s.Intersect(wanted)
		for _, x := range finished {
			if !s.Has(x) {
				s = s.Add(x)
			}
		}
		if s.Len() <= benchIndexes {
			b.Fatalf("Len = %d", s.Len())
		}
		_ = s.String()
	}
}

// BenchmarkRead measures the operations that do not change a set of
// 100,000 intervals.
func BenchmarkRead(b *testing.B) {
	s := everyOther(benchIndexes)
	text := s.String()
	b.Run("Has", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for i := 0; b.Loop(); i++ {
			if s.Has(int32(i % (2 * benchIndexes))) {
				n++
			}
		}
		_ = n
	})
	b.Run("Len", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if s.Len() != benchIndexes {
				b.Fatal("wrong Len")
			}
		}
	})
	b.Run("String", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = s.String()
		}
	})
	b.Run("Parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Parse(text, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Intersect-covering-range", func(b *testing.B) {
		b.ReportAllocs()
		wanted := Range(0, 2*benchIndexes-1)
		for b.Loop() {
			_ = s.Intersect(wanted)
		}
	})
}
