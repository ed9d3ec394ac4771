package harness

import (
	"fmt"
	"os"

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
