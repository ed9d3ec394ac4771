package main

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestBreakConfigReplacesOnlyAWorkloadContainersProcess holds the rewrite
// to what the node's fault must be: a workload container runs this program
// (which exits 1) with its own arguments after it, mounted from the host;
// a pod sandbox and a container the CRI plugin did not make are left as
// they were; every other field, numbers beyond float64's precision among
// them, is kept.
func TestBreakConfigReplacesOnlyAWorkloadContainersProcess(t *testing.T) {
	config := func(containerType string) string {
		annotations := `{}`
		if containerType != "" {
			annotations = `{"io.kubernetes.cri.container-type":"` + containerType + `"}`
		}
		return `{"ociVersion":"1.0.2","process":{"args":["/worker","--duration=5s"],"cwd":"/","user":{"uid":65532,"gid":65532}},` +
			`"mounts":[{"destination":"/proc","type":"proc","source":"proc"}],` +
			`"linux":{"resources":{"memory":{"limit":9223372036854771712}}},"annotations":` + annotations + `}`
	}
	cases := []struct {
		name        string
		config      string
		wantChanged bool
		want        string
	}{
		{
			name:        "a workload container",
			config:      config("container"),
			wantChanged: true,
			want: `{"annotations":{"io.kubernetes.cri.container-type":"container"},` +
				`"linux":{"resources":{"memory":{"limit":9223372036854771712}}},` +
				`"mounts":[{"destination":"/proc","source":"proc","type":"proc"},` +
				`{"destination":"/.ibj-faulty-runc","options":["rbind","ro","nosuid","nodev"],"source":"/host/bin/faulty-runc","type":"bind"}],` +
				`"ociVersion":"1.0.2",` +
				`"process":{"args":["/.ibj-faulty-runc","/worker","--duration=5s"],"cwd":"/","user":{"gid":65532,"uid":65532}}}`,
		},
		{name: "a pod sandbox", config: config("sandbox"), want: config("sandbox")},
		{name: "a container of no pod", config: config(""), want: config("")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, changed, err := breakConfig([]byte(tc.config), "/host/bin/faulty-runc")
			if err != nil {
				t.Fatal(err)
			}
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
			if !json.Valid(got) {
				t.Errorf("not JSON: %s", got)
			}
		})
	}
}

// rootFlag and stateDir are runc's global flag for its state directory,
// which the shim passes before the command, and a directory it names.
const rootFlag, stateDir = "--root", "/run/n/runc"

// TestBundleOfFindsTheBundleOfACreate reads the command lines containerd's
// runc shim sends: only a create or run names a bundle to rewrite.
func TestBundleOfFindsTheBundleOfACreate(t *testing.T) {
	cases := []struct {
		name       string
		args       []string
		want       string
		wantBundle bool
	}{
		{
			name: "create, as the shim calls it",
			args: []string{rootFlag, stateDir, "--log", "/b/log.json", "--log-format", "json", "create", "--bundle", "/b", "--pid-file", "/b/init.pid", "ctr1"},
			want: "/b", wantBundle: true,
		},
		{name: "run with -b=", args: []string{"run", "-b=/c", "ctr2"}, want: "/c", wantBundle: true},
		{name: "start", args: []string{rootFlag, stateDir, "start", "ctr3"}},
		{name: "kill", args: []string{rootFlag, stateDir, "kill", "ctr4", "9"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := bundleOf(tc.args)
			if ok != tc.wantBundle || got != tc.want {
				t.Errorf("bundleOf = %q, %v; want %q, %v", got, ok, tc.want, tc.wantBundle)
			}
		})
	}
}
