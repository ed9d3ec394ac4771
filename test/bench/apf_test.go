package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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

// The hold bound is the lowest bucket holding every observation.
func TestFinalizerHoldBound(t *testing.T) {
	const name = "indexedbatchjob_counted_finalizer_hold_seconds"
	text := func(counts ...string) string {
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
		{text("0", "0", "0", "0"), "—"},
		{text("5", "9", "9", "9"), "30"},
		{text("5", "8", "9", "9"), "35"},
		{text("5", "8", "8", "9"), "> 300"},
	} {
		if got := holdBound(result{FinalizerHoldBound: finalizerHoldBound(tc.text)}); got != tc.want {
			t.Errorf("bound of\n%s= %s, want %s", tc.text, got, tc.want)
		}
	}
}
