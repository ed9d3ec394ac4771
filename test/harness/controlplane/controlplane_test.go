package controlplane_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
)

// startOrSkip starts a control plane of the pinned binaries, or skips
// where they are not built.
func startOrSkip(t *testing.T, opts controlplane.Options) *controlplane.ControlPlane {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	opts.BinDir = controlplane.BinDir(root)
	for _, bin := range []string{controlplane.Etcd, controlplane.APIServer} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, bin)); err != nil {
			t.Skipf("no %s in %s: hack/build-controlplane.sh builds it", bin, opts.BinDir)
		}
	}
	opts.Dir = t.TempDir()
	opts.CRDPaths = []string{filepath.Join(root, "config", "crd", "bases")}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	return cp
}

func TestControlPlaneAuthenticatesItsUsersAndKeepsDataAcrossRestarts(t *testing.T) {
	cp := startOrSkip(t, controlplane.Options{Users: []controlplane.User{{Name: "alice", Groups: []string{"team-a"}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	alice := kubernetes.NewForConfigOrDie(cp.UserConfig("alice"))
	review, err := alice.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := review.Status.UserInfo; u.Username != "alice" || !slices.Contains(u.Groups, "team-a") {
		t.Errorf("alice is seen as %s in %v", u.Username, u.Groups)
	}
	if _, err := alice.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice, bound to no role, lists namespaces: %v", err)
	}

	// The admin's kubeconfig file, as kubectl and the operator read it.
	fromFile, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(fromFile)
	if _, err := admin.Discovery().ServerResourcesForGroupVersion("batch.indexedjob.dev/v1alpha1"); err != nil {
		t.Errorf("the CRD is not served: %v", err)
	}
	kept := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: "default"}, Data: map[string]string{"a": "b"}}
	if _, err := admin.CoreV1().ConfigMaps("default").Create(ctx, kept, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cp.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cp.RestartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := admin.CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{})
	if err != nil || got.Data["a"] != "b" {
		t.Errorf("after restarting kube-apiserver and etcd, the ConfigMap is %v, %v", got, err)
	}
	if !strings.HasPrefix(cp.Server(), "https://127.0.0.1:") {
		t.Errorf("server %s, want loopback", cp.Server())
	}
}

func TestRunCoversAProcessInCheckAndStop(t *testing.T) {
	cp := startOrSkip(t, controlplane.Options{})
	sleeper, err := cp.Run("sleeper", "sleep", "600")
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Check(); err != nil {
		t.Fatalf("a running cluster fails its check: %v", err)
	}
	if err := sleeper.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cp.Check(); err == nil || !strings.Contains(err.Error(), "sleeper exited") {
		t.Errorf("Check after the process died = %v, want it named", err)
	}
}
