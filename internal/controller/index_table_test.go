package controller

import (
	"slices"
	"testing"
)

// Both kinds of table hold the same states; each visits them all, a slice
// in ascending order; an index past the slice moves it to a map.
func TestIndexTable(t *testing.T) {
	for _, tc := range []struct {
		name        string
		completions int32
		pods        int
		sparse      bool
	}{
		{"few indexes", 10, 3, false},
		{"indexes not many more than the pods", 100000, 25000, false},
		{"few pods among very many indexes", 2147483647, 3, true},
	} {
		table := newIndexTable(tc.completions, tc.pods, false)
		if (table.sparse != nil) != tc.sparse {
			t.Errorf("%s: sparse = %v, want %v", tc.name, table.sparse != nil, tc.sparse)
		}
		states := map[int32]*indexState{7: {}, 2: {}, 9: {}}
		for _, ix := range []int32{7, 2, 9} {
			table.set(ix, states[ix])
		}
		var seen []int32
		table.each(func(ix int32, st *indexState) {
			if st != states[ix] {
				t.Errorf("%s: index %d has another state", tc.name, ix)
			}
			seen = append(seen, ix)
		})
		if !tc.sparse && !slices.Equal(seen, []int32{2, 7, 9}) {
			t.Errorf("%s: each visited %v, want 2 7 9 in order", tc.name, seen)
		}
		if slices.Sort(seen); !slices.Equal(seen, []int32{2, 7, 9}) || table.len() != 3 {
			t.Errorf("%s: each visited %v (len %d), want 2 7 9", tc.name, seen, table.len())
		}
		if table.get(3) != nil || table.get(-1) != nil || table.get(1<<30) != nil {
			t.Errorf("%s: get found a state for an index without one", tc.name)
		}
	}

	table := newIndexTable(10, 3, false)
	table.set(4, &indexState{})
	table.set(12, &indexState{}) // past completions: never one of the job's, but no panic
	if table.sparse == nil || table.get(4) == nil || table.get(12) == nil || table.len() != 2 {
		t.Errorf("a table given an index past its slice: sparse %v, states at 4 and 12: %v %v, len %d",
			table.sparse != nil, table.get(4) != nil, table.get(12) != nil, table.len())
	}
}
