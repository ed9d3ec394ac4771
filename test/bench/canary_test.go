package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// The canary is ready only once the deployment controller has seen the
// new replicas and every one of them is Ready; scaled to 0, once none is
// left.
func TestCanaryReadyWaitsForEveryReplicaOfTheNewSpec(t *testing.T) {
	deployment := func(generation, observed int64, replicas, have, ready int32) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Generation: generation},
			Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(replicas)},
			Status:     appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: have, ReadyReplicas: ready},
		}
	}
	for _, tc := range []struct {
		name string
		d    *appsv1.Deployment
		want int32
		ok   bool
	}{
		{"every replica ready", deployment(2, 2, 50, 50, 50), 50, true},
		{"some not ready yet", deployment(2, 2, 50, 50, 49), 50, false},
		{"status of the old spec", deployment(2, 1, 50, 0, 0), 0, false},
		{"spec not yet scaled", deployment(1, 1, 0, 0, 0), 50, false},
		{"scaled down, pods left", deployment(3, 3, 0, 2, 0), 0, false},
		{"scaled down, none left", deployment(3, 3, 0, 0, 0), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := canaryReady(tc.d, tc.want); got != tc.ok {
				t.Errorf("canaryReady(%d) = %v, want %v", tc.want, got, tc.ok)
			}
		})
	}
}

// The FlowSchema the benchmark installs with -flowschema is the shipped
// one, and it matches the user the benchmark runs the operator as: its
// ServiceAccount, sent to the shipped priority level.
func TestTheShippedFlowSchemaMatchesTheBenchmarksOperator(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", flowControlFile))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := flowControlObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	var fs flowcontrolv1.FlowSchema
	var pl flowcontrolv1.PriorityLevelConfiguration
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
		into := map[string]any{"FlowSchema": &fs, "PriorityLevelConfiguration": &pl}[o.GetKind()]
		if into == nil {
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{"PriorityLevelConfiguration", "FlowSchema"}, kinds); diff != "" {
		t.Fatalf("kinds (-want +got):\n%s", diff)
	}
	if fs.Spec.PriorityLevelConfiguration.Name != pl.Name || pl.Spec.Type != flowcontrolv1.PriorityLevelEnablementLimited {
		t.Errorf("FlowSchema %s sends to %q, the priority level is %q (%s)", fs.Name, fs.Spec.PriorityLevelConfiguration.Name, pl.Name, pl.Spec.Type)
	}
	var users []string
	for _, rule := range fs.Spec.Rules {
		for _, s := range rule.Subjects {
			if s.ServiceAccount != nil {
				users = append(users, "system:serviceaccount:"+s.ServiceAccount.Namespace+":"+s.ServiceAccount.Name)
			}
		}
	}
	if diff := cmp.Diff([]string{operatorSA}, users); diff != "" {
		t.Errorf("the FlowSchema's service accounts against the benchmark's operator (-want +got):\n%s", diff)
	}
}
