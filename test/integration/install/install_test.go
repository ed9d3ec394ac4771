package install_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kueueinprocess"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

const (
	crdName    = "indexedbatchjobs.batch.indexedjob.dev"
	restricted = "restricted"
	psaEnforce = "pod-security.kubernetes.io/enforce"
	// leaseTakeover bounds how long a standby waits for a killed leader's
	// lease to expire (controller-runtime's defaults: 15 s lease, 2 s retry).
	leaseTakeover = 45 * time.Second
)

// warningRecorder collects the warnings the API server returns, such as Pod
// Security admission's "would violate PodSecurity" on workloads.
type warningRecorder struct {
	mu       sync.Mutex
	warnings []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warnings = append(w.warnings, text)
}

func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.warnings
	w.warnings = nil
	return out
}

// expectRestrictedAdmits checks that the Pod Security admission of a
// namespace enforcing "restricted" accepts the Deployment's pods. Workloads
// are only warned about, never rejected, so it looks at the warnings of a
// dry-run copy of the Deployment and creates a Pod from the template (dry
// run: admission runs, nothing is stored). A privileged variant of each must
// be warned about and rejected, or the check would prove nothing.
func expectRestrictedAdmits(ctx context.Context, namespace, deployment string) {
	ns := &corev1.Namespace{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Name: namespace}, ns)).To(Succeed())
	Expect(ns.Labels).To(HaveKeyWithValue(psaEnforce, restricted))
	d := &appsv1.Deployment{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: deployment}, d)).To(Succeed())

	recorder := &warningRecorder{}
	warned := rest.CopyConfig(cfg)
	warned.WarningHandler = recorder
	c, err := client.New(warned, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	copyOf := func(mutate func(*corev1.PodSpec)) *appsv1.Deployment {
		out := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: deployment + "-dry-run", Namespace: namespace},
			Spec:       *d.Spec.DeepCopy(),
		}
		mutate(&out.Spec.Template.Spec)
		return out
	}
	privileged := func(spec *corev1.PodSpec) {
		spec.SecurityContext = nil
		spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	}
	Expect(c.Create(ctx, copyOf(func(*corev1.PodSpec) {}), client.DryRunAll)).To(Succeed())
	Expect(recorder.take()).To(BeEmpty(), "Pod Security warnings on the Deployment")
	Expect(c.Create(ctx, copyOf(privileged), client.DryRunAll)).To(Succeed())
	Expect(strings.Join(recorder.take(), "\n")).To(ContainSubstring(`would violate PodSecurity "restricted`))

	pod := func(mutate func(*corev1.PodSpec)) *corev1.Pod {
		tmpl := d.Spec.Template.DeepCopy()
		p := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
		p.Name, p.Namespace = deployment+"-pod", namespace
		mutate(&p.Spec)
		return p
	}
	Expect(c.Create(ctx, pod(func(*corev1.PodSpec) {}), client.DryRunAll)).To(Succeed(),
		"a Pod from the Deployment's template must be admitted under restricted")
	err = c.Create(ctx, pod(privileged), client.DryRunAll)
	Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a privileged Pod must be rejected: %v", err)
	Expect(err.Error()).To(ContainSubstring(`violates PodSecurity "restricted`))
}

// warnedClient is a client whose warnings go to recorder.
func warnedClient(recorder *warningRecorder) client.Client {
	warned := rest.CopyConfig(cfg)
	warned.WarningHandler = recorder
	c, err := client.New(warned, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// expectWebhookServes checks that the installed webhooks answer: a job
// whose pods the Pod API refuses is refused with the field named (not
// "failed calling webhook"), and a valid job is admitted and defaulted.
// It creates both in a namespace of their own, left in place (deleting it
// would have the operator's events for the job refused, which the specs
// count as RBAC refusals).
func expectWebhookServes(ctx context.Context) {
	namespace := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{Prefix: "admission-"})
	bad := restrictedJob(namespace, "bad")
	bad.Spec.Template.Spec.Containers[0].Name = "Main_1"
	Eventually(func() error { return k8sClient.Create(ctx, bad.DeepCopy()) }, 10*time.Second, 200*time.Millisecond).Should(
		MatchError(ContainSubstring(`IndexedBatchJob.batch.indexedjob.dev "bad" is invalid: spec.template.spec.containers[0].name: Invalid value: "Main_1"`)))
	good := restrictedJob(namespace, "good")
	good.Spec.Suspend = ptr.To(true) // no pods: only admission is under test
	Expect(k8sClient.Create(ctx, good)).To(Succeed())
	Expect(good.Spec.BackoffLimit).To(HaveValue(BeEquivalentTo(2147483647)), "defaulted by the mutating webhook")
}

// restrictedJob is the seed example with a template that meets the
// restricted Pod Security Standard.
func restrictedJob(namespace, name string) *ibjv1.IndexedBatchJob {
	job := seedJob(namespace, name)
	spec := &job.Spec.Template.Spec
	spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	return job
}

// scraperAccount is the ServiceAccount granted the right to read the
// operator's metrics.
const scraperAccount = "prometheus"

// webhookCertificate is the Secret holding the webhook's certificate and
// the CA bundles of both webhook configurations.
func webhookCertificate(ctx context.Context) (*corev1.Secret, [][]byte) {
	secret := &corev1.Secret{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: releaseName + "-webhook-server-cert"}, secret)).To(Succeed())
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Name: releaseName + "-validating-webhook-configuration"}, validating)).To(Succeed())
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Name: releaseName + "-mutating-webhook-configuration"}, mutating)).To(Succeed())
	bundles := make([][]byte, 0, len(validating.Webhooks)+len(mutating.Webhooks))
	for _, w := range validating.Webhooks {
		bundles = append(bundles, w.ClientConfig.CABundle)
	}
	for _, w := range mutating.Webhooks {
		bundles = append(bundles, w.ClientConfig.CABundle)
	}
	return secret, bundles
}

// deleteCRD deletes the IndexedBatchJob CRD and waits until it is gone.
func deleteCRD(ctx context.Context) {
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	crd.SetName(crdName)
	Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, crd))).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Name: crdName}, crd))
	}, 60*time.Second, 200*time.Millisecond).Should(BeTrue(), "the CRD should be gone")
}

// restrictedNamespace creates a namespace enforcing the restricted standard.
func restrictedNamespace(ctx context.Context, name string) {
	Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: map[string]string{psaEnforce: restricted}}})).To(Succeed())
}

// seedJob is the seed example, config/samples/batch_v1alpha1_indexedbatchjob.yaml:
// eight indexes two at a time, each retried once; indexes 1 and 2 always fail.
func seedJob(namespace, name string) *ibjv1.IndexedBatchJob {
	b, err := os.ReadFile(filepath.Join(root, "config", "samples", "batch_v1alpha1_indexedbatchjob.yaml"))
	Expect(err).NotTo(HaveOccurred())
	job := &ibjv1.IndexedBatchJob{}
	Expect(utilyaml.Unmarshal(b, job)).To(Succeed())
	Expect(job.Spec.Completions).To(BeEquivalentTo(8))
	Expect(job.Spec.Parallelism).To(HaveValue(BeEquivalentTo(2)))
	Expect(job.Spec.BackoffLimitPerIndex).To(HaveValue(BeEquivalentTo(1)))
	job.Namespace, job.Name = namespace, name
	return job
}

// seedExitCode is what the seed example's script exits with.
func seedExitCode(index int) int32 {
	if index == 1 || index == 2 {
		return 1
	}
	return 0
}

// startKubelet starts the shared pod simulator for the seed example's pods,
// each running for runFor and exiting as seedExitCode says; it stops when
// the spec ends.
func startKubelet(namespace, job string, runFor time.Duration) *podsim.Simulator {
	GinkgoHelper()
	k := podsim.New(podsim.ForJob(clientset, namespace, job, func(index, _ int) podsim.Plan {
		return podsim.Plan{Run: runFor, ExitCode: seedExitCode(index)}
	}))
	Expect(k.Run(context.Background())).To(Succeed())
	DeferCleanup(k.Stop)
	return k
}

// expectSeedOutcome waits for the seed example's final status and checks it
// is exact: six indexes succeeded once, indexes 1 and 2 failed twice each
// (the first run and one retry), nothing ran twice at once.
func expectSeedOutcome(ctx context.Context, k *podsim.Simulator, namespace, name string, timeout time.Duration) {
	job := &ibjv1.IndexedBatchJob{}
	Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, job)).To(Succeed())
		g.Expect(harness.ConditionReason(job, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonFailedIndexes))
	}, timeout, 200*time.Millisecond).Should(Succeed())
	Expect(job.Status.Succeeded).To(BeEquivalentTo(6))
	Expect(job.Status.Failed).To(BeEquivalentTo(4))
	Expect(job.Status.CompletedIndexes).To(Equal("0,3-7"))
	Expect(job.Status.FailedIndexes).To(HaveValue(Equal("1,2")))
	Expect(job.Status.Active).To(BeZero())
	Expect(job.Status.CompletionTime).To(BeNil(), "only a succeeded job has a completionTime")
	for index := range 8 {
		want := 1
		if seedExitCode(index) != 0 {
			want = 2
		}
		Expect(k.RunsOf(index)).To(Equal(want), "pods of index %d", index)
	}
	Expect(k.Doubles()).To(BeEmpty(), "an index had two unfinished pods at once")
	Eventually(func(g Gomega) {
		var pods corev1.PodList
		g.Expect(k8sClient.List(ctx, &pods, client.InNamespace(namespace))).To(Succeed())
		for _, p := range pods.Items {
			g.Expect(p.Finalizers).NotTo(ContainElement(ibjv1.TrackingFinalizer), p.Name)
		}
	}, 20*time.Second, 200*time.Millisecond).Should(Succeed())
}

// scrape GETs the metrics endpoint with the bearer token ("" sends none).
func scrape(address, token string) (int, string, error) {
	// The manager serves a self-signed certificate.
	httpClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a test against its own server
	}}
	req, err := http.NewRequest(http.MethodGet, "https://"+address+"/metrics", nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

var _ = Describe("Installing and running the operator", Ordered, func() {
	var (
		ctx        = context.Background()
		kubeconfig string   // the manager ServiceAccount's
		first      *manager // serves metrics; a leader election candidate
		// the installed Deployment's args, plus the test's: set by the spec
		// that applies install.yaml
		managerArgs []string
	)

	AfterEach(func() {
		if CurrentSpecReport().Failed() {
			dumpManagerLogs()
		}
	})

	It("installs with helm into a restricted namespace, and helm uninstall keeps the CRD", func() {
		const namespace, release = "ibj-helm", "ibj"
		restrictedNamespace(ctx, namespace)
		_, stderr, err := runErr(root, helmBin, "install", release, chartDir, "--kubeconfig", adminKubeconfig,
			"--namespace", namespace, "--set", "image.repository="+testImage, "--set", "image.tag="+testImageTag)
		Expect(err).NotTo(HaveOccurred(), stderr)
		Expect(stderr).NotTo(ContainSubstring("PodSecurity"))
		expectRestrictedAdmits(ctx, namespace, release+"-indexed-batch-job-controller-manager")

		run(root, helmBin, "uninstall", release, "--kubeconfig", adminKubeconfig, "--namespace", namespace)
		Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace,
			Name: release + "-indexed-batch-job-controller-manager"}, &appsv1.Deployment{}))).To(BeTrue())
		Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{
			Name: release + "-indexed-batch-job-manager-role"}, &rbacv1.ClusterRole{}))).To(BeTrue())
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: crdName}, crd)).To(Succeed(), "the CRD is kept")
		Expect(crd.GetDeletionTimestamp()).To(BeNil())
		Expect(crd.GetAnnotations()).To(HaveKeyWithValue("helm.sh/resource-policy", "keep"))
	})

	It("applies dist/install.yaml with a plain client-side kubectl apply, whose manager the restricted Pod Security Standard admits", func() {
		By("deleting the CRD the Helm release kept, so that install.yaml creates it as on a new cluster")
		deleteCRD(ctx)

		install := writeFile("install.yaml", kustomizeBuild("", "config/default"))
		// Twice: the second apply computes its patch from the last-applied
		// annotation the first one stored on every object, the CRD included.
		for range 2 {
			_, stderr, err := runErr(root, kubectlBin, "--kubeconfig", adminKubeconfig, "apply", "-f", install)
			Expect(err).NotTo(HaveOccurred(), stderr)
			Expect(stderr).NotTo(ContainSubstring("Warning"))
		}
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: crdName}, crd)).To(Succeed())
		Expect(crd.GetAnnotations()).To(HaveKey("kubectl.kubernetes.io/last-applied-configuration"))
		expectRestrictedAdmits(ctx, installNamespace, managerSA)

		d := &appsv1.Deployment{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: managerSA}, d)).To(Succeed())
		Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(testImage + ":" + testImageTag))
		Expect(d.Spec.Template.Spec.Containers[0].Args).To(ContainElements("--leader-elect", "--enable-webhook=true"))
		// The processes the next specs start run with these args, as the
		// Deployment's pods would (startManager gives each its own ports),
		// plus a short failure backoff to keep the specs quick. Leader
		// election happens in the install namespace, as in a pod there.
		managerArgs = append(slices.Clone(d.Spec.Template.Spec.Containers[0].Args),
			"--leader-election-namespace="+installNamespace, "--pod-failure-backoff=200ms", "--pod-failure-backoff-max=2s")
		Expect(d.Spec.Template.Spec.ServiceAccountName).To(Equal(managerSA))

		Eventually(func() error {
			return k8sClient.List(ctx, &ibjv1.IndexedBatchJobList{})
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed(), "the CRD should be served")
	})

	It("describes every field of ours in kubectl explain, and leaves the pod template's to kubectl explain pod", func() {
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: crdName}, crd)).To(Succeed())
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		spec, _, _ := unstructured.NestedMap(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec")
		template, _, _ := unstructured.NestedMap(spec, "properties", "template")
		Expect(template).To(HaveKeyWithValue("description", Not(BeEmpty())))
		containers, _, _ := unstructured.NestedMap(template, "properties", "spec", "properties", "containers")
		Expect(containers).To(HaveKey("items"))
		Expect(containers).NotTo(HaveKey("description"),
			"the pod template's field descriptions are dropped to keep the CRD within client-side apply's annotation")

		// Every field of spec but those inside the template, with its description.
		fields := map[string]string{}
		var walk func(path string, schema map[string]any)
		walk = func(path string, schema map[string]any) {
			fields[path], _ = schema["description"].(string)
			if items, ok := schema["items"].(map[string]any); ok {
				schema = items
			}
			properties, _ := schema["properties"].(map[string]any)
			for name, field := range properties {
				if path+"."+name == "spec.template" {
					fields[path+"."+name], _ = field.(map[string]any)["description"].(string)
					continue
				}
				walk(path+"."+name, field.(map[string]any))
			}
		}
		walk("spec", spec)
		Expect(len(fields)).To(BeNumerically(">", 30))
		for path, description := range fields {
			Expect(description).NotTo(BeEmpty(), "%s has no description", path)
			// kubectl wraps the text; compare it word by word.
			want := strings.Join(strings.Fields(description), " ")
			want = want[:min(len(want), 60)]
			Eventually(func(g Gomega) {
				out, stderr, err := runErr(root, kubectlBin, "--kubeconfig", adminKubeconfig, "explain", "indexedbatchjobs."+path)
				g.Expect(err).NotTo(HaveOccurred(), stderr)
				g.Expect(strings.Join(strings.Fields(out), " ")).To(ContainSubstring(want), "kubectl explain %s", path)
			}, 30*time.Second, time.Second).Should(Succeed())
		}
	})

	It("takes the seed example to its final status with nothing but the generated ServiceAccount's permissions", func() {
		kubeconfig = serviceAccountKubeconfig(ctx, installNamespace, managerSA)
		first = startManager("manager-1", kubeconfig, true, managerArgs...)
		Eventually(first.leads, 30*time.Second, 200*time.Millisecond).Should(BeTrue(),
			"the only replica should take the lease: the leader election Role covers leases")
		pointWebhooksAt(ctx, first)
		expectWebhookServes(ctx)

		namespace := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{Prefix: "seed-"})
		k := startKubelet(namespace, "per-index", 0)
		Expect(k8sClient.Create(ctx, seedJob(namespace, "per-index"))).To(Succeed())
		expectSeedOutcome(ctx, k, namespace, "per-index", 60*time.Second)

		By("emitting events, which events.k8s.io lists too")
		Eventually(func(g Gomega) {
			var events eventsv1.EventList
			g.Expect(k8sClient.List(ctx, &events, client.InNamespace(namespace))).To(Succeed())
			regarding := 0
			for _, e := range events.Items {
				if e.Regarding.Kind == "IndexedBatchJob" && e.Regarding.Name == "per-index" {
					regarding++
				}
			}
			g.Expect(regarding).To(BeNumerically(">", 0))
		}, 20*time.Second, 200*time.Millisecond).Should(Succeed())

		By("never being refused by the API server")
		Expect(strings.ToLower(first.log())).NotTo(ContainSubstring("forbidden"))
	})

	It("serves metrics over HTTPS to a token allowed to read them, and only to it", func() {
		Expect(first.metrics).NotTo(BeEmpty())
		namespace := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{Prefix: "scrapers-"})
		for _, name := range []string{scraperAccount, "stranger"} {
			Expect(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}})).To(Succeed())
		}
		Expect(k8sClient.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "prometheus-reads-ibj-metrics"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: releaseName + "-metrics-reader"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: scraperAccount}},
		})).To(Succeed())
		allowed := serviceAccountToken(ctx, namespace, scraperAccount)
		denied := serviceAccountToken(ctx, namespace, "stranger")

		Eventually(func(g Gomega) {
			code, body, err := scrape(first.metrics, allowed)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusOK), body)
			g.Expect(body).To(ContainSubstring("indexedbatchjob_"))
			// The operator's garbage collector target, unless GOGC is set.
			if _, set := os.LookupEnv("GOGC"); !set {
				g.Expect(body).To(MatchRegexp(`(?m)^go_gc_gogc_percent 70$`))
			}
		}, 30*time.Second, 500*time.Millisecond).Should(Succeed())
		code, body, err := scrape(first.metrics, denied)
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusForbidden), body)
		code, body, err = scrape(first.metrics, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusUnauthorized), body)
		Expect(strings.ToLower(first.log())).NotTo(ContainSubstring("forbidden"),
			"the manager may review tokens and access (the metrics-auth ClusterRole)")
	})

	It("judges jobs in a namespace that enforces the restricted Pod Security Standard", func() {
		const namespace = "restricted-jobs"
		restrictedNamespace(ctx, namespace)
		recorder := &warningRecorder{}
		c := warnedClient(recorder)

		By("refusing a template the Pod API refuses, with the field named")
		bad := restrictedJob(namespace, "bad")
		bad.Spec.Template.Spec.Containers[0].Name = "Main_1"
		Expect(c.Create(ctx, bad)).To(MatchError(ContainSubstring(
			`IndexedBatchJob.batch.indexedjob.dev "bad" is invalid: spec.template.spec.containers[0].name: Invalid value: "Main_1"`)))

		By("admitting and defaulting a template that meets restricted, with no warning")
		good := restrictedJob(namespace, "good")
		good.Spec.Suspend = ptr.To(true) // only admission is under test
		Expect(c.Create(ctx, good)).To(Succeed())
		Expect(recorder.take()).To(BeEmpty())
		Expect(good.Spec.BackoffLimit).To(HaveValue(BeEquivalentTo(2147483647)),
			"the mutating webhook defaults backoffLimit with backoffLimitPerIndex, as batch/v1 stores it")

		By("admitting, with a warning that names the violation, a template restricted forbids")
		Expect(c.Create(ctx, seedJob(namespace, "privileged"))).To(Succeed())
		Expect(strings.Join(recorder.take(), "\n")).To(And(
			ContainSubstring("forbids this job's pods"), ContainSubstring(`violates PodSecurity "restricted`)))
		Eventually(func(g Gomega) {
			job := &ibjv1.IndexedBatchJob{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "privileged"}, job)).To(Succeed())
			g.Expect(job.Status.Phase).To(BeEquivalentTo(ibjv1.ReasonPodForbidden), "its status says why no pod starts")
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
		// Gone before the next specs, whose operators must never be refused.
		privileged := &ibjv1.IndexedBatchJob{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "privileged"}}
		Expect(k8sClient.Delete(ctx, privileged)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(privileged), privileged))
		}, 30*time.Second, 200*time.Millisecond).Should(BeTrue())
	})

	It("keeps the webhook's certificate and CA bundle across an operator restart", func() {
		secretBefore, bundlesBefore := webhookCertificate(ctx)
		Expect(secretBefore.Data).To(HaveKey(corev1.TLSCertKey))
		Expect(bundlesBefore).To(HaveLen(2))
		for _, b := range bundlesBefore {
			Expect(b).NotTo(BeEmpty(), "the operator injects the CA bundle")
		}

		first.stop()
		first = startManager("manager-1-restarted", kubeconfig, true, managerArgs...)
		Eventually(first.leads, leaseTakeover, 200*time.Millisecond).Should(BeTrue())
		// In a cluster the Service reaches the new pod; here its new port.
		pointWebhooksAt(ctx, first)

		secretAfter, bundlesAfter := webhookCertificate(ctx)
		Expect(secretAfter.Data).To(Equal(secretBefore.Data), "the certificate Secret is unchanged")
		Expect(bundlesAfter).To(Equal(bundlesBefore), "the CA bundle in both configurations is unchanged")
		served, err := os.ReadFile(filepath.Join(workDir, "manager-1-restarted-certs", corev1.TLSCertKey))
		Expect(err).NotTo(HaveOccurred())
		Expect(served).To(Equal(secretBefore.Data[corev1.TLSCertKey]), "the restarted operator serves the same certificate")
		expectWebhookServes(ctx)
	})

	It("hands a job over to the standby replica when the leader is killed mid-job, with exact counts", func() {
		second := startManager("manager-2", kubeconfig, false, managerArgs...)
		Consistently(second.leads, 3*time.Second, 200*time.Millisecond).Should(BeFalse(), "two leaders at once")
		leader, standby := first, second

		By("serving the webhook from the standby as well as from the leader")
		pointWebhooksAt(ctx, standby)
		expectWebhookServes(ctx)
		pointWebhooksAt(ctx, leader)
		expectWebhookServes(ctx)

		namespace := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{Prefix: "handover-"})
		k := startKubelet(namespace, "per-index", time.Second)
		Expect(k8sClient.Create(ctx, seedJob(namespace, "per-index"))).To(Succeed())
		Eventually(k.Finished, 30*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 2))
		leader.kill()

		By("answering admission from the standby while no replica leads")
		pointWebhooksAt(ctx, standby)
		expectWebhookServes(ctx)
		Expect(standby.leads()).To(BeFalse(), "the killed leader's lease should not have expired yet")

		job := &ibjv1.IndexedBatchJob{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "per-index"}, job)).To(Succeed())
		Expect(harness.ConditionReason(job, ibjv1.ConditionFailed)).To(BeEmpty(), "the job should still be running when its leader dies")

		Eventually(standby.leads, leaseTakeover, 200*time.Millisecond).Should(BeTrue(),
			"the standby should take the lease once the killed leader's expires")
		expectSeedOutcome(ctx, k, namespace, "per-index", leaseTakeover+60*time.Second)
		Expect(strings.ToLower(standby.log())).NotTo(ContainSubstring("forbidden"))
	})

	It("refuses creates and template changes while no replica runs, and lets every other update through", func() {
		namespace := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{Prefix: "operator-down-"})
		paused := restrictedJob(namespace, "paused")
		paused.Spec.Suspend = ptr.To(true)
		Expect(k8sClient.Create(ctx, paused)).To(Succeed(), "a replica still serves the webhook")
		killManagers()

		By("refusing a create")
		err := k8sClient.Create(ctx, restrictedJob(namespace, "new"))
		Expect(err).To(MatchError(ContainSubstring("failed calling webhook")), "never admitted unjudged")

		By("refusing a change of the template (one a suspended job may make)")
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(paused), paused)).To(Succeed())
		changed := paused.DeepCopy()
		changed.Spec.Template.Labels = map[string]string{"team": "a"}
		Expect(k8sClient.Update(ctx, changed)).To(MatchError(ContainSubstring("failed calling webhook")))

		By("admitting updates that leave the template alone: a label, a resume")
		paused.Labels = map[string]string{"team": "a"}
		Expect(k8sClient.Update(ctx, paused)).To(Succeed())
		paused.Spec.Suspend = ptr.To(false)
		Expect(k8sClient.Update(ctx, paused)).To(Succeed())
		Expect(k8sClient.Delete(ctx, paused)).To(Succeed(), "and deletes")
	})

	It("issues one certificate that both replicas serve when two start at once with an empty Secret", func() {
		secret, _ := webhookCertificate(ctx)
		old := secret.Data[corev1.TLSCertKey]
		secret.Data = nil
		Expect(k8sClient.Update(ctx, secret)).To(Succeed(), "emptied, as a fresh install creates it")

		// Both start together, as the pods of a two-replica Deployment do.
		var b *manager
		started := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(started)
			b = startManager("manager-b", kubeconfig, false, managerArgs...)
		}()
		a := startManager("manager-a", kubeconfig, false, managerArgs...)
		Eventually(started, time.Minute).Should(BeClosed())

		secret, bundles := webhookCertificate(ctx)
		Expect(secret.Data[corev1.TLSCertKey]).NotTo(BeEmpty())
		Expect(secret.Data[corev1.TLSCertKey]).NotTo(Equal(old), "a new certificate for the emptied Secret")
		for _, bundle := range bundles {
			Expect(bundle).To(Equal(secret.Data["ca.crt"]), "both configurations carry the Secret's CA")
		}
		for _, m := range []*manager{a, b} {
			Eventually(func() ([]byte, error) {
				return os.ReadFile(filepath.Join(workDir, m.name+"-certs", corev1.TLSCertKey))
			}, 45*time.Second, 500*time.Millisecond).Should(Equal(secret.Data[corev1.TLSCertKey]), "%s serves the Secret's certificate", m.name)
			pointWebhooksAt(ctx, m)
			expectWebhookServes(ctx)
		}
	})

	It("starts the Kueue integration inside the running process once Kueue is installed, and queues jobs with the installed permissions", func() {
		killManagers() // so that the next replica leads at once
		m := startManager("manager-kueue-later", kubeconfig, true, managerArgs...)
		namespace := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{Prefix: "queued-"})
		Expect(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: scraperAccount}})).To(Succeed())
		Expect(k8sClient.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "prometheus-reads-ibj-metrics-kueue"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: releaseName + "-metrics-reader"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: scraperAccount}},
		})).To(Succeed())
		token := serviceAccountToken(ctx, namespace, scraperAccount)
		kueueState := func(m *manager) func(g Gomega) string {
			return func(g Gomega) string {
				code, body, err := scrape(m.metrics, token)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(code).To(Equal(http.StatusOK), body)
				on := regexp.MustCompile(`(?m)^indexedbatchjob_kueue_integration\{state="([a-z]+)"\} 1$`).FindAllStringSubmatch(body, -1)
				g.Expect(on).To(HaveLen(1), "one state at 1:\n%s", body)
				return on[0][1]
			}
		}
		Eventually(kueueState(m), 30*time.Second, 500*time.Millisecond).Should(Equal("waiting"), "Kueue is not installed")

		By("installing Kueue's CRDs under it")
		kueueDir, err := kueueinprocess.ModuleDir()
		Expect(err).NotTo(HaveOccurred())
		_, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{kueueinprocess.CRDDir(kueueDir)}})
		Expect(err).NotTo(HaveOccurred())
		Eventually(m.log, 30*time.Second, 200*time.Millisecond).Should(ContainSubstring("Started the Kueue integration in this process"))
		Eventually(kueueState(m), 30*time.Second, 500*time.Millisecond).Should(Equal("running"))
		Expect(m.done).NotTo(BeClosed(), "the process runs on")
		Expect(m.exe()).To(Equal(managerBin), "nothing was exec'd")
		Expect(strings.Count(m.log(), "Starting manager")).To(Equal(1), "the manager was not started again")
		pointWebhooksAt(ctx, m)
		expectWebhookServes(ctx)

		By("suspending a job labelled with a queue name at admission, and creating its Workload")
		job := seedJob(namespace, "queued")
		job.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "user-queue"}
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		Expect(job.Spec.Suspend).To(HaveValue(BeTrue()), "the webhook suspends it until Kueue admits it")
		Eventually(func(g Gomega) {
			workloads := &unstructured.UnstructuredList{}
			workloads.SetAPIVersion("kueue.x-k8s.io/v1beta2")
			workloads.SetKind("WorkloadList")
			g.Expect(k8sClient.List(ctx, workloads, client.InNamespace(namespace))).To(Succeed())
			g.Expect(workloads.Items).To(HaveLen(1))
			owners := workloads.Items[0].GetOwnerReferences()
			g.Expect(owners).To(HaveLen(1))
			g.Expect(owners[0].UID).To(Equal(job.UID))
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
		Expect(strings.ToLower(m.log())).NotTo(ContainSubstring("forbidden"), "the installed RBAC covers the integration")

		By("recording that it started, about the IndexedBatchJob CRD (the process runs in no Pod)")
		Eventually(func(g Gomega) {
			var events eventsv1.EventList
			g.Expect(k8sClient.List(ctx, &events)).To(Succeed())
			g.Expect(events.Items).To(ContainElement(SatisfyAll(
				HaveField("Reason", "KueueIntegrationStarted"),
				HaveField("Regarding.Kind", "CustomResourceDefinition"),
				HaveField("Regarding.Name", "indexedbatchjobs.batch.indexedjob.dev"))))
		}, 20*time.Second, 200*time.Millisecond).Should(Succeed())

		By("a replica started now finds Kueue at once and stands by, its webhook queueing jobs too")
		standby := startManager("manager-kueue-standby", kubeconfig, true, managerArgs...)
		Eventually(kueueState(standby), 30*time.Second, 500*time.Millisecond).Should(Equal("standby"))
		Expect(standby.leads()).To(BeFalse())
		pointWebhooksAt(ctx, standby)
		expectWebhookServes(ctx)
		second := seedJob(namespace, "queued-at-standby")
		second.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "user-queue"}
		Expect(k8sClient.Create(ctx, second)).To(Succeed())
		Expect(second.Spec.Suspend).To(HaveValue(BeTrue()), "the standby's webhook suspends it too")
		Expect(kueueState(m)(Default)).To(Equal("running"), "the leader still runs it")
	})
})
