package workloadapi

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestIsNotServed(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{name: "no error", err: nil},
		{name: "no REST mapping for the kind", err: fmt.Errorf("creating: %w", &meta.NoKindMatchError{GroupKind: WorkloadGVK.GroupKind()}), want: true},
		{name: "the resource path is missing (404 naming no object)", err: apierrors.NewNotFound(schema.GroupResource{}, ""), want: true},
		{name: "an object is missing", err: apierrors.NewNotFound(schema.GroupResource{Group: "scheduling.k8s.io", Resource: "podgroups"}, "a")},
		{name: "forbidden", err: apierrors.NewForbidden(schema.GroupResource{Resource: "podgroups"}, "a", errors.New("RBAC"))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsNotServed(tc.err); got != tc.want {
				t.Errorf("IsNotServed(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestGangMinCountRoundTrips(t *testing.T) {
	policy := SchedulingPolicy{Gang: &GangSchedulingPolicy{MinCount: 4}}
	wl, err := Unstructured(&Workload{Spec: WorkloadSpec{PodGroupTemplates: []PodGroupTemplate{{Name: "workers", SchedulingPolicy: policy}}}}, WorkloadGVK)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := Unstructured(&PodGroup{Spec: PodGroupSpec{SchedulingPolicy: policy}}, PodGroupGVK)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []struct {
		kind string
		n    func() (int64, bool)
		set  func(int32) error
	}{
		{"Workload", func() (int64, bool) { return GangMinCount(wl) }, func(n int32) error { return SetGangMinCount(wl, n) }},
		{"PodGroup", func() (int64, bool) { return GangMinCount(pg) }, func(n int32) error { return SetGangMinCount(pg, n) }},
	} {
		if n, ok := obj.n(); !ok || n != 4 {
			t.Errorf("%s: minCount = %d, %v; want 4", obj.kind, n, ok)
		}
		if err := obj.set(2); err != nil {
			t.Fatalf("%s: %v", obj.kind, err)
		}
		if n, ok := obj.n(); !ok || n != 2 {
			t.Errorf("%s: minCount after setting 2 = %d, %v", obj.kind, n, ok)
		}
	}
}
