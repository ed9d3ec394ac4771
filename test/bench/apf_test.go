package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The audit policy names both users, quoted, and auditCount counts a
// user's requests and the 429s among them, whatever the other user sends.
func TestAuditCountsAUsersRequestsAnd429s(t *testing.T) {
	policy := auditPolicy(operatorSA, kcmSelf)
	if !strings.Contains(policy, `users: ["`+operatorSA+`", "system:kube-controller-manager"]`) {
		t.Errorf("policy does not name both users:\n%s", policy)
	}
	log := strings.Join([]string{
		`{"verb":"create","user":{"username":"` + operatorSA + `"},"objectRef":{"resource":"pods"},"responseStatus":{"code":201}}`,
		`{"verb":"create","user":{"username":"` + operatorSA + `"},"objectRef":{"resource":"pods"},"responseStatus":{"code":429}}`,
		`{"verb":"patch","user":{"username":"` + operatorSA + `"},"objectRef":{"resource":"pods"},"responseStatus":{"code":429}}`,
		`{"verb":"create","user":{"username":"system:kube-controller-manager"},"objectRef":{"resource":"pods"},"responseStatus":{"code":429}}`,
	}, "\n") + "\n"
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	n, verbs, throttled := auditCount(path, 0, operatorSA)
	if n != 3 || throttled != 2 || verbs["create pods"] != 2 || verbs["patch pods"] != 1 {
		t.Errorf("operator: %d requests (%v), %d throttled; want 3 (2 creates, 1 patch), 2", n, verbs, throttled)
	}
	if n, _, throttled := auditCount(path, 0, kcmSelf); n != 1 || throttled != 1 {
		t.Errorf("kcm: %d requests, %d throttled; want 1, 1", n, throttled)
	}
}

// The hold bound is the lowest bucket holding every observation, read
// from the histogram named.
func TestFinalizerHoldBound(t *testing.T) {
	text := func(name string, counts ...string) string {
		les := []string{"1", "30", "35", "+Inf"}
		var b strings.Builder
		for i, le := range les {
			b.WriteString(name + `_bucket{le="` + le + `"} ` + counts[i] + "\n")
		}
		b.WriteString(name + "_count " + counts[len(counts)-1] + "\n")
		return b.String()
	}
	for _, tc := range []struct {
		text string
		want string
	}{
		{text(holdMetric, "0", "0", "0", "0"), "—"},
		{text(holdMetric, "5", "9", "9", "9"), "30"},
		{text(holdMetric, "5", "8", "9", "9"), "35"},
		{text(holdMetric, "5", "8", "8", "9"), "> 35"},
		{text(holdMetric, "5", "8", "8", "9") + text(waitMetric, "9", "9", "9", "9"), "> 35 / 1"},
	} {
		got := holdBound(finalizerHoldBound(tc.text, holdMetric))
		if strings.Contains(tc.want, " / ") {
			got += " / " + holdBound(finalizerHoldBound(tc.text, waitMetric))
		}
		if got != tc.want {
			t.Errorf("bound of\n%s= %s, want %s", tc.text, got, tc.want)
		}
		// results.json keeps it, past the highest bucket too.
		r := result{FinalizerHoldBound: finalizerHoldBound(tc.text, holdMetric)}
		data, err := json.Marshal(r)
		var back result
		if err == nil {
			err = json.Unmarshal(data, &back)
		}
		if err != nil || back.FinalizerHoldBound != r.FinalizerHoldBound {
			t.Errorf("through JSON, %v became %v (%v)", r.FinalizerHoldBound, back.FinalizerHoldBound, err)
		}
	}
}

// The requests of the canary's controllers, which run as
// system:kube-controller-manager too, are not the built-in Job
// controller's.
func TestAuditCountLeavesOutTheCanarysControllers(t *testing.T) {
	event := func(agent, verb, resource string) string {
		return `{"verb":"` + verb + `","user":{"username":"` + kcmSelf + `"},"userAgent":"kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc/` + agent +
			`","objectRef":{"resource":"` + resource + `"},"responseStatus":{"code":201}}`
	}
	log := strings.Join([]string{
		event("job-controller", "create", "pods"),
		event("replicaset-controller", "create", "pods"),
		event("deployment-controller", "update", "deployments"),
		event("job-controller", "patch", "pods"),
	}, "\n") + "\n"
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	n, verbs, _ := auditCount(path, 0, kcmSelf, canaryAgents...)
	if n != 2 || verbs["create pods"] != 1 || verbs["patch pods"] != 1 {
		t.Errorf("%d requests (%v); want the job controller's 2: a create and a patch", n, verbs)
	}
}

// kube-apiserver's counters: every request, the writes among them, what
// each priority level dispatched and the 429s, and their change over a run.
func TestServerLoadCountsRequestsWritesAndPriorityLevels(t *testing.T) {
	text := func(posts, lists, dispatched, rejected string) string {
		return strings.Join([]string{
			`# HELP apiserver_request_total [STABLE] Counter of apiserver requests`,
			`apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} ` + posts,
			`apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PUT",version="v1"} 10`,
			`apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} ` + lists,
			`apiserver_request_total{code="429",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PATCH",version="v1"} 2`,
			`apiserver_flowcontrol_dispatched_requests_total{flow_schema="indexed-batch-job",priority_level="indexed-batch-job"} ` + dispatched,
			`apiserver_flowcontrol_dispatched_requests_total{flow_schema="kube-controller-manager",priority_level="workload-high"} 7`,
			`apiserver_flowcontrol_rejected_requests_total{flow_schema="service-accounts",priority_level="workload-low",reason="queue-full"} ` + rejected,
		}, "\n") + "\n"
	}
	var before, after serverLoad
	before.count(text("100", "3", "50", "0"))
	after.count(text("400", "5", "350", "4"))
	want := serverLoad{Requests: 115, Writes: 112, Dispatched: map[string]float64{"indexed-batch-job": 50, "workload-high": 7}}
	if diff := cmp.Diff(want, before); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	after.APIServerCPU, before.APIServerCPU = 12.5, 2.5
	want = serverLoad{APIServerCPU: 10, Requests: 302, Writes: 300, Dispatched: map[string]float64{"indexed-batch-job": 300}, Rejected: 4}
	if diff := cmp.Diff(want, after.minus(before)); diff != "" {
		t.Errorf("over the run (-want +got):\n%s", diff)
	}
}

func TestAPFModeNamesHowTheControllersRan(t *testing.T) {
	for want, r := range map[string]result{
		"exempt":              {},
		"default FlowSchemas": {APF: true},
		"shipped FlowSchema":  {APF: true, FlowSchema: true},
	} {
		if got := r.apfMode(); got != want {
			t.Errorf("%+v: %q, want %q", r, got, want)
		}
	}
}
