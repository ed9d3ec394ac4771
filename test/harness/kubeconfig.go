package harness

import (
	"os"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// WriteAdminKubeconfig adds a user of group system:masters to an envtest
// control plane and writes its kubeconfig to dir/kubeconfig, for programs
// that run as processes of their own or read a kubeconfig as a user's tools
// do (kubectl, kubectl-ibj). It returns the file's path.
func WriteAdminKubeconfig(env *envtest.Environment, user, dir string) (string, error) {
	u, err := env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	data, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, data, 0o600)
}
