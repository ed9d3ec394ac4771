// Command kubectl-ibj measures `kubectl ibj` on a job of many indexes: it
// starts a control plane (the test harness's controlplane: etcd and
// kube-apiserver, no operator), writes one job and the pods its run would
// have left (every index succeeded, one in a hundred after a failed first
// attempt), then runs the
// plugin binary (and kubectl, for comparison) as a user would and records
// each command's wall time, CPU time and peak RSS (getrusage of the child).
// With -completions above -indexes, the job is still running: its first
// -indexes indexes succeeded and the others have not started.
//
//	go build -o bin/kubectl-ibj ./cmd/kubectl-ibj
//	go run ./test/bench/kubectl-ibj -indexes 100000 -out docs/bench/kubectl-ibj.md
//	go run ./test/bench/kubectl-ibj -indexes 100 -completions 2147483647
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
)

const (
	namespace = "bench"
	jobName   = "big"
	// failEvery: every failEvery-th index failed once before it succeeded,
	// so it has two pods.
	failEvery = 100
)

func main() {
	indexes := flag.Int("indexes", 100000, "indexes that ran, one succeeded pod each")
	completions := flag.Int("completions", 0, "completions of the job (default: -indexes); the indexes beyond -indexes have not started")
	only := flag.String("only", "", "measure only the commands whose title contains this")
	plugin := flag.String("plugin", "bin/kubectl-ibj", "the plugin binary")
	assets := flag.String("assets", os.Getenv("KUBEBUILDER_ASSETS"), "directory with etcd, kube-apiserver and kubectl")
	workers := flag.Int("workers", 16, "parallel pod writes while populating")
	repeats := flag.Int("repeats", 3, "runs of each command; the median is reported")
	kubectlJSON := flag.Bool("kubectl-json", true, "also measure kubectl get pods -o json (it holds every pod: about 9 GiB at 100,000)")
	out := flag.String("out", "", "write the results as a Markdown table to this file (default: stdout only)")
	flag.Parse()
	if *assets == "" {
		log.Fatal("set -assets or KUBEBUILDER_ASSETS (make controlplane builds bin/k8s/v1.37.2)")
	}
	if *completions == 0 {
		*completions = *indexes
	}
	dir, err := os.MkdirTemp("", "kubectl-ibj-bench-")
	must(err)
	defer os.RemoveAll(dir)
	cp, c, kube := startControlPlane(*assets, dir)
	defer func() { _ = cp.Stop() }()

	start := time.Now()
	job := populate(context.Background(), c, kube, int32(*indexes), int32(*completions), *workers)
	log.Printf("wrote job %s and its pods in %s", job.Name, time.Since(start).Round(time.Second))

	var rows []string
	for _, cmd := range commands(*plugin, filepath.Join(*assets, "kubectl"), *kubectlJSON) {
		if !strings.Contains(cmd.title, *only) {
			continue
		}
		m := cmd.measure(cp.Kubeconfig, *repeats)
		output := humanBytes(m.outBytes)
		if m.err != nil {
			output += " (" + m.err.Error() + ")"
		}
		row := fmt.Sprintf("| `%s` | %.2f | %.2f | %.0f | %s |", cmd.title, m.wall.Seconds(), m.cpu.Seconds(), m.rssMiB, output)
		log.Print(row)
		rows = append(rows, row)
	}
	ran := "every index succeeded"
	if *completions > *indexes {
		ran = fmt.Sprintf("indexes 0-%d succeeded, the others not started", *indexes-1)
	}
	report := fmt.Sprintf("Job of %d indexes, %d pods (%s; one in %d after a failed first attempt); median of %d runs.\n\n"+
		"| command | wall s | CPU s | peak RSS MiB | output |\n| --- | ---: | ---: | ---: | ---: |\n%s\n",
		*completions, *indexes+(*indexes+failEvery-1)/failEvery, ran, failEvery, *repeats, strings.Join(rows, "\n"))
	fmt.Print(report)
	if *out != "" {
		must(os.WriteFile(*out, []byte(report), 0o644))
	}
}

// startControlPlane starts the harness's control plane of assets in dir,
// with the CRD, and returns it with its admin's clients, unthrottled (the
// clientset speaks protobuf, for the pods).
func startControlPlane(assets, dir string) (*controlplane.ControlPlane, client.Client, kubernetes.Interface) {
	cp, err := controlplane.Start(context.Background(), controlplane.Options{
		BinDir: assets, Dir: dir, Name: "bench",
		APIServerFlags: []string{
			// The pods are written directly: no controller creates the
			// default service account that admission plugin requires.
			"--disable-admission-plugins=ServiceAccount",
			"--max-requests-inflight=1000",
		},
		CRDPaths: []string{"config/crd/bases"},
	})
	must(err)
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = -1, 0
	scheme := runtime.NewScheme()
	must(clientgoscheme.AddToScheme(scheme))
	must(ibjv1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	must(err)
	protoCfg := rest.CopyConfig(cfg)
	protoCfg.ContentType = runtime.ContentTypeProtobuf
	kube, err := kubernetes.NewForConfig(protoCfg)
	must(err)
	return cp, c, kube
}

// commands are what the benchmark measures: the plugin's commands on the
// job, and kubectl's listing of its pods for comparison.
func commands(plugin, kubectl string, kubectlJSON bool) []command {
	const indexesCmd = "indexes"
	selector := ibjv1.JobNameLabel + "=" + jobName
	commands := []command{
		{"kubectl ibj indexes big", plugin, []string{indexesCmd, jobName}},
		{"kubectl ibj indexes big --failed", plugin, []string{indexesCmd, jobName, "--failed"}},
		{"kubectl ibj indexes big --all", plugin, []string{indexesCmd, jobName, "--all"}},
		{"kubectl ibj indexes big -o json", plugin, []string{indexesCmd, jobName, "-o", "json"}},
		{"kubectl ibj describe big", plugin, []string{"describe", jobName}},
		{"kubectl get pods -l " + selector, kubectl, []string{"get", "pods", "-l", selector}},
	}
	if kubectlJSON {
		commands = append(commands, command{"kubectl get pods -l " + selector + " -o json", kubectl, []string{"get", "pods", "-l", selector, "-o", "json"}})
	}
	return commands
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// populate writes the job with the status the operator would have left and
// the pods of its first n indexes, finished, with the statuses a kubelet
// writes. A job of more completions than n is still running.
func populate(ctx context.Context, c client.Client, kube kubernetes.Interface, n, completions int32, workers int) *ibjv1.IndexedBatchJob {
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}))
	job := &ibjv1.IndexedBatchJob{
		ObjectMeta: metav1.ObjectMeta{Name: jobName, Namespace: namespace},
		Spec: ibjv1.IndexedBatchJobSpec{
			Completions: completions, Parallelism: ptr.To[int32](500), BackoffLimitPerIndex: ptr.To[int32](1),
			Template: corev1.PodTemplateSpec{Spec: podSpec()},
		},
	}
	if completions > 100000 {
		// The API's rule for so many indexes with backoffLimitPerIndex.
		job.Spec.MaxFailedIndexes = ptr.To[int32](10000)
	}
	must(c.Create(ctx, job))
	now := metav1.Now()
	job.Status = ibjv1.IndexedBatchJobStatus{
		ObservedGeneration: job.Generation, Phase: ibjv1.PhaseComplete, StartTime: &now, CompletionTime: &now,
		Succeeded: n, Failed: (n + failEvery - 1) / failEvery, CompletedIndexes: fmt.Sprintf("0-%d", n-1), FailedIndexes: ptr.To(""),
		Conditions: []metav1.Condition{
			{Type: ibjv1.ConditionSuccessCriteriaMet, Status: metav1.ConditionTrue, Reason: ibjv1.ReasonCompletionsReached, LastTransitionTime: now},
			{Type: ibjv1.ConditionComplete, Status: metav1.ConditionTrue, Reason: ibjv1.ReasonCompletionsReached, LastTransitionTime: now},
		},
	}
	if completions > n {
		job.Status.Phase, job.Status.CompletionTime, job.Status.Conditions = ibjv1.PhaseRunning, nil, nil
	}
	must(c.Status().Update(ctx, job))

	type work struct{ index, attempt int32 }
	todo := make(chan work, workers)
	var done atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for w := range todo {
				writePod(ctx, kube, job, w.index, w.attempt)
				if d := done.Add(1); d%10000 == 0 {
					log.Printf("%d pods written", d)
				}
			}
		})
	}
	for i := range n {
		if i%failEvery == 0 {
			todo <- work{i, 0}
			todo <- work{i, 1}
		} else {
			todo <- work{i, 0}
		}
	}
	close(todo)
	wg.Wait()
	return job
}

// podSpec is a plausible batch pod: one container with a command, an
// environment and resources.
func podSpec() corev1.PodSpec {
	return corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{
			Name: "worker", Image: "registry.example.com/team/trainer:v1.2.3",
			Command: []string{"python", "-m", "trainer", "--shard=$(JOB_COMPLETION_INDEX)"},
			Env:     []corev1.EnvVar{{Name: "DATASET", Value: "s3://bucket/dataset"}, {Name: "EPOCHS", Value: "3"}},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi"),
			}},
		}},
	}
}

// writePod creates one pod of the job as the operator would and writes
// the status of its end as a kubelet would: exit code 1 for the first
// attempt of an index that failed once, 0 otherwise.
func writePod(ctx context.Context, kube kubernetes.Interface, job *ibjv1.IndexedBatchJob, index, attempt int32) {
	ix := strconv.Itoa(int(index))
	spec := podSpec()
	spec.NodeName = fmt.Sprintf("node-%d", index%50)
	spec.Hostname = fmt.Sprintf("%s-%d", job.Name, index)
	spec.Containers[0].Env = append([]corev1.EnvVar{{Name: ibjv1.CompletionIndexEnvName, Value: ix}}, spec.Containers[0].Env...)
	failures := "0"
	if attempt > 0 {
		failures = "1"
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-%d-%d", job.Name, index, attempt), Namespace: job.Namespace,
			Labels: map[string]string{ibjv1.JobNameLabel: job.Name, ibjv1.ControllerUIDLabel: string(job.UID), ibjv1.CompletionIndexLabel: ix},
			Annotations: map[string]string{ibjv1.CompletionIndexLabel: ix, ibjv1.AttemptAnnotation: strconv.Itoa(int(attempt)),
				ibjv1.IndexFailureCountAnnotation: failures, ibjv1.IndexIgnoredFailureCountAnnotation: "0"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, ibjv1.GroupVersion.WithKind("IndexedBatchJob"))},
		},
		Spec: spec,
	}
	created, err := kube.CoreV1().Pods(job.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	must(err)
	code := int32(0)
	phase := corev1.PodSucceeded
	if index%failEvery == 0 && attempt == 0 {
		code, phase = 1, corev1.PodFailed
	}
	started := metav1.NewTime(time.Now().Add(-time.Minute))
	finished := metav1.Now()
	created.Status = corev1.PodStatus{
		Phase: phase, HostIP: "10.0.0.1", PodIP: "10.1.0." + strconv.Itoa(int(index%250)), StartTime: &started,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: finished},
			{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: finished},
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "worker", Image: "registry.example.com/team/trainer:v1.2.3", ImageID: "registry.example.com/team/trainer@sha256:0123456789abcdef",
			ContainerID: "containerd://" + strings.Repeat("ab", 32),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: code, Reason: map[bool]string{true: "Completed", false: "Error"}[code == 0], StartedAt: started, FinishedAt: finished,
			}},
		}},
	}
	_, err = kube.CoreV1().Pods(job.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	must(err)
}

// command is one command line to measure.
type command struct {
	title string
	bin   string
	args  []string
}

type measurement struct {
	wall, cpu time.Duration
	rssMiB    float64
	outBytes  int64
	// err is how the command failed (killed for memory, say), if it did.
	err error
}

// measure runs the command repeats times and returns the median of each
// figure. A command that fails is measured until it failed, once.
func (c command) measure(kubeconfig string, repeats int) measurement {
	var ms []measurement
	for range repeats {
		cmd := exec.Command(c.bin, append(c.args, "-n", namespace, "--kubeconfig", kubeconfig)...)
		var out countingWriter
		cmd.Stdout = &out
		cmd.Stderr = os.Stderr
		start := time.Now()
		err := cmd.Run()
		if cmd.ProcessState == nil {
			log.Fatalf("%s: %v", c.title, err)
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		m := measurement{
			wall:     time.Since(start),
			cpu:      time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
			rssMiB:   float64(ru.Maxrss) / 1024,
			outBytes: out.n,
			err:      err,
		}
		if err != nil {
			log.Printf("%s: %v", c.title, err)
			return m
		}
		ms = append(ms, m)
	}
	median := func(f func(measurement) float64) float64 {
		xs := make([]float64, len(ms))
		for i, m := range ms {
			xs[i] = f(m)
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	return measurement{
		wall:     time.Duration(median(func(m measurement) float64 { return float64(m.wall) })),
		cpu:      time.Duration(median(func(m measurement) float64 { return float64(m.cpu) })),
		rssMiB:   median(func(m measurement) float64 { return m.rssMiB }),
		outBytes: ms[0].outBytes,
	}
}

// countingWriter discards what it is given and counts it.
type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

var _ io.Writer = (*countingWriter)(nil)

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
