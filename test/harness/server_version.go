package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// ServerVersionEnv names the environment variable through which
// `make test-compat` tells a suite which kube-apiserver version it means to
// run against (for example v1.33.13), so that a run meant for one end of the
// supported range cannot pass against a control plane of another version.
const ServerVersionEnv = "IBJ_K8S_VERSION"

// CheckServerVersion asks the API server at cfg for its version and returns
// it. When ServerVersionEnv is set and the server reports another version,
// it returns an error instead.
func CheckServerVersion(cfg *rest.Config) (string, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", err
	}
	info, err := dc.ServerVersion()
	if err != nil {
		return "", fmt.Errorf("asking the API server for its version: %w", err)
	}
	if want := os.Getenv(ServerVersionEnv); want != "" && info.GitVersion != want {
		return info.GitVersion, fmt.Errorf("the API server is %s, but %s=%s: KUBEBUILDER_ASSETS points at another control plane", info.GitVersion, ServerVersionEnv, want)
	}
	return info.GitVersion, nil
}

// WorkloadAPIMinor is the first Kubernetes minor whose kube-apiserver can
// serve the Workload API's scheduling.k8s.io/v1beta1 (gang scheduling).
const WorkloadAPIMinor = 37

// ControlPlaneMinor is the minor version of the kube-apiserver in dir (a
// KUBEBUILDER_ASSETS), from its --version, before it is started: a suite
// that needs a newer one than the control plane it was given skips, with
// the reason, rather than fail to start it.
func ControlPlaneMinor(dir string) (int, error) {
	out, err := exec.Command(filepath.Join(dir, "kube-apiserver"), "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("kube-apiserver --version: %w", err)
	}
	m := regexp.MustCompile(`v1\.(\d+)\.`).FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("kube-apiserver --version said %q", out)
	}
	return strconv.Atoi(string(m[1]))
}
