// Package multikueue starts Kueue's MultiKueue on local clusters: a manager
// cluster and worker clusters (each a kwokcluster with its garbage
// collector), Kueue's released manager and the operator on each, and the
// wiring Kueue documents: on each worker a ServiceAccount for MultiKueue
// with the roles it needs, on the manager a Secret holding a kubeconfig
// with that ServiceAccount's token, a MultiKueueCluster per worker, a
// MultiKueueConfig and an AdmissionCheck. Queues reports the queues a
// namespace's jobs use. The MultiKueue suite and `make demo-multikueue` use
// it.
package multikueue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/yaml"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kueuecluster"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/manifests"
)

// Names of the MultiKueue objects on the manager.
const (
	// AdmissionCheck is the manager's MultiKueue AdmissionCheck.
	AdmissionCheck = "multikueue"
	// Config is the MultiKueueConfig listing every worker.
	Config = "multikueue"
	// Origin is the manager's multiKueue.origin: the label value its
	// remote objects carry.
	Origin = "ibj-multikueue"
	// WorkerServiceAccount is the ServiceAccount MultiKueue acts as on a
	// worker, in Kueue's namespace.
	WorkerServiceAccount = "multikueue-sa"
)

// Options configure Start.
type Options struct {
	// Root is the repository root. Required.
	Root string
	// Dir receives one directory per cluster. Required.
	Dir string
	// KueueBinary is Kueue's manager (`make kueue-manager`). Required.
	KueueBinary string
	// OperatorBinary is the operator (bin/manager). Required.
	OperatorBinary string
	// Workers is the number of worker clusters; default 2.
	Workers int
	// WorkerLostTimeout is the manager's multiKueue.workerLostTimeout: how
	// long a workload stays on a worker that cannot be reached before it is
	// dispatched again; default 30 s (Kueue's default is 15 min).
	WorkerLostTimeout time.Duration
	// KueueConfig is YAML added to every Kueue's Configuration (the
	// manager's multiKueue section is added to the manager's).
	KueueConfig string
	// Progress, if set, receives a line per step.
	Progress io.Writer
}

// Member is one cluster with Kueue and the operator running on it.
type Member struct {
	// Name is "manager", "worker-1", ...
	Name string
	// Cluster is the cluster.
	Cluster *kwokcluster.Cluster
	// Kueue is Kueue's manager on it.
	Kueue *kueuecluster.Manager
	// Operator is the operator's process on it.
	Operator *controlplane.Process
	// Client is the cluster's admin, with IndexedBatchJobs and Kueue's API
	// in its scheme.
	Client client.Client
}

// Federation is the manager cluster and its workers.
type Federation struct {
	Manager *Member
	Workers []*Member
}

// Members is the manager, then the workers.
func (f *Federation) Members() []*Member {
	return append([]*Member{f.Manager}, f.Workers...)
}

// Scheme has what Member.Client reads.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	return s, errors.Join(clientgoscheme.AddToScheme(s), ibjv1.AddToScheme(s), kueuev1beta2.AddToScheme(s))
}

// Start starts the clusters, Kueue and the operators, and wires MultiKueue;
// it returns once every MultiKueueCluster is Active and the AdmissionCheck
// too. On error what was started is stopped.
func Start(ctx context.Context, o Options) (f *Federation, err error) {
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.WorkerLostTimeout <= 0 {
		o.WorkerLostTimeout = 30 * time.Second
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	step := func(format string, args ...any) { _, _ = fmt.Fprintf(progress, format+"\n", args...) }
	f = &Federation{}
	defer func() {
		if err != nil {
			_ = f.Stop(context.Background())
			f = nil
		}
	}()
	if err := f.startMembers(ctx, o, progress); err != nil {
		return f, err
	}
	step("wiring MultiKueue: the manager's Kueue may manage IndexedBatchJobs, MultiKueue's ServiceAccount on each worker")
	if err := f.wire(ctx, o.Root); err != nil {
		return f, err
	}
	step("waiting for the workers to be Active and the AdmissionCheck too")
	return f, f.waitActive(ctx)
}

// startMembers starts the manager cluster and the workers, each with its
// Kueue and operator; the manager's Kueue runs MultiKueue.
func (f *Federation) startMembers(ctx context.Context, o Options, progress io.Writer) error {
	managerConfig := fmt.Sprintf(`multiKueue:
  gcInterval: 30s
  origin: %s
  workerLostTimeout: %s
  externalFrameworks:
  - name: IndexedBatchJob.v1alpha1.batch.indexedjob.dev
`, Origin, o.WorkerLostTimeout)
	names := make([]string, 0, 1+o.Workers)
	names = append(names, "manager")
	for i := range o.Workers {
		names = append(names, "worker-"+strconv.Itoa(i+1))
	}
	for i, name := range names {
		config := o.KueueConfig
		if i == 0 {
			config += managerConfig
		}
		_, _ = fmt.Fprintf(progress, "starting cluster %s\n", name)
		m, err := startMember(ctx, o, name, config, progress)
		if m != nil {
			if i == 0 {
				f.Manager = m
			} else {
				f.Workers = append(f.Workers, m)
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// wire wires MultiKueue as Kueue documents it: the manager's Kueue may
// manage IndexedBatchJobs; a Secret with a kubeconfig of MultiKueue's
// ServiceAccount on each worker and a MultiKueueCluster naming it; a
// MultiKueueConfig of every worker and the AdmissionCheck using it.
func (f *Federation) wire(ctx context.Context, root string) error {
	if err := applyManifest(ctx, f.Manager.Client, filepath.Join(root, "config", "multikueue", "manager", "role.yaml"), func(obj client.Object) {
		if b, ok := obj.(*rbacv1.ClusterRoleBinding); ok {
			b.Subjects[0].Namespace = kueuecluster.Namespace
		}
	}); err != nil {
		return err
	}
	var clusters []string
	for _, w := range f.Workers {
		kubeconfig, err := workerKubeconfig(ctx, root, w)
		if err != nil {
			return fmt.Errorf("%s: %w", w.Name, err)
		}
		for _, obj := range []client.Object{
			&corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: kueuecluster.Namespace},
				Data:       map[string][]byte{"kubeconfig": kubeconfig},
			},
			&kueuev1beta2.MultiKueueCluster{
				ObjectMeta: metav1.ObjectMeta{Name: w.Name},
				Spec: kueuev1beta2.MultiKueueClusterSpec{ClusterSource: kueuev1beta2.ClusterSource{
					KubeConfig: &kueuev1beta2.KubeConfig{LocationType: kueuev1beta2.SecretLocationType, Location: w.Name},
				}},
			},
		} {
			if err := f.Manager.Client.Create(ctx, obj); err != nil {
				return err
			}
		}
		clusters = append(clusters, w.Name)
	}
	if err := f.Manager.Client.Create(ctx, &kueuev1beta2.MultiKueueConfig{
		ObjectMeta: metav1.ObjectMeta{Name: Config},
		Spec:       kueuev1beta2.MultiKueueConfigSpec{Clusters: clusters},
	}); err != nil {
		return err
	}
	return f.Manager.Client.Create(ctx, &kueuev1beta2.AdmissionCheck{
		ObjectMeta: metav1.ObjectMeta{Name: AdmissionCheck},
		Spec: kueuev1beta2.AdmissionCheckSpec{
			ControllerName: kueuev1beta2.MultiKueueControllerName,
			Parameters: &kueuev1beta2.AdmissionCheckParametersReference{
				APIGroup: kueuev1beta2.SchemeGroupVersion.Group, Kind: "MultiKueueConfig", Name: Config,
			},
		},
	})
}

// startMember starts one cluster, its Kueue and its operator.
func startMember(ctx context.Context, o Options, name, kueueConfig string, progress io.Writer) (*Member, error) {
	c, err := kwokcluster.Start(ctx, kwokcluster.Options{
		Root: o.Root, Dir: filepath.Join(o.Dir, name), Nodes: 2, GarbageCollector: true, Progress: progress,
	})
	if err != nil {
		return nil, err
	}
	m := &Member{Name: name, Cluster: c}
	s, err := Scheme()
	if err != nil {
		return m, err
	}
	if m.Client, err = client.New(c.Config, client.Options{Scheme: s}); err != nil {
		return m, err
	}
	if m.Kueue, err = kueuecluster.Install(ctx, c, kueuecluster.Options{Binary: o.KueueBinary, Config: kueueConfig}); err != nil {
		return m, err
	}
	// A 1 s pod failure backoff keeps retries short.
	m.Operator, err = c.StartOperator(ctx, o.OperatorBinary, "--pod-failure-backoff=1s", "--pod-failure-backoff-max=4s")
	return m, err
}

// workerKubeconfig creates MultiKueue's ServiceAccount on w with the roles
// it needs there (Kueue's Workloads, and config/multikueue/worker/role.yaml
// for IndexedBatchJobs), and returns a kubeconfig with a token of it, in
// the form Kueue accepts: the CA inline, a bearer token, no file path.
func workerKubeconfig(ctx context.Context, root string, w *Member) ([]byte, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: WorkerServiceAccount, Namespace: kueuecluster.Namespace}}
	if err := w.Client.Create(ctx, sa); err != nil {
		return nil, err
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: WorkerServiceAccount, Namespace: kueuecluster.Namespace}}
	const verbGet = "get"
	// What Kueue's documentation grants MultiKueue on a worker.
	workloads := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "multikueue-workloads"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{kueuev1beta2.SchemeGroupVersion.Group}, Resources: []string{"workloads"}, Verbs: []string{"create", "delete", verbGet, "list", "watch", "update", "patch"}},
			{APIGroups: []string{kueuev1beta2.SchemeGroupVersion.Group}, Resources: []string{"workloads/status"}, Verbs: []string{verbGet, "update", "patch"}},
			// MultiKueue watches, on each worker, every kind the manager's
			// Kueue integrates: batch/v1 Jobs among them.
			{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"create", "delete", verbGet, "list", "watch"}},
			{APIGroups: []string{"batch"}, Resources: []string{"jobs/status"}, Verbs: []string{verbGet}},
		},
	}
	if err := w.Client.Create(ctx, workloads); err != nil {
		return nil, err
	}
	if err := w.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "multikueue-workloads"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: workloads.Name},
		Subjects:   subjects,
	}); err != nil {
		return nil, err
	}
	if err := applyManifest(ctx, w.Client, filepath.Join(root, "config", "multikueue", "worker", "role.yaml"), func(obj client.Object) {
		if b, ok := obj.(*rbacv1.ClusterRoleBinding); ok {
			b.Subjects = subjects
		}
	}); err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(w.Cluster.Config)
	if err != nil {
		return nil, err
	}
	token, err := cs.CoreV1().ServiceAccounts(kueuecluster.Namespace).CreateToken(ctx, WorkerServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}},
		metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("a token for %s: %w", WorkerServiceAccount, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[w.Name] = &clientcmdapi.Cluster{Server: w.Cluster.Config.Host, CertificateAuthorityData: w.Cluster.Config.CAData}
	cfg.AuthInfos[WorkerServiceAccount] = &clientcmdapi.AuthInfo{Token: token.Status.Token}
	cfg.Contexts[w.Name] = &clientcmdapi.Context{Cluster: w.Name, AuthInfo: WorkerServiceAccount}
	cfg.CurrentContext = w.Name
	return clientcmd.Write(*cfg)
}

// applyManifest creates each object of the YAML file at path (ClusterRoles
// and ClusterRoleBindings), after edit.
func applyManifest(ctx context.Context, c client.Client, path string, edit func(client.Object)) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	docs, err := manifests.Documents(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, doc := range docs {
		var kind metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &kind); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		var obj client.Object
		switch kind.Kind {
		case "ClusterRole":
			obj = &rbacv1.ClusterRole{}
		case "ClusterRoleBinding":
			obj = &rbacv1.ClusterRoleBinding{}
		default:
			return fmt.Errorf("%s: unexpected kind %q", path, kind.Kind)
		}
		if err := yaml.Unmarshal(doc, obj); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		edit(obj)
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

// waitActive waits up to two minutes for every MultiKueueCluster and the
// AdmissionCheck to be Active.
func (f *Federation) waitActive(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		err := f.checkActive(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v\nthe manager's Kueue:\n%s", ctx.Err(), err, f.Manager.Kueue.Tail(30))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// checkActive returns why a worker or the AdmissionCheck is not Active.
func (f *Federation) checkActive(ctx context.Context) error {
	for _, w := range f.Workers {
		mkc := &kueuev1beta2.MultiKueueCluster{}
		if err := f.Manager.Client.Get(ctx, client.ObjectKey{Name: w.Name}, mkc); err != nil {
			return err
		}
		if c := apimeta.FindStatusCondition(mkc.Status.Conditions, kueuev1beta2.MultiKueueClusterActive); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("MultiKueueCluster %s not Active: %+v", w.Name, c)
		}
	}
	ac := &kueuev1beta2.AdmissionCheck{}
	if err := f.Manager.Client.Get(ctx, client.ObjectKey{Name: AdmissionCheck}, ac); err != nil {
		return err
	}
	if c := apimeta.FindStatusCondition(ac.Status.Conditions, kueuev1beta2.AdmissionCheckActive); c == nil || c.Status != metav1.ConditionTrue {
		return fmt.Errorf("AdmissionCheck %s not Active: %+v", AdmissionCheck, c)
	}
	return nil
}

// Queues creates namespace on every cluster with, on each, a
// ResourceFlavor, a ClusterQueue (its nominal CPU cpu) and a LocalQueue,
// all named after the namespace; the manager's ClusterQueue has the
// MultiKueue AdmissionCheck unless local, which makes the namespace's
// queue one MultiKueue leaves alone. It returns once each ClusterQueue is
// Active.
func (f *Federation) Queues(ctx context.Context, namespace, cpu string, local bool) error {
	for _, m := range f.Members() {
		var checks *kueuev1beta2.AdmissionChecksStrategy
		if m == f.Manager && !local {
			checks = &kueuev1beta2.AdmissionChecksStrategy{AdmissionChecks: []kueuev1beta2.AdmissionCheckStrategyRule{{Name: AdmissionCheck}}}
		}
		for _, obj := range []client.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
			&kueuev1beta2.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
			&kueuev1beta2.ClusterQueue{
				ObjectMeta: metav1.ObjectMeta{Name: namespace},
				Spec: kueuev1beta2.ClusterQueueSpec{
					NamespaceSelector: &metav1.LabelSelector{},
					ResourceGroups: []kueuev1beta2.ResourceGroup{{
						CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
						Flavors: []kueuev1beta2.FlavorQuotas{{
							Name:      kueuev1beta2.ResourceFlavorReference(namespace),
							Resources: []kueuev1beta2.ResourceQuota{{Name: corev1.ResourceCPU, NominalQuota: resource.MustParse(cpu)}},
						}},
					}},
					AdmissionChecksStrategy: checks,
				},
			},
			&kueuev1beta2.LocalQueue{
				ObjectMeta: metav1.ObjectMeta{Name: namespace, Namespace: namespace},
				Spec:       kueuev1beta2.LocalQueueSpec{ClusterQueue: kueuev1beta2.ClusterQueueReference(namespace)},
			},
		} {
			if err := m.Client.Create(ctx, obj); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, m := range f.Members() {
		for {
			cq := &kueuev1beta2.ClusterQueue{}
			err := m.Client.Get(ctx, client.ObjectKey{Name: namespace}, cq)
			if err == nil {
				if apimeta.IsStatusConditionTrue(cq.Status.Conditions, kueuev1beta2.ClusterQueueActive) {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: ClusterQueue %s not Active: %w", m.Name, namespace, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// Stop stops every operator, Kueue and cluster.
func (f *Federation) Stop(ctx context.Context) error {
	var errs []error
	for _, m := range f.Members() {
		if m == nil {
			continue
		}
		if m.Operator != nil {
			errs = append(errs, m.Operator.Stop(30*time.Second))
		}
		if m.Kueue != nil {
			errs = append(errs, m.Kueue.Proc.Stop(30*time.Second))
		}
		if m.Cluster != nil {
			errs = append(errs, m.Cluster.Stop())
		}
	}
	return errors.Join(errs...)
}
