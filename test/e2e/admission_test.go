package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// invalidTemplate is a pod template the Pod API refuses, and the field the
// refusal names (under spec.template, for a batch/v1 Job as for an
// IndexedBatchJob). None of them is refused by the CRD's schema or CEL
// rules: only the admission webhook's dry run of the pod catches them.
type invalidTemplate struct {
	name  string
	edit  func(*corev1.PodSpec)
	field string
}

// The volumes the templates below mount, and where.
const (
	scratchVolume  = "scratch"
	scratchPath    = "/scratch"
	settingsVolume = "settings"
)

var invalidTemplates = []invalidTemplate{
	{"a port name longer than 15 characters", func(s *corev1.PodSpec) {
		s.Containers[0].Ports = []corev1.ContainerPort{{Name: "metrics-endpoint", ContainerPort: 8080}}
	}, "spec.template.spec.containers[0].ports[0].name"},
	{"a pod activeDeadlineSeconds of 0", func(s *corev1.PodSpec) { s.ActiveDeadlineSeconds = ptr.To[int64](0) },
		"spec.template.spec.activeDeadlineSeconds"},
	{"a secret volume with file mode 01000", func(s *corev1.PodSpec) {
		s.Volumes = []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: "creds", DefaultMode: ptr.To[int32](0o1000)}}}}
	}, "spec.template.spec.volumes[0].secret.defaultMode"},
	{"a volume subPath that climbs out with ..", func(s *corev1.PodSpec) {
		s.Volumes = []corev1.Volume{{Name: scratchVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		s.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: scratchVolume, MountPath: scratchPath, SubPath: "../etc"}}
	}, "spec.template.spec.containers[0].volumeMounts.subPath"}, // the Pod API names no index here
	{"an env var with both a value and valueFrom", func(s *corev1.PodSpec) {
		s.Containers[0].Env = []corev1.EnvVar{{Name: "NODE", Value: "x", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}}
	}, "spec.template.spec.containers[0].env[0].valueFrom"},
	{"a readiness probe with no handler", func(s *corev1.PodSpec) {
		s.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 5}
	}, "spec.template.spec.containers[0].readinessProbe"},
}

// admissionJob is a small job whose template edit changes.
func admissionJob(ns, name string, edit func(*corev1.PodSpec)) *ibjv1.IndexedBatchJob {
	job := harness.MakeIndexedBatchJob(name, ns).Completions(2).Obj()
	job.TypeMeta = metav1.TypeMeta{APIVersion: ibjv1.GroupVersion.String(), Kind: "IndexedBatchJob"}
	if edit != nil {
		edit(&job.Spec.Template.Spec)
	}
	return job
}

// applyManifest writes obj as YAML and runs kubectl with args and -f on it,
// returning kubectl's output.
func applyManifest(obj client.Object, args ...string) (string, error) {
	GinkgoHelper()
	data, err := yaml.Marshal(obj)
	Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(GinkgoT().TempDir(), obj.GetName()+".yaml")
	Expect(os.WriteFile(path, data, 0o644)).To(Succeed())
	return kc.Run(append(args, "-n", obj.GetNamespace(), "-f", path)...)
}

// expectRefused checks that kubectl refuses a batch/v1 Job with the
// template (a server-side dry run) and `kubectl apply` of an IndexedBatchJob
// with it, both naming the field.
func expectRefused(ns string, t invalidTemplate) {
	GinkgoHelper()
	name := "refused"
	ibj := admissionJob(ns, name, t.edit)
	job := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			Completions: ptr.To[int32](2), CompletionMode: ptr.To(batchv1.IndexedCompletion),
			Template: *ibj.Spec.Template.DeepCopy(),
		},
	}
	out, err := applyManifest(job, "create", "--dry-run=server")
	Expect(err).To(HaveOccurred(), "a batch/v1 Job with this template should be refused:\n%s", out)
	Expect(out).To(ContainSubstring(`The Job "refused" is invalid: `))
	Expect(out).To(ContainSubstring(t.field+":"), "the Job's refusal names the field")

	out, err = applyManifest(ibj, "apply")
	Expect(err).To(HaveOccurred(), "kubectl apply should refuse the IndexedBatchJob:\n%s", out)
	Expect(out).To(ContainSubstring(`The IndexedBatchJob "refused" is invalid: `))
	Expect(out).To(ContainSubstring(t.field+":"), "the refusal names the field")
	Expect(out).NotTo(ContainSubstring("failed calling webhook"))
}

var _ = Describe("The admission webhook, as kubectl users meet it", func() {
	var (
		ctx context.Context
		ns  string
	)
	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace(ctx)
	})

	for _, t := range invalidTemplates {
		It("refuses at kubectl apply, naming the field, "+t.name+", as the Job API does", func() {
			expectRefused(ns, t)
		})
	}

	It("admits a template with a sidecar and shared volumes, and defaults it", func() {
		job := admissionJob(ns, "sidecar", func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{
				{Name: scratchVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: settingsVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: settingsVolume}, Optional: ptr.To(true)}}},
			}
			s.InitContainers = []corev1.Container{{Name: "log-shipper", Image: harness.DefaultImage,
				RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
				VolumeMounts:  []corev1.VolumeMount{{Name: scratchVolume, MountPath: scratchPath, ReadOnly: true}}}}
			s.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: scratchVolume, MountPath: scratchPath},
				{Name: settingsVolume, MountPath: "/etc/settings"}}
		})
		job.Spec.Suspend = ptr.To(true) // only admission is under test
		out, err := applyManifest(job, "apply")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("indexedbatchjob.batch.indexedjob.dev/sidecar created"))
		Expect(out).NotTo(ContainSubstring("Warning"))
		Expect(kc.Must("get", "ibj", "sidecar", "-n", ns, "-o", "jsonpath={.spec.backoffLimit} {.spec.podReplacementPolicy}")).
			To(Equal("6 TerminatingOrFailed"), "defaulted by the mutating webhook, as batch/v1 stores them")
	})

	It("admits a job a full quota holds back, with a warning; kubectl get ibj says QuotaExceeded until the quota frees, then it completes", func() {
		// No kube-controller-manager runs here, so the spec writes the
		// quota's status (hard and used) as its quota controller would.
		setQuota := func(hard, used int64) {
			q := &corev1.ResourceQuota{}
			Eventually(func() error {
				if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "compute"}, q); err != nil {
					return err
				}
				q.Spec.Hard = corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(hard, resource.DecimalSI)}
				if err := k8sClient.Update(ctx, q); err != nil {
					return err
				}
				q.Status.Hard = q.Spec.Hard
				q.Status.Used = corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(used, resource.DecimalSI)}
				return k8sClient.Status().Update(ctx, q)
			}, 10*time.Second, poll).Should(Succeed())
		}
		Expect(k8sClient.Create(ctx, &corev1.ResourceQuota{
			ObjectMeta: metav1.ObjectMeta{Name: "compute", Namespace: ns},
			Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}},
		})).To(Succeed())
		setQuota(1, 1)

		out, err := applyManifest(admissionJob(ns, "quota", nil), "apply")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("indexedbatchjob.batch.indexedjob.dev/quota created"))
		Expect(out).To(And(ContainSubstring("Warning:"), ContainSubstring("exceeded quota: compute")),
			"admitted with a warning that says why no pod will start")

		By("saying why in kubectl get ibj's STATUS column")
		Eventually(func(g Gomega) {
			lines := strings.Split(strings.TrimSpace(kc.Must("get", "ibj", "quota", "-n", ns)), "\n")
			g.Expect(lines).To(HaveLen(2))
			g.Expect(strings.Fields(lines[1])[1]).To(Equal("QuotaExceeded"))
		}, timeout, poll).Should(Succeed())
		Expect(kc.Must("get", "ibj", "quota", "-n", ns, "-o",
			`jsonpath={.status.conditions[?(@.type=="PodCreationFailed")].message}`)).To(ContainSubstring("exceeded quota: compute"))

		By("completing once the quota frees")
		setQuota(10, 1)
		kc.Must("wait", "-n", ns, "--for=condition=Complete", "ibj/quota", "--timeout=120s")
		j := getJob(ctx, ns, "quota")
		Expect(j.Status.Phase).To(Equal(ibjv1.PhaseComplete))
		Expect(j.Status.Succeeded).To(Equal(int32(2)))
		Expect(j.Status.Failed).To(BeZero(), "a refused create is no failed pod")
	})
})
