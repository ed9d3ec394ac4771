package e2e

import (
	"slices"
	"sort"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
)

// jobPodWatch keeps what a watch saw of a namespace's job pods (those
// with a completion index), each pod by UID, also once it is gone: the
// node it was bound to, when it was first seen, the DisruptionTarget
// condition it got, and the claims its status names. A preempted pod of
// either controller goes as soon as its finalizer is released, so a
// listing after the fact would miss it.
type jobPodWatch struct {
	mu   sync.Mutex
	pods map[types.UID]*watchedPod
}

type watchedPod struct {
	name, index, node string
	seen              time.Time
	disrupted         string
	disruptedAt       time.Time
	claims            []string
}

// watchJobPods starts watching the job pods of ns until the spec ends.
func watchJobPods(sc *kwokcluster.Cluster, ns string) *jobPodWatch {
	GinkgoHelper()
	cs, err := kubernetes.NewForConfig(sc.Config)
	Expect(err).NotTo(HaveOccurred())
	w := &jobPodWatch{pods: map[types.UID]*watchedPod{}}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.observe,
		UpdateFunc: func(_, obj any) { w.observe(obj) },
	})
	Expect(err).NotTo(HaveOccurred())
	stop := make(chan struct{})
	factory.Start(stop)
	DeferCleanup(func() {
		close(stop)
		factory.Shutdown()
	})
	Eventually(inf.HasSynced).WithTimeout(10 * time.Second).Should(BeTrue())
	return w
}

func (w *jobPodWatch) observe(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || indexOf(p) == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.pods[p.UID]
	if r == nil {
		r = &watchedPod{name: p.Name, index: indexOf(p), seen: time.Now()}
		w.pods[p.UID] = r
	}
	if p.Spec.NodeName != "" {
		r.node = p.Spec.NodeName
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && r.disrupted == "" {
			r.disrupted, r.disruptedAt = c.Reason, time.Now()
		}
	}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil && !slices.Contains(r.claims, *s.ResourceClaimName) {
			r.claims = append(r.claims, *s.ResourceClaimName)
		}
	}
}

// generations are the pods of each index in the order they were first
// seen: generation k is each index's k-th pod.
func (w *jobPodWatch) generations() [][]*watchedPod {
	w.mu.Lock()
	defer w.mu.Unlock()
	byIndex := map[string][]*watchedPod{}
	for _, r := range w.pods {
		byIndex[r.index] = append(byIndex[r.index], r)
	}
	var gens [][]*watchedPod
	for _, pods := range byIndex {
		sort.Slice(pods, func(a, b int) bool { return pods[a].seen.Before(pods[b].seen) })
		for k, r := range pods {
			for len(gens) <= k {
				gens = append(gens, nil)
			}
			gens[k] = append(gens[k], r)
		}
	}
	return gens
}

// placements are the node of each index in each generation.
func (w *jobPodWatch) placements() []map[string]string {
	gens := w.generations()
	out := make([]map[string]string, 0, len(gens))
	for _, gen := range gens {
		m := map[string]string{}
		for _, r := range gen {
			m[r.index] = r.node
		}
		out = append(out, m)
	}
	return out
}

// disrupted are the pods of generation gen that got a DisruptionTarget
// condition, by name, with its reason, and the time between the first and
// the last of them.
func (w *jobPodWatch) disrupted(gen int) (map[string]string, time.Duration) {
	gens := w.generations()
	out := map[string]string{}
	if gen >= len(gens) {
		return out, 0
	}
	var first, last time.Time
	for _, r := range gens[gen] {
		if r.disrupted == "" {
			continue
		}
		out[r.name] = r.disrupted
		if first.IsZero() || r.disruptedAt.Before(first) {
			first = r.disruptedAt
		}
		if r.disruptedAt.After(last) {
			last = r.disruptedAt
		}
	}
	return out, last.Sub(first)
}

// claimsNamed are the ResourceClaims the pods' statuses named, sorted.
func (w *jobPodWatch) claimsNamed() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, r := range w.pods {
		out = append(out, r.claims...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
