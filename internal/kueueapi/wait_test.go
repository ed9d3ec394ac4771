package kueueapi

import (
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// The tests of WaitServed run against a real kube-apiserver (envtest),
// which serves a CRD's API a moment after the CRD is created and
// authorizes with RBAC, as a cluster does. Without KUBEBUILDER_ASSETS
// they skip; the unit tests of this package still run.
var (
	testEnv   *envtest.Environment
	adminCfg  *rest.Config // system:masters
	k8sClient client.Client
)

func TestMain(m *testing.M) {
	testEnv = &envtest.Environment{}
	os.Exit(harness.RunWithAPIServer(m, testEnv, func(cfg *rest.Config) error {
		adminCfg = cfg
		scheme := runtime.NewScheme()
		if err := apiextensionsv1.AddToScheme(scheme); err != nil {
			return err
		}
		var err error
		k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
		return err
	}))
}

func TestWaitServedReturnsOnceTheWorkloadCRDIsCreated(t *testing.T) {
	harness.SkipWithoutAPIServer(t)
	noWorkloadCRD(t)
	log := &recordedLog{}
	result := startWait(t, adminCfg, log)

	expectWaiting(t, result, 3*time.Second)
	createWorkloadCRD(t, "v1beta2")
	expectServed(t, result, log)
	if log.count("forbidden") != 0 {
		t.Errorf("the wait with the permission to watch CRDs logged a refusal:\n%s", log)
	}
}

func TestWaitServedChecksDiscoveryOnlyAfterTheCRDChanges(t *testing.T) {
	harness.SkipWithoutAPIServer(t)
	noWorkloadCRD(t)
	t.Log("starting with a Workload CRD whose versions are not the one the operator needs (an older Kueue)")
	crd := createWorkloadCRD(t, "v1beta1")
	d := &countingDiscovery{DiscoveryInterface: discoveryFor(t, adminCfg)}
	w := crdWait{discovery: d, crds: metadataFor(t, adminCfg), log: logr.Discard(),
		recheckEvery: 100 * time.Millisecond, recheckFor: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan bool, 1)
	go func() { result <- w.wait(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-result
	})

	t.Log("checking discovery after the informer's first list, for recheckFor")
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return d.calls.Load() > 0, nil }); err != nil {
		t.Fatal("discovery was never checked after the CRD was listed")
	}
	expectWaiting(t, result, 2*time.Second)
	quiet := d.calls.Load()
	expectWaiting(t, result, 3*time.Second)
	if calls := d.calls.Load(); calls != quiet {
		t.Fatalf("%d discovery requests while the CRD did not change, want none", calls-quiet)
	}

	t.Log("serving v1beta2 too: an update of the CRD")
	if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(crd), crd); err != nil {
		t.Fatal(err)
	}
	v := crd.Spec.Versions[0]
	v.Name, v.Storage = "v1beta2", false
	crd.Spec.Versions = append(crd.Spec.Versions, v)
	if err := k8sClient.Update(context.Background(), crd); err != nil {
		t.Fatal(err)
	}
	select {
	case served := <-result:
		if !served {
			t.Fatal("WaitServed returned false")
		}
		result <- served // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("WaitServed did not return within 30s of the CRD serving v1beta2")
	}
}

// fallbackLogged is what WaitServed logs when it falls back to polling.
const fallbackLogged = "Cannot watch CustomResourceDefinitions (forbidden): polling discovery"

func TestWaitServedPollsDiscoveryWhenCRDsAreForbidden(t *testing.T) {
	harness.SkipWithoutAPIServer(t)
	noWorkloadCRD(t)
	// No groups: RBAC grants it discovery (system:discovery, bound to every
	// authenticated user) and nothing on CRDs.
	user, err := testEnv.AddUser(envtest.User{Name: "no-crd-access"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	log := &recordedLog{}
	result := startWait(t, user.Config(), log)

	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return log.count(fallbackLogged) > 0, nil }); err != nil {
		t.Fatalf("no fallback logged:\n%s", log)
	}
	expectWaiting(t, result, time.Second)
	createWorkloadCRD(t, "v1beta2")
	expectServed(t, result, log)
	if n := log.count(fallbackLogged); n != 1 {
		t.Errorf("the fallback was logged %d times, want once:\n%s", n, log)
	}
}

func TestWaitServedReturnsFalseWhenCtxEnds(t *testing.T) {
	harness.SkipWithoutAPIServer(t)
	noWorkloadCRD(t)
	user, err := testEnv.AddUser(envtest.User{Name: "no-crd-access-either"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		cfg      *rest.Config
		fallback bool
	}{
		{"watching the CRD", adminCfg, false},
		{"polling discovery", user.Config(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, m := discoveryFor(t, tc.cfg), metadataFor(t, tc.cfg)
			log := &recordedLog{}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			result := make(chan bool, 1)
			go func() { result <- WaitServed(ctx, d, m, log.logger()) }()
			expectWaiting(t, result, 2*time.Second)
			if got := log.count(fallbackLogged) > 0; got != tc.fallback {
				t.Fatalf("fell back to polling: %v, want %v:\n%s", got, tc.fallback, log)
			}
			cancel()
			select {
			case served := <-result:
				if served {
					t.Error("WaitServed returned true with no Workload CRD")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("WaitServed did not return within 5s of its context ending")
			}
		})
	}
}

// startWait runs WaitServed as cfg's user, logging to log, and returns
// what it returns; it is stopped when the test ends.
func startWait(t *testing.T, cfg *rest.Config, log *recordedLog) chan bool {
	t.Helper()
	d, m := discoveryFor(t, cfg), metadataFor(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan bool, 1)
	go func() { result <- WaitServed(ctx, d, m, log.logger()) }()
	t.Cleanup(func() {
		cancel()
		<-result
	})
	return result
}

// expectWaiting fails the test if the wait returns within d.
func expectWaiting(t *testing.T, result chan bool, d time.Duration) {
	t.Helper()
	select {
	case served := <-result:
		result <- served // for the cleanup
		t.Fatalf("WaitServed returned %v with no Workload API served", served)
	case <-time.After(d):
	}
}

// expectServed waits for the wait to return true, within a bound far
// above what it takes (a functional bound, not a performance one).
func expectServed(t *testing.T, result chan bool, log *recordedLog) {
	t.Helper()
	start := time.Now()
	select {
	case served := <-result:
		result <- served // for the cleanup
		if !served {
			t.Fatalf("WaitServed returned false:\n%s", log)
		}
		t.Logf("WaitServed returned true %v after the CRD was created", time.Since(start).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatalf("WaitServed did not return within 30s of the Workload CRD's creation:\n%s", log)
	}
}

// createWorkloadCRD creates a minimal workloads.kueue.x-k8s.io serving
// version (its storage version) with an open schema.
func createWorkloadCRD(t *testing.T, version string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: workloadCRD},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: WorkloadGVK.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "workloads", Singular: "workload", Kind: WorkloadGVK.Kind, ListKind: WorkloadGVK.Kind + "List",
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
	if err := k8sClient.Create(context.Background(), crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

// noWorkloadCRD deletes the Workload CRD a test left, waits until
// discovery no longer serves its API, and has the test delete its own when
// it ends.
func noWorkloadCRD(t *testing.T) {
	t.Helper()
	deleteWorkloadCRD(t)
	t.Cleanup(func() { deleteWorkloadCRD(t) })
}

func deleteWorkloadCRD(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: workloadCRD}}
	if err := k8sClient.Delete(ctx, crd); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	d := discoveryFor(t, adminCfg)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(crd), crd); !apierrors.IsNotFound(err) {
			return false, nil
		}
		served, err := Served(d)
		return err == nil && !served, nil
	}); err != nil {
		t.Fatalf("the Workload CRD and its API should be gone: %v", err)
	}
}

func discoveryFor(t *testing.T, cfg *rest.Config) discovery.DiscoveryInterface {
	t.Helper()
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func metadataFor(t *testing.T, cfg *rest.Config) metadata.Interface {
	t.Helper()
	m, err := metadata.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// countingDiscovery counts the checks of Served.
type countingDiscovery struct {
	discovery.DiscoveryInterface
	calls atomic.Int64
}

func (d *countingDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	d.calls.Add(1)
	return d.DiscoveryInterface.ServerResourcesForGroupVersion(gv)
}

// recordedLog keeps what a logger wrote, the informer's logs included.
type recordedLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *recordedLog) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 1})
}

// count is the number of lines holding s.
func (l *recordedLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func (l *recordedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
