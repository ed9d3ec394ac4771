package controlplane_test

import (
	"context"
	"fmt"
	"net"
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

// envCommand runs a command with an environment variable set: a prefix
// whose effect the specs can see.
const envCommand = "env"

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
	// The pids name the processes running after the restarts.
	for name, pid := range map[string]int{controlplane.APIServer: cp.APIServerPid(), controlplane.Etcd: cp.EtcdPid()} {
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err != nil || !strings.Contains(string(cmdline), name) {
			t.Errorf("pid %d of %s runs %q (%v)", pid, name, cmdline, err)
		}
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

// As a node cluster runs a node's kubelet: in the node's namespace (under
// a prefix of its own), logging in the node's directory, and let go of
// when it is stopped on purpose.
func TestRunInCoversAProcessUntilForgotten(t *testing.T) {
	cp := startOrSkip(t, controlplane.Options{Prefix: []string{envCommand, "IBJ_UNDER_PREFIX=cp"}})
	if err := os.MkdirAll(filepath.Join(cp.Dir, "node-0"), 0o755); err != nil {
		t.Fatal(err)
	}
	kubelet, err := cp.RunIn([]string{envCommand, "IBJ_UNDER_PREFIX=node"}, "node-0/kubelet", "sh", "-c", `echo "$IBJ_UNDER_PREFIX"; exec sleep 600`)
	if err != nil {
		t.Fatal(err)
	}
	err = cp.WaitFor(context.Background(), "the process's line", 10*time.Second, func() bool {
		got, _ := os.ReadFile(filepath.Join(cp.Dir, "node-0", "kubelet.log"))
		return string(got) == "node\n"
	})
	if err != nil {
		t.Fatalf("a process RunIn under its own prefix, logging in node-0/kubelet.log: %v", err)
	}
	cp.Forget(kubelet)
	if err := kubelet.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cp.Check(); err != nil {
		t.Errorf("Check after a forgotten process was killed = %v, want nil", err)
	}
}

// hostAddress is a non-loopback IPv4 address of this host, off the node
// clusters' own interfaces; nil where there is none.
func hostAddress() net.IP {
	ifaces, _ := net.Interfaces()
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 || strings.HasPrefix(iface.Name, "ibj") {
			continue
		}
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.To4()
			}
		}
	}
	return nil
}

// As a node cluster runs it: kube-apiserver advertised on an address other
// than loopback (its serving certificate names it, and its endpoint
// reconciler publishes it), every process under a command prefix, and
// kube-scheduler as its own user with the bootstrap RBAC's rights only.
func TestControlPlaneOnAHostAddressUnderAPrefixWithASchedulerOfItsOwnUser(t *testing.T) {
	addr := hostAddress()
	if addr == nil {
		t.Skip("this host has no non-loopback IPv4 address")
	}
	scheduler := "system:kube-scheduler"
	cp := startOrSkip(t, controlplane.Options{
		Address: addr, BindAddress: net.IPv4zero, Prefix: []string{envCommand, "IBJ_UNDER_PREFIX=1"},
		Users: []controlplane.User{{Name: scheduler}}, Scheduler: &controlplane.Component{User: scheduler},
		// No kube-controller-manager makes the default service account.
		APIServerFlags: []string{"--disable-admission-plugins=ServiceAccount"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if want := "https://" + addr.String() + ":"; !strings.HasPrefix(cp.Server(), want) {
		t.Errorf("server %s, want %s...", cp.Server(), want)
	}
	admin := kubernetes.NewForConfigOrDie(cp.Config)
	endpoints, err := admin.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(endpoints.Subsets) != 1 || len(endpoints.Subsets[0].Addresses) != 1 || endpoints.Subsets[0].Addresses[0].IP != addr.String() {
		t.Errorf("the kubernetes Service's endpoints are %+v, want %s", endpoints.Subsets, addr)
	}
	// No node: the scheduler, as its own user, reports the pod unschedulable.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "waits", Namespace: "default"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "none"}}},
	}
	if _, err := admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = cp.WaitFor(ctx, "kube-scheduler to mark the pod unschedulable", time.Minute, func() bool {
		got, err := admin.CoreV1().Pods("default").Get(ctx, "waits", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Error(err)
	}

	marker := filepath.Join(cp.Dir, "prefix-marker")
	p, err := cp.Run("prefixed", "sh", "-c", `echo "$IBJ_UNDER_PREFIX" > "$0"`, marker)
	if err != nil {
		t.Fatal(err)
	}
	for exited, _ := p.Exited(); !exited; exited, _ = p.Exited() {
		time.Sleep(50 * time.Millisecond)
	}
	if got, err := os.ReadFile(marker); err != nil || string(got) != "1\n" {
		t.Errorf("a process Run under the prefix saw IBJ_UNDER_PREFIX=%q (%v), want 1", got, err)
	}
}
