package e2e

import (
	"context"
	"fmt"
	"os"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
)

// startSpecCluster starts a kwok cluster of a spec's own (opts, with the
// suite's Root and a new directory ibj-e2e-<name>-*), saying what it
// starts (what), and stops it when the spec, or its Ordered container,
// ends. Its directory, with every component's log, is kept when the spec
// or the suite failed, or IBJ_E2E_KEEP_LOGS is set.
func startSpecCluster(ctx context.Context, name, what string, opts kwokcluster.Options) *kwokcluster.Cluster {
	GinkgoHelper()
	dir, err := os.MkdirTemp("", "ibj-e2e-"+name+"-")
	Expect(err).NotTo(HaveOccurred())
	By(fmt.Sprintf("starting %s in %s", what, dir))
	opts.Root, opts.Dir, opts.Progress = root, dir, GinkgoWriter
	c, err := kwokcluster.Start(ctx, opts)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		Expect(c.Stop()).To(Succeed())
		if CurrentSpecReport().Failed() || suiteFailed || os.Getenv("IBJ_E2E_KEEP_LOGS") != "" {
			fmt.Printf("e2e: the %s cluster's logs are kept in %s\n", name, dir)
		} else {
			_ = os.RemoveAll(dir)
		}
	})
	return c
}

// nodeCapacity is a kwok node's allocatable: cpu and memory as given, and
// 110 pods, the kubelet's default.
func nodeCapacity(cpu, memory string) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory),
		corev1.ResourcePods: resource.MustParse("110"),
	}
}
