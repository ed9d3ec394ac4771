package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// soakLanes is how many jobs exist at once during the soak: each lane
// creates a job, waits for its end, deletes it and starts the next.
const soakLanes = 40

// soakWarmUp is how many jobs go before the readings are held flat: the
// operator's bounded caches (the event recorder's LRUs, maps grown to the
// jobs that exist at once) fill during the first quarter.
func soakWarmUp(jobs int) int64 { return int64(jobs) / 4 }

// soakStores are the operator's per-job and per-pod stores
// (indexedbatchjob_controller_tracked_entries).
var soakStores = []string{"job_states", "expected_creates", "expected_finalizers", "job_uids", "finalizer_releases", "taken_services", "paced_events", "taken_pod_names", "gone_pods", "gangs", "job_order", "cached_pods"}

// soakSample is one reading of the operator during the soak.
type soakSample struct {
	at              time.Duration
	gone, existing  int64
	heapMiB         float64 // live heap right after a forced GC
	goroutines, fds float64
	series          float64 // lines of the metrics endpoint
	stores          map[string]float64
}

// The names of a sample's readings of the operator.
const (
	heapReading       = "heap MiB"
	goroutinesReading = "goroutines"
	fdsReading        = "open fds"
	seriesReading     = "metric series"
)

// soakLimits are how much each reading may grow over the soak (by a least
// squares fit against the jobs gone, from the end of the warm-up (soakWarmUp) to the
// end): what an operator whose state follows the jobs that exist shows
// as noise, far below what one byte more per job gone would add up to.
var soakLimits = map[string]float64{heapReading: 8, goroutinesReading: 25, fdsReading: 25, seriesReading: 50}

func (s soakSample) value(name string) float64 {
	switch name {
	case heapReading:
		return s.heapMiB
	case goroutinesReading:
		return s.goroutines
	case fdsReading:
		return s.fds
	case seriesReading:
		return s.series
	}
	return s.stores[name]
}

// scrapeOperator forces a GC through pprof, then reads the metrics.
func scrapeOperator(metricsPort, pprofPort int) (soakSample, error) {
	var s soakSample
	if _, err := heapProfile(pprofPort); err != nil {
		return s, err
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	if err != nil {
		return s, err
	}
	defer func() { _ = resp.Body.Close() }()
	s.stores = map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s.series++
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch {
		case name == "go_memstats_heap_alloc_bytes":
			s.heapMiB = v / (1 << 20)
		case name == "go_goroutines":
			s.goroutines = v
		case name == "process_open_fds":
			s.fds = v
		case strings.HasPrefix(name, `indexedbatchjob_controller_tracked_entries{store="`):
			s.stores[strings.TrimSuffix(strings.TrimPrefix(name, `indexedbatchjob_controller_tracked_entries{store="`), `"}`)] = v
		}
	}
	return s, sc.Err()
}

// heapProfile runs a GC in the operator and returns its heap profile.
func heapProfile(pprofPort int) ([]byte, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?gc=1", pprofPort))
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	return io.ReadAll(resp.Body)
}

// saveHeapProfile writes the operator's heap profile (after a GC) to path.
func saveHeapProfile(pprofPort int, path string) error {
	profile, err := heapProfile(pprofPort)
	if err != nil {
		return err
	}
	return os.WriteFile(path, profile, 0o644)
}

// growth is the rise of a reading over the samples, by a least squares
// line against the jobs gone.
func growth(samples []soakSample, name string) float64 {
	if len(samples) < 2 {
		return 0
	}
	var n, sx, sy, sxx, sxy float64
	for _, s := range samples {
		x, y := float64(s.gone), s.value(name)
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return 0
	}
	slope := (n*sxy - sx*sy) / den
	return slope * float64(samples[len(samples)-1].gone-samples[0].gone)
}

// jobEnds tells a lane when its job ended or is gone, from a watch.
type jobEnds struct {
	mu      sync.Mutex
	waiters map[string]chan struct{}
	ended   map[string]bool
}

func (e *jobEnds) wait(name string) chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch := make(chan struct{})
	if e.ended[name] {
		close(ch)
		return ch
	}
	e.waiters[name] = ch
	return ch
}

func (e *jobEnds) signal(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ended[name] = true
	if ch := e.waiters[name]; ch != nil {
		close(ch)
		delete(e.waiters, name)
	}
}

func (e *jobEnds) reset(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.ended, name)
}

// soak runs cfg.soakJobs jobs through an operator, soakLanes at a time,
// each created, run, ended and deleted (half by their TTL, half as a user
// deletes a job, its pods deleted after it as the garbage collector
// would), while sampling the operator; it fails if any reading grows with
// the jobs gone, or a per-job store is not empty once no job exists.
func soak(ctx context.Context, cfg fleetConfig) {
	GinkgoHelper()
	metricsPort, err := cluster.FreePort()
	Expect(err).NotTo(HaveOccurred())
	pprofPort, err := cluster.FreePort()
	Expect(err).NotTo(HaveOccurred())
	// The operator watches only the soak's namespace, so that its stores
	// hold nothing of the jobs other specs left behind.
	ns := newNamespace(ctx)
	o := startOperator(append(slices.Clone(fleetFlags), "--namespaces="+ns,
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(metricsPort), "--metrics-secure=false",
		"--pprof-bind-address=127.0.0.1:"+strconv.Itoa(pprofPort))...)
	DeferCleanup(o.stop)

	cs, err := kubernetes.NewForConfig(cluster.Config)
	Expect(err).NotTo(HaveOccurred())
	runCtx, cancel := context.WithCancel(context.Background())
	DeferCleanup(cancel)
	sim := podsim.New(podsim.Options{
		Client: cs, Namespace: ns, LabelSelector: ibjv1.JobNameLabel,
		IndexLabels: []string{ibjv1.CompletionIndexLabel}, JobLabel: ibjv1.JobNameLabel,
		Script:  func(*corev1.Pod, int) podsim.Plan { return podsim.Plan{Run: 200 * time.Millisecond} },
		Workers: 16,
	})
	Expect(sim.Run(runCtx)).To(Succeed())

	run := &soakRun{ns: ns, jobs: cfg.soakJobs, ends: watchJobEnds(ctx, runCtx, ns)}
	start := time.Now()
	var samples []soakSample
	var samplesMu sync.Mutex
	warmProfile := false
	sample := func() {
		s, err := scrapeOperator(metricsPort, pprofPort)
		if err != nil {
			fmt.Fprintln(GinkgoWriter, "soak: scrape failed:", err)
			return
		}
		s.at = time.Since(start).Round(time.Second)
		s.gone = run.gone.Load()
		if dir := os.Getenv("IBJ_SOAK_OUT"); dir != "" && !warmProfile && s.gone >= soakWarmUp(cfg.soakJobs) {
			// The heap at the end of the warm-up, to compare with the
			// one left at the end (go tool pprof -diff_base).
			warmProfile = os.MkdirAll(dir, 0o755) == nil && saveHeapProfile(pprofPort, filepath.Join(dir, "heap-warm.pprof")) == nil
		}
		s.existing = run.created.Load() - s.gone
		samplesMu.Lock()
		samples = append(samples, s)
		samplesMu.Unlock()
	}
	sampling := make(chan struct{})
	go func() {
		defer close(sampling)
		for runCtx.Err() == nil && run.gone.Load() < int64(cfg.soakJobs) {
			sample()
			select {
			case <-runCtx.Done():
			case <-time.After(2 * time.Second):
			}
		}
	}()

	errs := make(chan error, soakLanes)
	for range soakLanes {
		go func() { errs <- run.lane(ctx) }()
	}
	for range soakLanes {
		Expect(<-errs).To(Succeed())
	}
	<-sampling
	elapsed := time.Since(start)

	By("waiting for every store to empty once no job exists")
	Eventually(func(g Gomega) {
		var pods corev1.PodList
		g.Expect(k8sClient.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
		g.Expect(pods.Items).To(BeEmpty(), "pods left")
		s, err := scrapeOperator(metricsPort, pprofPort)
		g.Expect(err).NotTo(HaveOccurred())
		for _, store := range soakStores {
			g.Expect(s.stores).To(HaveKeyWithValue(store, 0.0), "store %s", store)
		}
	}).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
	sample()
	cancel()

	warm := samples[:0:0]
	for _, s := range samples {
		if s.gone >= soakWarmUp(cfg.soakJobs) {
			warm = append(warm, s)
		}
	}
	report := soakReport(samples, cfg.soakJobs, elapsed)
	AddReportEntry("soak", report)
	fmt.Fprintln(GinkgoWriter, report)
	if dir := os.Getenv("IBJ_SOAK_OUT"); dir != "" {
		Expect(writeSoakOutput(dir, samples, report)).To(Succeed())
		// The heap once every job is gone, to see what is left.
		Expect(saveHeapProfile(pprofPort, filepath.Join(dir, "heap-after.pprof"))).To(Succeed())
	}
	Expect(len(warm)).To(BeNumerically(">=", 5), "too few samples after the warm-up to see a trend")
	for name, limit := range soakLimits {
		Expect(growth(warm, name)).To(BeNumerically("<=", limit),
			"%s grows with the jobs that came and went (limit %v over the run)", name, limit)
	}
	for _, store := range soakStores {
		Expect(growth(warm, store)).To(BeNumerically("<=", float64(soakLanes)),
			"store %s grows with the jobs that came and went", store)
	}
	Expect(sim.Violations()).To(BeEmpty())
}

// watchJobEnds signals "<job>/end" when a job of ns ends and "<job>/gone"
// when it is deleted, from an informer that runs until runCtx ends.
func watchJobEnds(ctx, runCtx context.Context, ns string) *jobEnds {
	GinkgoHelper()
	ends := &jobEnds{waiters: map[string]chan struct{}{}, ended: map[string]bool{}}
	jobCache, err := cache.New(cluster.Config, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	Expect(err).NotTo(HaveOccurred())
	inf, err := jobCache.GetInformer(ctx, &ibjv1.IndexedBatchJob{})
	Expect(err).NotTo(HaveOccurred())
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if j, ok := obj.(*ibjv1.IndexedBatchJob); ok &&
				(harness.ConditionReason(j, ibjv1.ConditionComplete) != "" || harness.ConditionReason(j, ibjv1.ConditionFailed) != "") {
				ends.signal(j.Name + "/end")
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if j, ok := obj.(*ibjv1.IndexedBatchJob); ok {
				ends.signal(j.Name + "/end")
				ends.signal(j.Name + "/gone")
			}
		},
	})
	Expect(err).NotTo(HaveOccurred())
	go func() { _ = jobCache.Start(runCtx) }()
	Expect(jobCache.WaitForCacheSync(ctx)).To(BeTrue())
	return ends
}

// soakRun is the soak's jobs: each lane takes the next, creates it, waits
// for its end, deletes it (or lets its TTL) and waits until it is gone.
type soakRun struct {
	ns   string
	jobs int
	ends *jobEnds
	// next is the next job to create; created and gone count the jobs
	// created and gone so far.
	next, created, gone atomic.Int64
}

// lane runs jobs one after the other until none is left to create.
func (r *soakRun) lane(ctx context.Context) error {
	for i := r.next.Add(1) - 1; i < int64(r.jobs); i = r.next.Add(1) - 1 {
		name := fmt.Sprintf("soak-%d", i)
		ttl := i%2 == 0
		w := harness.MakeIndexedBatchJob(name, r.ns).Completions(int32(1 + i%2)).Parallelism(2)
		if ttl {
			w.TTLSecondsAfterFinished(0)
		}
		job := w.Obj()
		job.Spec.Template.Spec.NodeName = simNode
		endCh, goneCh := r.ends.wait(name+"/end"), r.ends.wait(name+"/gone")
		if err := createRetrying(ctx, job); err != nil {
			return err
		}
		r.created.Add(1)
		select {
		case <-endCh:
		case <-time.After(3 * time.Minute):
			return fmt.Errorf("job %s did not end in 3 minutes", name)
		}
		if !ttl {
			err := k8sClient.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground))
			if client.IgnoreNotFound(err) != nil {
				return err
			}
		}
		select {
		case <-goneCh:
		case <-time.After(3 * time.Minute):
			return fmt.Errorf("job %s not gone 3 minutes after its end", name)
		}
		if !ttl {
			// What the garbage collector does for a Job's pods.
			err := k8sClient.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(r.ns), client.MatchingLabels{ibjv1.JobNameLabel: name})
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		r.ends.reset(name + "/end")
		r.ends.reset(name + "/gone")
		r.gone.Add(1)
	}
	return nil
}

// soakReport prints the curve: about 20 rows of the samples and the
// growth of each reading.
func soakReport(samples []soakSample, jobs int, elapsed time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak: %d jobs created, run and deleted in %s (%d at a time), %d samples\n",
		jobs, elapsed.Round(time.Second), soakLanes, len(samples))
	fmt.Fprintf(&b, "%8s %7s %8s %9s %10s %8s %7s", "at", "gone", "existing", "heap MiB", "goroutines", "open fds", "series")
	for _, store := range soakStores {
		fmt.Fprintf(&b, " %s", store)
	}
	b.WriteString("\n")
	step := max(1, len(samples)/20)
	for i, s := range samples {
		if i%step != 0 && i != len(samples)-1 {
			continue
		}
		fmt.Fprintf(&b, "%8s %7d %8d %9.1f %10.0f %8.0f %7.0f", s.at, s.gone, s.existing, s.heapMiB, s.goroutines, s.fds, s.series)
		for _, store := range soakStores {
			fmt.Fprintf(&b, " %*.0f", len(store), s.stores[store])
		}
		b.WriteString("\n")
	}
	return b.String()
}

// writeSoakOutput writes the samples as soak.csv, the report as soak.txt
// and a chart of the readings against the jobs gone as soak.svg.
func writeSoakOutput(dir string, samples []soakSample, report string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var csv strings.Builder
	csv.WriteString("seconds,jobs_gone,jobs_existing,heap_mib,goroutines,open_fds,metric_series," + strings.Join(soakStores, ",") + "\n")
	for _, s := range samples {
		fmt.Fprintf(&csv, "%.0f,%d,%d,%.2f,%.0f,%.0f,%.0f", s.at.Seconds(), s.gone, s.existing, s.heapMiB, s.goroutines, s.fds, s.series)
		for _, store := range soakStores {
			fmt.Fprintf(&csv, ",%.0f", s.stores[store])
		}
		csv.WriteString("\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "soak.csv"), []byte(csv.String()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "soak.txt"), []byte(report), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "soak.svg"), []byte(soakSVG(samples)), 0o644)
}

// soakSVG charts each reading against the jobs gone, one panel each, on a
// scale from zero to the panel's largest value.
func soakSVG(samples []soakSample) string {
	panels := []string{heapReading, goroutinesReading, fdsReading, seriesReading, "job_uids", "cached_pods"}
	const w, h, pad = 360, 160, 40
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", 3*w, 2*h+20)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	maxGone := float64(max(1, samples[len(samples)-1].gone))
	for i, name := range panels {
		x0, y0 := float64(i%3*w+pad), float64(i/3*h+20)
		pw, ph := float64(w-pad-10), float64(h-pad)
		top := 1.0
		for _, s := range samples {
			top = max(top, s.value(name)*1.1)
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s (0 to %.0f) against jobs gone (0 to %.0f)</text>`+"\n", x0, y0-6, name, top, maxGone)
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", x0, y0, pw, ph)
		pts := make([]string, 0, len(samples))
		for _, s := range samples {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x0+pw*float64(s.gone)/maxGone, y0+ph-ph*s.value(name)/top))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="%s"/>`+"\n", strings.Join(pts, " "))
	}
	b.WriteString("</svg>\n")
	return b.String()
}
