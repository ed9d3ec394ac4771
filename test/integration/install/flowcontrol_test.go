package install_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var _ = Describe("A priority level of the operator's own", func() {
	const (
		plcKey = "PriorityLevelConfiguration//" + releaseName
		fsKey  = "FlowSchema//" + releaseName
	)

	It("is built by config/flowcontrol and rendered the same by the chart with flowControl.enabled, and the API server takes both", func() {
		kustomized := parseManifests(kustomizeBuild("", "config/flowcontrol"))
		plain := parseManifests(kustomizeBuild("", "config/default"))
		Expect(keysOf(kustomized)).To(ConsistOf(append(keysOf(plain), fsKey, plcKey)), "config/default and the two objects, nothing else")

		By("matching the ServiceAccount the manager runs as")
		var fs flowcontrolv1.FlowSchema
		Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(kustomized[fsKey], &fs)).To(Succeed())
		Expect(fs.Spec.PriorityLevelConfiguration.Name).To(Equal(releaseName))
		Expect(fs.Spec.MatchingPrecedence).To(BeNumerically("<", 9000), "before service-accounts")
		Expect(fs.Spec.Rules).To(HaveLen(1))
		Expect(fs.Spec.Rules[0].Subjects).To(ConsistOf(flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindServiceAccount,
			ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Name: managerSA, Namespace: installNamespace}}))
		deployment := plain["Deployment/"+installNamespace+"/"+managerSA]
		podSpec := deployment["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		Expect(podSpec["serviceAccountName"]).To(Equal(managerSA))

		By("rendering the same from the chart, and nothing of it by default")
		helmed := parseManifests(helmTemplate(releaseName, installNamespace, "flowControl.enabled=true"))
		for _, key := range []string{fsKey, plcKey} {
			Expect(helmed).To(HaveKey(key))
			Expect(normalized(helmed[key])).To(Equal(normalized(kustomized[key])), key)
		}
		byDefault := parseManifests(helmTemplate(releaseName, installNamespace))
		Expect(byDefault).NotTo(HaveKey(fsKey))
		Expect(byDefault).NotTo(HaveKey(plcKey))

		By("being valid objects for the API server")
		for _, key := range []string{plcKey, fsKey} {
			u := &unstructured.Unstructured{Object: runtime.DeepCopyJSON(kustomized[key])}
			Expect(k8sClient.Create(context.Background(), u, client.DryRunAll)).To(Succeed(), key)
		}
	})
})
