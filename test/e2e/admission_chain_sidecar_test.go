package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
)

// A service mesh's injector, as the admission chain meets it: a mutating
// webhook that adds a native sidecar (an init container with restartPolicy
// Always) to the pods it is sent, and the kubelet's report of such a pod,
// whose sidecar ends killed (137) once the pod's own containers end.

// podsRule matches the pods of the core API.
var podsRule = admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}

// sidecarName is the injected sidecar's name.
const sidecarName = "mesh-proxy"

// startSidecarInjector serves a mutating webhook from this process over
// HTTPS (a certificate of a CA of its own, for 127.0.0.1) and registers it
// for the pod creates of ns labelled chainLabel=id, until the spec ends.
func startSidecarInjector(ctx context.Context, ns, id string) {
	GinkgoHelper()
	ca, err := controlplane.NewCA("admission-chain-sidecar-injector")
	Expect(err).NotTo(HaveOccurred())
	certPEM, keyPEM, err := ca.ServingCert([]net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	Expect(err).NotTo(HaveOccurred())
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	Expect(err).NotTo(HaveOccurred())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	mux := http.NewServeMux()
	mux.HandleFunc("/inject", injectSidecar)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			GinkgoWriter.Printf("sidecar injector: %v\n", err)
		}
	}()
	DeferCleanup(srv.Close)

	port := ln.Addr().(*net.TCPAddr).Port
	config := &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "chain-" + id + "-" + ns},
		Webhooks: []admissionregv1.MutatingWebhook{{
			Name: "sidecar.admission-chain.e2e.indexedjob.dev",
			ClientConfig: admissionregv1.WebhookClientConfig{
				URL:      ptr.To("https://127.0.0.1:" + strconv.Itoa(port) + "/inject"),
				CABundle: ca.CertPEM,
			},
			Rules: []admissionregv1.RuleWithOperations{{
				Operations: []admissionregv1.OperationType{admissionregv1.Create},
				Rule:       podsRule,
			}},
			FailurePolicy:           ptr.To(admissionregv1.Fail),
			SideEffects:             ptr.To(admissionregv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](5),
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{chainLabel: id}},
		}},
	}
	Expect(k8sClient.Create(ctx, config)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, config))).To(Succeed())
	})
}

// injectSidecar answers an AdmissionReview of a pod with a JSONPatch that
// adds the sidecar, unless the pod has it.
func injectSidecar(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	var pod corev1.Pod
	if err := json.Unmarshal(review.Request.Object.Raw, &pod); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !hasSidecar(&pod) {
		sidecar := corev1.Container{Name: sidecarName, Image: harness.DefaultImage, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}
		op := map[string]any{"op": "add", "path": "/spec/initContainers/-", "value": sidecar}
		if len(pod.Spec.InitContainers) == 0 {
			op = map[string]any{"op": "add", "path": "/spec/initContainers", "value": []corev1.Container{sidecar}}
		}
		patch, err := json.Marshal([]map[string]any{op})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp.Patch, resp.PatchType = patch, ptr.To(admissionv1.PatchTypeJSONPatch)
	}
	review.Request, review.Response = nil, resp
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// hasSidecar: the pod carries the injected native sidecar.
func hasSidecar(p *corev1.Pod) bool {
	for _, c := range p.Spec.InitContainers {
		if c.Name == sidecarName && ptr.Deref(c.RestartPolicy, "") == corev1.ContainerRestartPolicyAlways {
			return true
		}
	}
	return false
}

// sidecarNode is the node of the sidecar-killed jobs' pods: neither kwok nor
// a simulator plays it, endSidecarPods does.
const sidecarNode = "sidecar-node"

// endSidecarPods plays the kubelet of ns's pods on sidecarNode, until the
// spec ends: half a second after a pod appears it ends, its own container
// with exit code 1 for its index's first pod and 0 for the later ones, and
// its injected sidecar killed (exit code 137), as the kubelet stops a
// sidecar once the pod's containers end. A rule on exit code 137 of the
// job must not take the sidecar's kill for the pod's.
func endSidecarPods(ctx context.Context, ns string) {
	GinkgoHelper()
	cs := chainClientset()
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + sidecarNode})
	Expect(err).NotTo(HaveOccurred())
	w, err := watchtools.NewRetryWatcherWithContext(context.Background(), list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = "spec.nodeName=" + sidecarNode
			return cs.CoreV1().Pods(ns).Watch(ctx, o)
		},
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	var mu sync.Mutex
	seen := map[string]bool{} // "<owner>/<index>" with a pod already
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type != watch.Added {
				continue
			}
			key := controllerOf(pod) + "/" + podIndex(pod)
			mu.Lock()
			exit := int32(0)
			if !seen[key] {
				exit = 1
			}
			seen[key] = true
			mu.Unlock()
			go endWithSidecar(cs, pod.Namespace, pod.Name, exit)
		}
	}()
}

// podIndex is the pod's completion index label, ours or batch/v1's.
func podIndex(p *corev1.Pod) string {
	if ix, ok := p.Labels[ibjv1.CompletionIndexLabel]; ok {
		return ix
	}
	return p.Labels[batchv1.JobCompletionIndexAnnotation]
}

// endWithSidecar writes the pod's end half a second from now: its
// containers exit with exit (137 if it was deleted meanwhile), its
// sidecars with 137.
func endWithSidecar(cs kubernetes.Interface, ns, name string, exit int32) {
	time.Sleep(500 * time.Millisecond)
	ctx := context.Background()
	for range 5 {
		pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || finished(pod) {
			return
		}
		if pod.DeletionTimestamp != nil {
			exit = 137
		}
		now := metav1.Now()
		start := now
		if pod.Status.StartTime != nil {
			start = *pod.Status.StartTime
		}
		terminated := func(c corev1.Container, code int32) corev1.ContainerStatus {
			reason := "Completed"
			if code != 0 {
				reason = "Error"
			}
			return corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: ptr.To(false),
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: start, FinishedAt: now}}}
		}
		pod.Status.Phase, pod.Status.StartTime = corev1.PodSucceeded, &start
		if exit != 0 {
			pod.Status.Phase = corev1.PodFailed
		}
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: now}}
		pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses = nil, nil
		for _, c := range pod.Spec.InitContainers {
			pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, terminated(c, 137))
		}
		for _, c := range pod.Spec.Containers {
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, terminated(c, exit))
		}
		if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err == nil {
			return
		}
	}
}
