// Package plugin_test runs `kubectl ibj` against a real kube-apiserver
// (envtest) with no operator: each test writes a job, its status, its pods
// and events as the operator and a kubelet would have left them, at fixed
// times, runs the plugin's commands with a fixed clock, and compares their
// output with testdata/*.golden. `go test ./test/integration/plugin
// -update` rewrites the golden files.
package plugin_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/kubectlibj"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the commands' output")

// now is the plugin's clock in every test; the scripted pods, statuses and
// events are placed relative to it.
var now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

var (
	k8sClient  client.Client
	kubeconfig string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Println("skipping the kubectl ibj suite: KUBEBUILDER_ASSETS is not set (make test builds the control plane into bin/ and sets it)")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	scheme := runtime.NewScheme()
	must(clientgoscheme.AddToScheme(scheme))
	must(ibjv1.AddToScheme(scheme))
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	must(err)
	defer func() { must(env.Stop()) }()
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	must(err)
	dir, err := os.MkdirTemp("", "kubectl-ibj-")
	must(err)
	defer os.RemoveAll(dir)
	kubeconfig, err = harness.WriteAdminKubeconfig(env, "plugin-user", dir)
	must(err)
	return m.Run()
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// namespace creates a namespace of a fixed name, so that the output that
// shows it stays the same from run to run.
func namespace(t *testing.T, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return name
}

// kubectlIBJ runs `kubectl ibj args…` in the namespace with the fixed clock,
// as kubectl would run the plugin, and returns what a terminal would show:
// the command line, stdout, stderr, and the error kubectl-ibj's main prints.
func kubectlIBJ(t *testing.T, ns string, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := kubectlibj.NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, clocktesting.NewFakePassiveClock(now))
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...))
	err := cmd.ExecuteContext(context.Background())
	text := "$ kubectl ibj " + strings.Join(args, " ") + "\n" + out.String() + errOut.String()
	if err != nil {
		text += "error: " + err.Error() + "\n"
	}
	return text
}

// golden compares got with testdata/<name>.golden, or writes it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got); run with -update if the change is meant:\n%s", path, diff)
	}
}

// checkGolden runs each command and compares its output with
// testdata/<prefix>-<name>.golden, one subtest each.
func checkGolden(t *testing.T, ns, prefix string, commands []string) {
	t.Helper()
	for _, c := range commands {
		name, line, ok := strings.Cut(c, " = ")
		if !ok {
			t.Fatalf("golden command %q is not \"<golden file> = <command line>\"", c)
		}
		t.Run(name, func(t *testing.T) {
			golden(t, prefix+"-"+name, kubectlIBJ(t, ns, strings.Fields(line)...))
		})
	}
}
