package install_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/manifests"
)

// object is one rendered manifest, as generic JSON.
type object = map[string]any

// parseManifests splits a multi-document YAML stream into objects keyed by
// kind/namespace/name.
func parseManifests(rendered string) map[string]object {
	objects := map[string]object{}
	docs, err := manifests.Documents([]byte(rendered))
	Expect(err).NotTo(HaveOccurred())
	for _, doc := range docs {
		var o object
		Expect(utilyaml.Unmarshal(doc, &o)).To(Succeed())
		key := objectKey(o)
		Expect(objects).NotTo(HaveKey(key), "rendered twice")
		objects[key] = o
	}
	return objects
}

func objectKey(o object) string {
	meta, _ := o["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	name, _ := meta["name"].(string)
	return o["kind"].(string) + "/" + ns + "/" + name
}

func keysOf(objects map[string]object) []string {
	keys := make([]string, 0, len(objects))
	for k := range objects {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// normalized drops what legitimately differs between the kustomize and the
// Helm rendering: each tool's own labels on objects, the Helm release label
// in selectors, Helm's keep policy on the CRD, and empty lists and maps
// (config/manager's `ports: []` placeholders).
func normalized(o object) any {
	o = runtime.DeepCopyJSON(o)
	meta := o["metadata"].(map[string]any)
	delete(meta, "labels")
	if annotations, ok := meta["annotations"].(map[string]any); ok {
		delete(annotations, "helm.sh/resource-policy")
	}
	return prune(o)
}

func prune(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			if k == "app.kubernetes.io/instance" {
				continue
			}
			if x = prune(x); !isEmpty(x) {
				out[k] = x
			}
		}
		return out
	case []any:
		out := []any{}
		for _, x := range v {
			out = append(out, prune(x))
		}
		return out
	default:
		return v
	}
}

func isEmpty(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
}

// The kinds of the webhook configurations, and the health probe flag every
// rendering passes the manager.
const (
	validatingKind  = "ValidatingWebhookConfiguration"
	mutatingKind    = "MutatingWebhookConfiguration"
	healthProbeFlag = "--health-probe-bind-address=:8081"
)

// managerArgs is the manager container's args in a rendering.
func managerArgs(objects map[string]object, key string) []string {
	Expect(objects).To(HaveKey(key))
	containers := objects[key]["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)
	raw := containers[0].(map[string]any)["args"].([]any)
	args := make([]string, 0, len(raw))
	for _, a := range raw {
		args = append(args, a.(string))
	}
	return args
}

// webhookConfigurationName is config/default's name of the webhook
// configuration of kind.
func webhookConfigurationName(kind string) string {
	if kind == mutatingKind {
		return releaseName + "-mutating-webhook-configuration"
	}
	return releaseName + "-validating-webhook-configuration"
}

// rulesOf is a rendered ClusterRole's rules.
func rulesOf(role object) []map[string]any {
	Expect(role).NotTo(BeNil())
	raw := role["rules"].([]any)
	rules := make([]map[string]any, 0, len(raw))
	for _, r := range raw {
		rules = append(rules, r.(map[string]any))
	}
	return rules
}

// expectFlagsAccepted runs the manager binary with args and a kubeconfig that
// does not exist: it must get past flag parsing (exit code 2 and "flag
// provided but not defined" or "invalid value" mean it did not) and stop at
// loading the kubeconfig (exit code 1).
func expectFlagsAccepted(args []string) {
	cmd := exec.Command(managerBin, append(args, "--kubeconfig="+filepath.Join(workDir, "missing.kubeconfig"))...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	Expect(errors.As(err, &exit)).To(BeTrue(), "the manager should fail without a kubeconfig: %v\n%s", err, out)
	Expect(exit.ExitCode()).To(Equal(1), "args %q\n%s", args, out)
	Expect(string(out)).NotTo(ContainSubstring("flag provided but not defined"))
	Expect(string(out)).NotTo(ContainSubstring("invalid value"))
	Expect(string(out)).NotTo(ContainSubstring("Invalid Kueue setting"))
}

var _ = Describe("The Helm chart", func() {
	It("carries the generated CRD, manager ClusterRole and webhook configurations byte for byte (make helm-manifests copies them)", func() {
		generated, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		inChart, err := filepath.Glob(filepath.Join(root, chartDir, "files", "crds", "*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(generated).NotTo(BeEmpty())
		names := func(paths []string) []string {
			out := make([]string, 0, len(paths))
			for _, p := range paths {
				out = append(out, filepath.Base(p))
			}
			return out
		}
		Expect(names(inChart)).To(Equal(names(generated)), "run make helm-manifests")
		pairs := map[string]string{
			filepath.Join(root, "config", "rbac", "role.yaml"):         filepath.Join(root, chartDir, "files", "rbac", "role.yaml"),
			filepath.Join(root, "config", "webhook", "manifests.yaml"): filepath.Join(root, chartDir, "files", "webhook", "manifests.yaml"),
		}
		for _, p := range generated {
			pairs[p] = filepath.Join(root, chartDir, "files", "crds", filepath.Base(p))
		}
		for want, got := range pairs {
			wantBytes, err := os.ReadFile(want)
			Expect(err).NotTo(HaveOccurred())
			gotBytes, err := os.ReadFile(got)
			Expect(err).NotTo(HaveOccurred())
			Expect(gotBytes).To(Equal(wantBytes), "%s differs from %s: run make helm-manifests", got, want)
		}
	})

	It("refuses bad values at helm template and helm lint with a message naming the value (values.schema.json)", func() {
		By("accepting its defaults and good values")
		run(root, helmBin, "lint", "--strict", chartDir)
		run(root, helmBin, "lint", "--strict", chartDir, "--set", "kubeAPI.qps=20.5", "--set", "logLevel=2",
			"--set", "podFailureBackoff.base=1m30s", "--set", "resources.limits.memory=1Gi", "--set", "webhook.certManagement=certManager")

		for _, c := range []struct{ set, want string }{
			{"replicaCount=-1", "at '/replicaCount': minimum: got -1, want 0"},
			{"replicas=2", "additional properties 'replicas' not allowed"},
			{"image.pullPolicy=Sometimes", "at '/image/pullPolicy'"},
			{"webhook.certManagement=vault", "at '/webhook/certManagement': value must be one of 'internal', 'certManager'"},
			{"metrics.port=70000", "at '/metrics/port'"},
			{"kubeAPI.qps=0", "at '/kubeAPI/qps'"},
			{"logLevel=loud", "at '/logLevel'"},
			{"podFailureBackoff.base=10", "at '/podFailureBackoff/base': got number, want string"},
			{"podFailureBackoff.max=ten", "at '/podFailureBackoff/max'"},
			{"countedFinalizerHold=5", "at '/countedFinalizerHold': got number, want string"},
			{"kueue.manageJobsWithoutQueueName=yes", "at '/kueue/manageJobsWithoutQueueName'"},
			{"resources.limits.memory=lots", "at '/resources/limits/memory'"},
			{"watchNamespaces=team-a", "at '/watchNamespaces': got string, want array"},
		} {
			for _, command := range [][]string{{"template", "bad", chartDir}, {"lint", "--strict", chartDir}} {
				stdout, stderr, err := runErr(root, helmBin, append(command, "--set", c.set)...)
				Expect(err).To(HaveOccurred(), "helm %s --set %s should fail", command[0], c.set)
				Expect(stdout+stderr).To(ContainSubstring(c.want), "helm %s --set %s", command[0], c.set)
			}
		}
	})

	It("renders with its defaults the objects config/default does, the Namespace aside", func() {
		kustomized := parseManifests(kustomizeBuild("", "config/default"))
		helmed := parseManifests(helmTemplate(releaseName, installNamespace))
		namespaceKey := "Namespace//" + installNamespace
		Expect(kustomized).To(HaveKey(namespaceKey))
		delete(kustomized, namespaceKey)
		Expect(keysOf(helmed)).To(Equal(keysOf(kustomized)))
		for key, want := range kustomized {
			Expect(normalized(helmed[key])).To(Equal(normalized(want)), key)
		}

		By("keeping the CRD on helm uninstall")
		crd := helmed["CustomResourceDefinition//indexedbatchjobs.batch.indexedjob.dev"]
		Expect(crd["metadata"].(map[string]any)["annotations"]).To(HaveKeyWithValue("helm.sh/resource-policy", "keep"))

		By("passing flags the manager binary accepts")
		args := managerArgs(helmed, "Deployment/"+installNamespace+"/"+managerSA)
		Expect(args).To(Equal([]string{"--metrics-bind-address=:8443", "--leader-elect", healthProbeFlag,
			"--enable-webhook=true"}))
		expectFlagsAccepted(args)

		By("leaving the operator's own namespace and kube-system out of both webhooks")
		for _, kind := range []string{validatingKind, mutatingKind} {
			config := helmed[kind+"//"+webhookConfigurationName(kind)]
			Expect(config).NotTo(BeNil(), kind)
			for _, w := range config["webhooks"].([]any) {
				Expect(w.(map[string]any)["namespaceSelector"]).To(Equal(map[string]any{"matchExpressions": []any{map[string]any{
					"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": []any{"kube-system", installNamespace}}}}))
				Expect(w.(map[string]any)["failurePolicy"]).To(Equal("Fail"))
			}
		}
	})

	It("builds config/certmanager: cert-manager issues the certificate and injects the CA bundle", func() {
		kustomized := parseManifests(kustomizeBuild("", "config/certmanager"))
		plain := parseManifests(kustomizeBuild("", "config/default"))
		secret := "Secret/" + installNamespace + "/" + releaseName + "-webhook-server-cert"
		Expect(plain).To(HaveKey(secret))
		Expect(kustomized).NotTo(HaveKey(secret), "cert-manager creates the Secret")
		Expect(kustomized).NotTo(HaveKey("Role/"+installNamespace+"/"+releaseName+"-webhook-cert-role"), "the manager needs no Secrets")
		Expect(kustomized).To(HaveKey("Issuer/" + installNamespace + "/" + releaseName + "-selfsigned-issuer"))
		certificate := kustomized["Certificate/"+installNamespace+"/"+releaseName+"-serving-cert"]
		Expect(certificate).NotTo(BeNil())
		Expect(certificate["spec"].(map[string]any)["secretName"]).To(Equal(releaseName + "-webhook-server-cert"))
		Expect(certificate["spec"].(map[string]any)["dnsNames"]).To(ContainElement(
			releaseName + "-webhook-service." + installNamespace + ".svc"))
		for _, kind := range []string{validatingKind, mutatingKind} {
			config := kustomized[kind+"//"+webhookConfigurationName(kind)]
			Expect(config["metadata"].(map[string]any)["annotations"]).To(HaveKeyWithValue(
				"cert-manager.io/inject-ca-from", installNamespace+"/"+releaseName+"-serving-cert"))
		}
		deployment := "Deployment/" + installNamespace + "/" + managerSA
		args := managerArgs(kustomized, deployment)
		Expect(args).To(ContainElements("--enable-webhook=true", "--webhook-cert-management=external"))
		expectFlagsAccepted(args)
		podSpec := kustomized[deployment]["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		Expect(podSpec["volumes"]).To(Equal([]any{map[string]any{"name": "webhook-certs",
			"secret": map[string]any{"secretName": releaseName + "-webhook-server-cert"}}}))

		By("rendering the same from the chart with webhook.certManagement=certManager")
		helmed := parseManifests(helmTemplate(releaseName, installNamespace, "webhook.certManagement=certManager"))
		delete(kustomized, "Namespace//"+installNamespace)
		Expect(keysOf(helmed)).To(Equal(keysOf(kustomized)))
		for key, want := range kustomized {
			Expect(normalized(helmed[key])).To(Equal(normalized(want)), key)
		}
	})

	It("renders the ServiceMonitor and NetworkPolicy of config/prometheus and config/network-policy when asked", func() {
		kustomized := parseManifests(kustomizeBuild(
			"namespace: "+installNamespace+"\nnamePrefix: "+releaseName+"-\n",
			"config/prometheus", "config/network-policy"))
		helmed := parseManifests(helmTemplate(releaseName, installNamespace,
			"metrics.serviceMonitor.enabled=true", "metrics.networkPolicy.enabled=true"))
		Expect(kustomized).To(HaveLen(2))
		for key, want := range kustomized {
			Expect(helmed).To(HaveKey(key))
			Expect(normalized(helmed[key])).To(Equal(normalized(want)), key)
		}
	})

	It("renders config/multikueue's roles for a MultiKueue manager and worker when asked, and none by default", func() {
		kustomized := parseManifests(kustomizeBuild("namePrefix: "+releaseName+"-\n",
			"config/multikueue/manager", "config/multikueue/worker"))
		Expect(kustomized).To(HaveLen(4))
		helmed := parseManifests(helmTemplate(releaseName, installNamespace,
			"kueue.multiKueue.manager.enabled=true", "kueue.multiKueue.worker.enabled=true"))
		for key, want := range kustomized {
			Expect(helmed).To(HaveKey(key))
			Expect(normalized(helmed[key])).To(Equal(normalized(want)), key)
		}
		byDefault := parseManifests(helmTemplate(releaseName, installNamespace))
		for key := range kustomized {
			Expect(byDefault).NotTo(HaveKey(key))
		}
	})

	It("turns its values into the manager's flags and drops what they turn off", func() {
		values := writeFile("values.yaml", `
replicaCount: 2
crds:
  install: false
leaderElection:
  enabled: false
metrics:
  secure: false
  port: 8080
logLevel: debug
kubeAPI:
  qps: 20.5
  burst: 1000000
maxConcurrentReconciles: 10
watchNamespaces: [team-a, team-b]
podFailureBackoff:
  base: 1s
  max: 1m
countedFinalizerHold: 90s
kueue:
  manageJobsWithoutQueueName: true
  managedJobsNamespaceSelector: kueue.x-k8s.io/managed in (true)
extraArgs: [--enable-http2]
rbac:
  userRoles: false
webhook:
  port: 9444
  excludeNamespaces: [kube-system, platform]
`)
		helmed := parseManifests(run(root, helmBin, "template", "tuned", chartDir, "--namespace", "ops", "--values", values))
		deployment := "Deployment/ops/tuned-indexed-batch-job-controller-manager"
		args := managerArgs(helmed, deployment)
		Expect(args).To(Equal([]string{
			"--metrics-bind-address=:8080", "--metrics-secure=false", healthProbeFlag,
			"--enable-webhook=true", "--webhook-port=9444",
			"--webhook-service-name=tuned-indexed-batch-job-webhook-service",
			"--webhook-secret-name=tuned-indexed-batch-job-webhook-server-cert",
			"--webhook-validating-configuration=tuned-indexed-batch-job-validating-webhook-configuration",
			"--webhook-mutating-configuration=tuned-indexed-batch-job-mutating-webhook-configuration",
			"--zap-log-level=debug", "--kube-api-qps=20.5", "--kube-api-burst=1000000",
			"--max-concurrent-reconciles=10", "--namespaces=team-a,team-b",
			"--pod-failure-backoff=1s", "--pod-failure-backoff-max=1m", "--counted-finalizer-hold=90s",
			"--kueue-manage-jobs-without-queue-name", "--kueue-managed-jobs-namespace-selector=kueue.x-k8s.io/managed in (true)",
			"--enable-http2",
		}))
		expectFlagsAccepted(args)
		Expect(helmed[deployment]["spec"].(map[string]any)["replicas"]).To(BeEquivalentTo(2))
		service := helmed["Service/ops/tuned-indexed-batch-job-controller-manager-metrics-service"]
		Expect(service["spec"].(map[string]any)["ports"]).To(Equal([]any{map[string]any{
			"name": "http", "port": int64(8080), "protocol": "TCP", "targetPort": int64(8080)}}))

		Expect(keysOf(helmed)).To(ConsistOf(
			"ServiceAccount/ops/tuned-indexed-batch-job-controller-manager",
			"ClusterRole//tuned-indexed-batch-job-manager-role",
			"ClusterRoleBinding//tuned-indexed-batch-job-manager-rolebinding",
			"Service/ops/tuned-indexed-batch-job-controller-manager-metrics-service",
			"Service/ops/tuned-indexed-batch-job-webhook-service",
			"Secret/ops/tuned-indexed-batch-job-webhook-server-cert",
			"Role/ops/tuned-indexed-batch-job-webhook-cert-role",
			"RoleBinding/ops/tuned-indexed-batch-job-webhook-cert-rolebinding",
			"ValidatingWebhookConfiguration//tuned-indexed-batch-job-validating-webhook-configuration",
			"MutatingWebhookConfiguration//tuned-indexed-batch-job-mutating-webhook-configuration",
			deployment,
		), "no CRD, no leader election Role, no metrics authn/authz roles, no user roles")
		webhookService := helmed["Service/ops/tuned-indexed-batch-job-webhook-service"]
		Expect(webhookService["spec"].(map[string]any)["ports"]).To(Equal([]any{map[string]any{
			"port": int64(443), "protocol": "TCP", "targetPort": int64(9444)}}))
		validating := helmed["ValidatingWebhookConfiguration//tuned-indexed-batch-job-validating-webhook-configuration"]
		hook := validating["webhooks"].([]any)[0].(map[string]any)
		Expect(hook["clientConfig"]).To(HaveKeyWithValue("service", HaveKeyWithValue("name", "tuned-indexed-batch-job-webhook-service")))
		Expect(hook["namespaceSelector"]).To(HaveKeyWithValue("matchExpressions", ContainElement(
			HaveKeyWithValue("values", []any{"kube-system", "platform", "ops"}))))
		Expect(rulesOf(helmed["ClusterRole//tuned-indexed-batch-job-manager-role"])).To(ContainElement(HaveKeyWithValue("resourceNames",
			[]any{"tuned-indexed-batch-job-validating-webhook-configuration"})), "get and update of the release's own configurations")

		By("turning the webhook off")
		helmed = parseManifests(helmTemplate("plain", "ops", "webhook.enabled=false"))
		Expect(managerArgs(helmed, "Deployment/ops/plain-indexed-batch-job-controller-manager")).NotTo(
			ContainElement(HavePrefix("--enable-webhook")))
		for key := range helmed {
			Expect(strings.ToLower(key)).NotTo(ContainSubstring("webhook"))
		}
		for _, rule := range rulesOf(helmed["ClusterRole//plain-indexed-batch-job-manager-role"]) {
			Expect(rule["apiGroups"]).NotTo(ContainElement("admissionregistration.k8s.io"))
		}
		podSpec := helmed["Deployment/ops/plain-indexed-batch-job-controller-manager"]["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		Expect(podSpec).NotTo(HaveKey("volumes"))

		By("turning metrics (and the webhook) off altogether")
		helmed = parseManifests(helmTemplate("quiet", "ops", "metrics.enabled=false", "webhook.enabled=false"))
		Expect(managerArgs(helmed, "Deployment/ops/quiet-indexed-batch-job-controller-manager")).To(
			Equal([]string{"--leader-elect", healthProbeFlag}))
		for key := range helmed {
			Expect(key).NotTo(ContainSubstring("metrics"))
		}
	})
})
