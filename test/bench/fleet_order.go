package main

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
)

// sizeExponent is s in the mixed-size fleet's distribution of job sizes,
// P(size = k) ∝ k^-s: about half of the jobs have 10 indexes or fewer, and a
// few have close to the largest size.
const sizeExponent = 1.1

// smallJob is the most indexes a job of the mixed-size fleet may have to
// count among its small jobs.
const smallJob = 10

// jobSizes draws n job sizes from 1 to maxSize with P(size = k) ∝
// k^-sizeExponent (a Zipf law bounded at maxSize), by inverting the
// cumulative weights with a PCG seeded with seed: the same seed gives both
// controllers the same fleet.
func jobSizes(n, maxSize int, seed uint64) []int32 {
	cum := make([]float64, maxSize)
	total := 0.0
	for k := 1; k <= maxSize; k++ {
		total += math.Pow(float64(k), -sizeExponent)
		cum[k-1] = total
	}
	r := rand.New(rand.NewPCG(seed, seed))
	sizes := make([]int32, n)
	for i := range sizes {
		u := r.Float64() * total
		sizes[i] = int32(min(sort.SearchFloat64s(cum, u), maxSize-1) + 1)
	}
	return sizes
}

// jobTimes is one job of a run: its size, when its create was sent and when
// the job watch first saw it terminal, in seconds from the run's start.
type jobTimes struct {
	size              int32
	created, finished float64
}

// finishOrder compares the order the jobs were created in with the order
// they finished in. tau is Kendall's tau-b of the two orders (1: every job
// finished in the order it came, 0: no relation, -1: the reverse order);
// inOrder is the fraction of the pairs, ordered in both, that finished in
// the order they came. ok is false with fewer than two such pairs' worth of
// jobs.
func finishOrder(jobs []jobTimes) (tau, inOrder float64, ok bool) {
	var concordant, discordant, tiedCreated, tiedFinished, pairs float64
	for i := range jobs {
		for j := i + 1; j < len(jobs); j++ {
			pairs++
			dc := jobs[j].created - jobs[i].created
			df := jobs[j].finished - jobs[i].finished
			switch {
			case dc == 0 && df == 0:
				tiedCreated++
				tiedFinished++
			case dc == 0:
				tiedCreated++
			case df == 0:
				tiedFinished++
			case (dc > 0) == (df > 0):
				concordant++
			default:
				discordant++
			}
		}
	}
	denom := math.Sqrt((pairs - tiedCreated) * (pairs - tiedFinished))
	if denom == 0 || concordant+discordant == 0 {
		return 0, 0, false
	}
	return (concordant - discordant) / denom, concordant / (concordant + discordant), true
}

// smallLatencies are the latencies (finished - created) of the jobs of at
// most smallJob indexes.
func smallLatencies(jobs []jobTimes) []float64 {
	var xs []float64
	for _, j := range jobs {
		if j.size <= smallJob {
			xs = append(xs, j.finished-j.created)
		}
	}
	return xs
}

// smallestJobs is how many of a fleet's smallest jobs the smallest-jobs
// p50 is over.
const smallestJobs = 100

// smallestLatencies are the latencies of the n smallest jobs, the earlier
// created first among jobs of one size.
func smallestLatencies(jobs []jobTimes, n int) []float64 {
	sorted := slices.Clone(jobs)
	slices.SortStableFunc(sorted, func(a, b jobTimes) int {
		if a.size != b.size {
			return int(a.size - b.size)
		}
		return cmp.Compare(a.created, b.created)
	})
	xs := make([]float64, 0, min(n, len(sorted)))
	for _, j := range sorted[:min(n, len(sorted))] {
		xs = append(xs, j.finished-j.created)
	}
	return xs
}

// sizeSummary is what results.md says of a fleet's sizes: how many jobs,
// how many of them small, and their pods in all.
func sizeSummary(sizes []int32) (small, pods int) {
	for _, s := range sizes {
		pods += int(s)
		if s <= smallJob {
			small++
		}
	}
	return small, pods
}

// largest is the largest size of a fleet (0 for none).
func largest(sizes []int32) int32 {
	if len(sizes) == 0 {
		return 0
	}
	return slices.Max(sizes)
}
