package webhook_test

import (
	"errors"
	"math"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

// causeFields are the fields an Invalid error names.
func causeFields(err error) []string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return nil
	}
	var fields []string
	for _, c := range status.Status().Details.Causes {
		fields = append(fields, c.Field)
	}
	return fields
}

// batchJob is a batch/v1 Job with the job's template, as the issue's
// reference: the API server must refuse it for the same field.
func batchJob(ns string, tmpl corev1.PodTemplateSpec) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ref-", Namespace: ns},
		Spec:       batchv1.JobSpec{Template: tmpl},
	}
}

func container(name string) corev1.Container {
	return corev1.Container{Name: name, Image: harness.DefaultImage}
}

var _ = Describe("The pod template is judged as the Pod API judges it", func() {

	DescribeTable("refuses at create a template whose pod the API server refuses, naming the field",
		func(edit func(*corev1.PodSpec), field, message string) {
			ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
			job := harness.MakeIndexedBatchJob("bad", ns).Obj()
			edit(&job.Spec.Template.Spec)

			By("a batch/v1 Job with the same template is refused")
			ref := k8sClient.Create(ctx, batchJob(ns, job.Spec.Template))
			Expect(apierrors.IsInvalid(ref)).To(BeTrue(), "batch/v1 Job: %v", ref)

			By("so is the IndexedBatchJob, with the Pod API's field and message")
			err := k8sClient.Create(ctx, job)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "IndexedBatchJob: %v", err)
			Expect(causeFields(err)).To(ContainElement(field))
			// Duplicate list keys are refused by the CRD's own schema before
			// the webhook runs; everything else by the webhook.
			Expect(err.Error()).To(And(
				ContainSubstring(`IndexedBatchJob.batch.indexedjob.dev "bad" is invalid`),
				ContainSubstring(field+": "+message)))
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(job), &ibjv1.IndexedBatchJob{})).To(Satisfy(apierrors.IsNotFound))
		},
		Entry("a container named Main_1", func(s *corev1.PodSpec) { s.Containers[0].Name = "Main_1" },
			"spec.template.spec.containers[0].name", `Invalid value: "Main_1"`),
		Entry("no containers", func(s *corev1.PodSpec) { s.Containers = []corev1.Container{} },
			"spec.template.spec.containers", "Required value"),
		Entry("a volume mount of an undefined volume", func(s *corev1.PodSpec) {
			s.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		}, "spec.template.spec.containers[0].volumeMounts[0].name", `Not found: "data"`),
		Entry("requests above limits", func(s *corev1.PodSpec) {
			s.Containers[0].Resources = corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
			}
		}, "spec.template.spec.containers[0].resources.requests", `Invalid value: "2": must be less than or equal to cpu limit of 1`),
		Entry("a port of 70000", func(s *corev1.PodSpec) {
			s.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 70000}}
		}, "spec.template.spec.containers[0].ports[0].containerPort", "Invalid value: 70000"),
		// The Pod API names the list entry here (its list-map check runs
		// before validation), where batch/v1 names containers[1].name.
		Entry("two containers of one name", func(s *corev1.PodSpec) { s.Containers = append(s.Containers, container("main")) },
			"spec.template.spec.containers[1]", "Duplicate value"),
		Entry("an env var name with '=' (the index counted in the template, without JOB_COMPLETION_INDEX)", func(s *corev1.PodSpec) {
			s.Containers[0].Env = []corev1.EnvVar{{Name: "OK", Value: "1"}, {Name: "A=B", Value: "1"}}
		}, "spec.template.spec.containers[0].env[1].name", `Invalid value: "A=B"`),
		Entry("an imagePullPolicy that does not exist", func(s *corev1.PodSpec) { s.Containers[0].ImagePullPolicy = "Sometimes" },
			"spec.template.spec.containers[0].imagePullPolicy", `Unsupported value: "Sometimes"`),
		Entry("dnsPolicy None without dnsConfig", func(s *corev1.PodSpec) { s.DNSPolicy = corev1.DNSNone },
			"spec.template.spec.dnsConfig", "Required value"),
		Entry("hostNetwork with a hostPort other than the containerPort", func(s *corev1.PodSpec) {
			s.HostNetwork = true
			s.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 81}}
		}, "spec.template.spec.containers[0].ports[0].hostPort", "Invalid value: 81"),
		Entry("an emptyDir and a configMap of one name", func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{
				{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}},
			}
		}, "spec.template.spec.volumes[1]", "Duplicate value"),
	)

	It("refuses through the webhook, as kubectl shows it", func() {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
		job := harness.MakeIndexedBatchJob("bad", ns).Obj()
		job.Spec.Template.Spec.Containers[0].Name = "Main_1"
		err := k8sClient.Create(ctx, job)
		Expect(err).To(MatchError(HavePrefix(`admission webhook "vindexedbatchjob-v1alpha1.kb.io" denied the request: ` +
			`IndexedBatchJob.batch.indexedjob.dev "bad" is invalid: spec.template.spec.containers[0].name: Invalid value: "Main_1": ` +
			`a lowercase RFC 1123 label must consist of`)))
		var status apierrors.APIStatus
		Expect(errors.As(err, &status)).To(BeTrue())
		Expect(status.Status().Details).To(HaveValue(And(
			HaveField("Kind", "IndexedBatchJob"), HaveField("Name", "bad"), HaveField("Group", "batch.indexedjob.dev"))),
			"kubectl prints: The IndexedBatchJob \"bad\" is invalid: <field>: <message>")
	})

	DescribeTable("refuses at update a template changed into one whose pod the API server refuses",
		func(edit func(*corev1.PodTemplateSpec), field string) {
			ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
			job := harness.MakeIndexedBatchJob("upd", ns).Suspend(true).Obj()
			Expect(k8sClient.Create(ctx, job)).To(Succeed())
			// The CRD lets a suspended job's scheduling directives change.
			edit(&job.Spec.Template)
			err := k8sClient.Update(ctx, job)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(causeFields(err)).To(ContainElement(field))
		},
		Entry("a label value with a space", func(t *corev1.PodTemplateSpec) {
			t.Labels = map[string]string{"team": "a b"}
		}, "spec.template.metadata.labels"),
		Entry("a toleration with operator Exists and a value", func(t *corev1.PodTemplateSpec) {
			t.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Value: "v"}}
		}, "spec.template.spec.tolerations[0].operator"),
		Entry("a nodeSelector key with a space", func(t *corev1.PodTemplateSpec) {
			t.Spec.NodeSelector = map[string]string{"bad key": "x"}
		}, "spec.template.spec.nodeSelector"),
	)

	DescribeTable("refuses a suspended job's container changed in anything but its resources (the CRD checks only names and order)",
		func(edit func(*corev1.PodTemplateSpec), field string) {
			ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
			job := harness.MakeIndexedBatchJob("ctr", ns).Suspend(true).InitContainer("setup").Obj()
			Expect(k8sClient.Create(ctx, job)).To(Succeed())
			edit(&job.Spec.Template)
			err := k8sClient.Update(ctx, job)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(causeFields(err)).To(ContainElement(field))
			Expect(err.Error()).To(ContainSubstring("a container may change only in its resources"))
		},
		Entry("its image", func(t *corev1.PodTemplateSpec) {
			t.Spec.Containers[0].Image = "example.com/other:1"
		}, "spec.template.spec.containers[0]"),
		Entry("its env, with its resources", func(t *corev1.PodTemplateSpec) {
			t.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "b"}}
			t.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		}, "spec.template.spec.containers[0]"),
		Entry("an init container's command", func(t *corev1.PodTemplateSpec) {
			t.Spec.InitContainers[0].Command = []string{"true"}
		}, "spec.template.spec.initContainers[0]"),
	)

	It("admits a suspended job's container resources changed, as upstream 1.36 does (KEP-5440)", func() {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
		job := harness.MakeIndexedBatchJob("res", ns).Suspend(true).InitContainer("setup").Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		job.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		}
		job.Spec.Template.Spec.InitContainers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
		Expect(k8sClient.Update(ctx, job)).To(Succeed())
	})

	It("admits valid templates: a sidecar, volumes, env that refers to JOB_COMPLETION_INDEX", func() {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
		sidecar := container("proxy")
		sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		job := harness.MakeIndexedBatchJob("ok", ns).Completions(4).Obj()
		spec := &job.Spec.Template.Spec
		spec.InitContainers = []corev1.Container{sidecar}
		spec.Volumes = []corev1.Volume{
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent-is-fine"}}}},
		}
		spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}, {Name: "config", MountPath: "/config"}}
		spec.Containers[0].Env = []corev1.EnvVar{{Name: "SHARD", Value: "shard-$(JOB_COMPLETION_INDEX)"}}
		spec.Containers[0].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
		}
		warnings.take()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		Expect(warnings.take()).To(BeEmpty())

		By("and an update that leaves the template alone is not judged again")
		job.Spec.Parallelism = ptr.To[int32](2)
		Expect(k8sClient.Update(ctx, job)).To(Succeed())
	})

	It("admits, with a warning, a job whose pods Pod Security forbids now: the job's status will say so", func() {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}})
		warnings.take()
		Expect(k8sClient.Create(ctx, harness.MakeIndexedBatchJob("psa", ns).Obj())).To(Succeed())
		Expect(warnings.take()).To(ContainElement(And(
			ContainSubstring("the API server forbids this job's pods now"),
			ContainSubstring(`violates PodSecurity "restricted:latest"`),
			ContainSubstring("PodCreationFailed"))))
	})
})

var _ = Describe("What the CRD's schema cannot state", func() {
	It("refuses a pod template that sets a key the operator reserves on its pods, naming the field", func() {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
		job := harness.MakeIndexedBatchJob("reserved", ns).PodAnnotation(ibjv1.DiscardedAnnotation, "true").
			PodLabel(ibjv1.JobNameLabel, "someone-else").Obj()
		err := k8sClient.Create(ctx, job)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err).To(MatchError(ContainSubstring(
			`spec.template.metadata.annotations[batch.indexedjob.dev/discarded]: Forbidden: is reserved: the operator sets it`)))
		Expect(causeFields(err)).To(ConsistOf(
			"spec.template.metadata.labels[batch.indexedjob.dev/job-name]",
			"spec.template.metadata.annotations[batch.indexedjob.dev/discarded]"))
	})

	It("refuses a success policy rule whose succeededCount exceeds its succeededIndexes, with upstream's message", func() {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
		job := harness.MakeIndexedBatchJob("unmeetable", ns).Completions(10).
			SuccessPolicy(batchv1.SuccessPolicyRule{SucceededIndexes: ptr.To("0,5"), SucceededCount: ptr.To[int32](3)}).Obj()
		err := k8sClient.Create(ctx, job)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err).To(MatchError(ContainSubstring(`spec.successPolicy.rules[0].succeededCount: Invalid value: 3: ` +
			`must be less than or equal to 2 (the number of indexes in the specified succeededIndexes field)`)))
	})
})

var _ = Describe("Memory after an OOM kill", func() {
	memory := func(q string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(q)}
	}
	// oomJob's main container asks for 512Mi with a 1Gi limit; a raise
	// takes both up to 2Gi.
	oomJob := func(name, ns string) *ibjv1.IndexedBatchJob {
		return harness.MakeIndexedBatchJob(name, ns).RetryOnOOMKilled(150, "2Gi").Requests(memory("512Mi")).Limits(memory("1Gi")).Obj()
	}

	It("refuses a template memory above maxMemory, naming the field", func() {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
		job := oomJob("above-max", ns)
		job.Spec.Template.Spec.Containers[0].Resources.Limits = memory("3Gi")
		err := k8sClient.Create(ctx, job)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err).To(MatchError(ContainSubstring(`spec.template.spec.containers[0].resources.limits[memory]: Invalid value: "3Gi": ` +
			`must be less than or equal to spec.retryResources.onOOMKilled.maxMemory (2Gi): a raise after an OOM kill never lowers a container's memory`)))
	})

	It("refuses a job whose pod raised to maxMemory the Pod API refuses, though its first pod is valid", func() {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
		// A pod-level memory limit of 1Gi holds the first pod's container
		// (1Gi) but not the raised one (2Gi).
		job := oomJob("pod-level", ns)
		job.Spec.Template.Spec.Resources = &corev1.ResourceRequirements{Limits: memory("1Gi")}
		err := k8sClient.Create(ctx, job)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err).To(MatchError(ContainSubstring("with its memory raised as far as retryResources.onOOMKilled lets it after OOM kills, ")))

		By("without onOOMKilled the same template is admitted")
		job = oomJob("pod-level", ns)
		job.Spec.Template.Spec.Resources = &corev1.ResourceRequirements{Limits: memory("1Gi")}
		job.Spec.RetryResources = nil
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
	})

	It("refuses an update of maxMemory below the template's memory (the webhook is called for retryResources changes)", func() {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
		job := oomJob("lowered", ns)
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		job.Spec.RetryResources.OnOOMKilled.MaxMemory = resource.MustParse("768Mi")
		err := k8sClient.Update(ctx, job)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(causeFields(err)).To(ConsistOf("spec.template.spec.containers[0].resources.limits[memory]"))
	})

	It("admits, with a warning naming it, a job whose raise a LimitRange caps below maxMemory", func() {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
		Expect(k8sClient.Create(ctx, &corev1.LimitRange{
			ObjectMeta: metav1.ObjectMeta{Name: "max", Namespace: ns},
			Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
				Type: corev1.LimitTypeContainer, Max: memory("1536Mi"),
			}}},
		})).To(Succeed())
		warnings.take()
		Expect(k8sClient.Create(ctx, oomJob("limited", ns))).To(Succeed())
		Expect(warnings.take()).To(ConsistOf(
			"a raise after an OOM kill stops at 1536Mi, the container maximum of LimitRange max in namespace " + ns +
				", below spec.retryResources.onOOMKilled.maxMemory (2Gi)"))
	})
})

var _ = Describe("Defaults", func() {
	It("writes backoffLimit and podReplacementPolicy into a new job, as batch/v1 does", func() {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
		plain := harness.MakeIndexedBatchJob("plain", ns).Obj()
		perIndex := harness.MakeIndexedBatchJob("per-index", ns).BackoffLimitPerIndex(1).Obj()
		withPolicy := harness.MakeIndexedBatchJob("policy", ns).PodFailurePolicy(
			harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 42)).Obj()
		for _, j := range []*ibjv1.IndexedBatchJob{plain, perIndex, withPolicy} {
			Expect(k8sClient.Create(ctx, j)).To(Succeed())
		}
		get := func(j *ibjv1.IndexedBatchJob) ibjv1.IndexedBatchJobSpec {
			out := &ibjv1.IndexedBatchJob{}
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(j), out)).To(Succeed())
			return out.Spec
		}
		Expect(get(plain).BackoffLimit).To(HaveValue(BeEquivalentTo(6)))
		Expect(get(plain).PodReplacementPolicy).To(HaveValue(Equal(batchv1.TerminatingOrFailed)))
		Expect(get(perIndex).BackoffLimit).To(HaveValue(BeEquivalentTo(math.MaxInt32)))
		Expect(get(withPolicy).PodReplacementPolicy).To(HaveValue(Equal(batchv1.Failed)))
	})
})
