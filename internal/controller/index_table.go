package controller

// indexTable holds the state of each index that has a pod. A job whose
// indexes are not many more than its pods (completions up to four times
// its pods, or up to denseIndexes) keeps them in a slice by index, which a
// sync fills and reads without hashing; a job of few pods among very many
// indexes keeps them in a map.
type indexTable struct {
	dense  []*indexState
	sparse map[int32]*indexState
	n      int
}

// denseIndexes is how many indexes a job may have for its table to be a
// slice whatever its number of pods: a slice of this many pointers is a
// small allocation.
const denseIndexes = 4096

// newIndexTable makes the table of a job of completions indexes and pods
// pods. sparse makes it a map whatever the job's size, so that the tests of
// the decisions run them with both kinds (syncInput.sparseIndexes).
func newIndexTable(completions int32, pods int, sparse bool) indexTable {
	if !sparse && int64(completions) <= max(4*int64(pods), denseIndexes) {
		return indexTable{dense: make([]*indexState, max(completions, 0))}
	}
	return indexTable{sparse: make(map[int32]*indexState, pods)}
}

// get is the index's state, nil if it has no pod.
func (t *indexTable) get(ix int32) *indexState {
	if t.sparse != nil {
		return t.sparse[ix]
	}
	if ix < 0 || int(ix) >= len(t.dense) {
		return nil
	}
	return t.dense[ix]
}

// set gives the index, which has none yet, its state. An index past the
// slice (none of the job's indexes is) moves the table to a map rather
// than fail.
func (t *indexTable) set(ix int32, st *indexState) {
	if t.sparse == nil && (ix < 0 || int(ix) >= len(t.dense)) {
		t.sparse = make(map[int32]*indexState, t.n+1)
		for i, s := range t.dense {
			if s != nil {
				t.sparse[int32(i)] = s
			}
		}
		t.dense = nil
	}
	if t.sparse != nil {
		t.sparse[ix] = st
	} else {
		t.dense[ix] = st
	}
	t.n++
}

// len is how many indexes have a state.
func (t *indexTable) len() int { return t.n }

// each calls f with every index that has a state, ascending for a slice,
// in no order for a map.
func (t *indexTable) each(f func(ix int32, st *indexState)) {
	if t.sparse != nil {
		for ix, st := range t.sparse {
			f(ix, st)
		}
		return
	}
	for ix, st := range t.dense {
		if st != nil {
			f(int32(ix), st)
		}
	}
}
