package kueueapi

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
)

func TestServed(t *testing.T) {
	cases := []struct {
		name      string
		resources []*metav1.APIResourceList
		want      bool
	}{
		{"no Kueue", nil, false},
		{"Workloads served", []*metav1.APIResourceList{{
			GroupVersion: "kueue.x-k8s.io/v1beta2",
			APIResources: []metav1.APIResource{
				{Name: "clusterqueues", Kind: "ClusterQueue"},
				{Name: "workloads", Kind: "Workload"},
				{Name: "workloads/status", Kind: "Workload"},
			},
		}}, true},
		{"only an older version", []*metav1.APIResourceList{{
			GroupVersion: "kueue.x-k8s.io/v1beta1",
			APIResources: []metav1.APIResource{{Name: "workloads", Kind: "Workload"}},
		}}, false},
		{"the group version without Workloads", []*metav1.APIResourceList{{
			GroupVersion: "kueue.x-k8s.io/v1beta2",
			APIResources: []metav1.APIResource{{Name: "workloads/status", Kind: "Workload"}},
		}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: tc.resources}}
			got, err := Served(d)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Served = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCheckMode(t *testing.T) {
	for _, mode := range []string{ModeAuto, ModeEnabled, ModeDisabled} {
		if err := CheckMode(mode); err != nil {
			t.Errorf("CheckMode(%q) = %v", mode, err)
		}
	}
	if err := CheckMode("on"); err == nil || err.Error() != `--kueue must be auto, enabled or disabled, not "on"` {
		t.Errorf("CheckMode(on) = %v", err)
	}
}
