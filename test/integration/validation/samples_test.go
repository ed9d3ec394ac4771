package validation

import (
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// Every sample the docs point users at must be admitted as written.
var _ = Describe("The samples in config/samples", func() {
	paths, err := filepath.Glob(filepath.Join("..", "..", "..", "config", "samples", "batch_*.yaml"))
	if err != nil || len(paths) == 0 {
		Fail("no samples found under config/samples")
	}
	for _, path := range paths {
		It("admits "+filepath.Base(path), func() {
			raw, err := os.ReadFile(path)
			Expect(err).NotTo(HaveOccurred())
			// Strictly decodable as our type: no misspelt field.
			Expect(yaml.UnmarshalStrict(raw, &v1alpha1.IndexedBatchJob{})).To(Succeed())
			// Sent as written, as kubectl sends it (a typed client would add
			// the empty values of fields the sample leaves out).
			u := &unstructured.Unstructured{}
			Expect(yaml.Unmarshal(raw, &u.Object)).To(Succeed())
			u.SetNamespace("default")
			Expect(k8sClient.Create(ctx, u)).To(Succeed())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, u))).To(Succeed()) })
		})
	}
})
