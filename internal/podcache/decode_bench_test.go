package podcache

import (
	"errors"
	"io"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// benchWatch is a watch of a job's pods as a cluster sends it: each pod
// added, then modified as the kubelet runs and ends it, with the spec an
// admitted pod carries (a service-account token volume, tolerations,
// resources, env).
func benchWatch(b *testing.B, pods int) []byte {
	b.Helper()
	job := harness.MakeIndexedBatchJob("train", "ns").Obj()
	job.UID = "job-uid"
	var events []watch.Event
	for i := range int32(pods) {
		w := harness.MakePod(job, i, 0, created)
		admitted(w.Pod)
		events = append(events, watch.Event{Type: watch.Added, Object: w.DeepCopy()})
		events = append(events, watch.Event{Type: watch.Modified, Object: w.Running().DeepCopy()})
		end := w.SucceededAt(testNow)
		if i%10 == 0 {
			end = w.FailedAt(testNow, 1)
		}
		events = append(events, watch.Event{Type: watch.Modified, Object: end.DeepCopy()})
	}
	return serverWatchStream(b, events)
}

// admitted adds what admission and the scheduler add to a pod.
func admitted(pod *corev1.Pod) {
	pod.ResourceVersion = "123456"
	pod.Spec.NodeName = "node-1"
	pod.Spec.ServiceAccountName = "default"
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	pod.Spec.Tolerations = []corev1.Toleration{
		{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
		}}}})
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
		c.Env = append(c.Env, corev1.EnvVar{Name: "JOB_COMPLETION_INDEX", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['batch.indexedjob.dev/completion-index']"}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true})
		c.TerminationMessagePath = "/dev/termination-log"
		c.ImagePullPolicy = corev1.PullIfNotPresent
	}
}

// BenchmarkPodWatchDecode pairs the pod informer's two ways of reading a
// watch of pods into jobpod.Pods: the generated Pod decoder with client-go's
// copies ("generated"), and wirePod read in place ("wire"). Run it with
// -count and compare the pairs.
func BenchmarkPodWatchDecode(b *testing.B) {
	const pods = 1000
	stream := benchWatch(b, pods)
	for _, c := range []struct {
		name string
		ns   runtime.NegotiatedSerializer
	}{
		{"generated", clientgoscheme.Codecs.WithoutConversion()},
		{"wire", wireSerializer},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				dec := clientWatchDecoder(b, c.ns, stream)
				n := 0
				for {
					_, obj, err := dec.Decode()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					out, err := compactPod(obj)
					if _, ok := out.(*jobpod.Pod); err != nil || !ok {
						b.Fatalf("event %d decoded to %T, %v", n, out, err)
					}
					n++
				}
				if n != 3*pods {
					b.Fatalf("decoded %d events, want %d", n, 3*pods)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*3*pods), "ns/event")
		})
	}
}
