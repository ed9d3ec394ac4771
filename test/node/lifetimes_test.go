package node

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSecondPodsFindsAPodCreatedBeforeTheLastEnded holds the check of the
// podReplacementPolicy Failed specs to what it must catch: a pod created,
// in the watch's order, before an earlier pod of its index had reached a
// terminal phase (or, without one, its removal). It runs without a
// cluster.
func TestSecondPodsFindsAPodCreatedBeforeTheLastEnded(t *testing.T) {
	life := func(name, index string, created, ended, deleted int) podLife {
		return podLife{Name: name, Labels: map[string]string{indexLabel[ibjKind]: index},
			Created: moment{Seq: created}, Ended: moment{Seq: ended}, Deleted: moment{Seq: deleted}}
	}
	cases := []struct {
		name  string
		lives []podLife
		want  []string
	}{
		{name: "replaced after its Failed phase", lives: []podLife{life("a-0-0", "0", 1, 5, 6), life("a-0-1", "0", 7, 9, 0)}},
		{name: "replaced after its removal, with no terminal phase", lives: []podLife{life("a-0-0", "0", 1, 0, 4), life("a-0-1", "0", 5, 0, 0)}},
		{name: "other indexes overlap freely", lives: []podLife{life("a-0-0", "0", 1, 8, 0), life("a-1-0", "1", 2, 9, 0)}},
		{
			name:  "replaced while terminating",
			lives: []podLife{life("a-0-0", "0", 1, 6, 7), life("a-0-1", "0", 4, 9, 0)},
			want:  []string{"a-0-1 created while a-0-0 (index 0) had not ended"},
		},
		{
			name:  "replaced while it never ended",
			lives: []podLife{life("a-0-0", "0", 1, 0, 0), life("a-0-1", "0", 4, 0, 0)},
			want:  []string{"a-0-1 created while a-0-0 (index 0) had not ended"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, secondPods(ibjKind, tc.lives)); diff != "" {
				t.Errorf("secondPods (-want +got):\n%s", diff)
			}
		})
	}
}
