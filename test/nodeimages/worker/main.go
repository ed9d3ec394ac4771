// Command worker is the workload of the node specs (test/e2e, label node):
// one static program whose flags say how its container behaves, by the
// completion index the Job controller or the operator gives it
// (JOB_COMPLETION_INDEX), so that one pod template makes some indexes fail.
//
//	worker [--duration D] [--fail-indexes 1,2] [--exit-code N] [--fail-after D]
//	       [--fail-when-env NAME=VALUE] [--fail-times N --state-dir DIR]
//	       [--term-delay D] [--alloc-mib N]
//	       [--alloc-indexes 1] [--write-mib N]
//	worker scrape URL
//
// It prints what it does, so `kubectl logs` of an index's pod tells its story.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// tokenFile is where the kubelet mounts the pod's service account token.
const tokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "scrape" {
		os.Exit(scrape(os.Args[2:]))
	}
	var (
		duration    = flag.Duration("duration", time.Second, "how long the container runs before it exits")
		failIndexes = flag.String("fail-indexes", "", "comma-separated completion indexes that exit with --exit-code instead of 0")
		exitCode    = flag.Int("exit-code", 1, "the exit code of a failing index")
		failAfter   = flag.Duration("fail-after", 0, "how long a failing index runs before it exits (0: --duration)")
		failWhen    = flag.String("fail-when-env", "", "NAME=VALUE: the indexes of --fail-indexes fail only while the environment variable NAME is VALUE")
		termDelay   = flag.Duration("term-delay", 0, "on SIGTERM, wait this long before exiting with 143 (0: exit at once)")
		allocMiB    = flag.Int("alloc-mib", 0, "MiB of memory to allocate and touch at the start, held until the end")
		allocOnly   = flag.String("alloc-indexes", "", "comma-separated completion indexes that allocate --alloc-mib (empty: every index)")
		writeMiB    = flag.Int("write-mib", 0, "MiB to write to a file in the container's writable layer at the start (its ephemeral storage)")
		failTimes   = flag.Int("fail-times", 0, "a failing index fails only this many times, then succeeds (0: always fails); "+
			"its failures so far are those of the pod's earlier runs, counted in --state-dir, plus $PRIOR_FAILURES")
		stateDir = flag.String("state-dir", "", "a directory that outlives the container (an emptyDir), where --fail-times counts the pod's failures "+
			"and each run writes when it exited, which the next run prints")
	)
	flag.Parse()
	index := os.Getenv("JOB_COMPLETION_INDEX")
	fmt.Printf("index %s: started, pod %s\n", index, os.Getenv("HOSTNAME"))
	// The clock's time to the nanosecond, which the container's timestamps
	// in the pod's status (whole seconds) do not give.
	fmt.Printf("index %s: started at %s\n", index, time.Now().Format(time.RFC3339Nano))
	if *stateDir != "" {
		// An earlier run of this container in the pod (restarted in
		// place), whose log the kubelet may have removed.
		if at, err := os.ReadFile(filepath.Join(*stateDir, "exited-at")); err == nil {
			fmt.Printf("index %s: the previous run exited at %s\n", index, at)
		}
	}

	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM)

	alloc := *allocMiB
	if *allocOnly != "" && !listed(*allocOnly, index) {
		alloc = 0
	}
	held := make([][]byte, 0, alloc)
	for range alloc {
		chunk := make([]byte, 1<<20)
		for i := 0; i < len(chunk); i += 4096 {
			chunk[i] = 1
		}
		held = append(held, chunk)
	}
	if alloc > 0 {
		fmt.Printf("index %s: holding %d MiB\n", index, len(held))
	}
	if *writeMiB > 0 {
		writeFile(index, *writeMiB)
	}

	code, runFor := 0, *duration
	if listed(*failIndexes, index) && envIs(*failWhen) && !failedEnough(index, *failTimes, *stateDir) {
		code = *exitCode
		if *failAfter > 0 {
			runFor = *failAfter
		}
	}
	select {
	case <-time.After(runFor):
		at := time.Now().Format(time.RFC3339Nano)
		fmt.Printf("index %s: exiting with %d at %s\n", index, code, at)
		if *stateDir != "" {
			_ = os.WriteFile(filepath.Join(*stateDir, "exited-at"), []byte(at), 0o644)
		}
		os.Exit(code)
	case <-terms:
		fmt.Printf("index %s: SIGTERM, exiting with 143 in %s\n", index, *termDelay)
		time.Sleep(*termDelay)
		os.Exit(143)
	}
}

// failedEnough reports whether the index failed --fail-times times
// already: in earlier runs of the container in this pod (restarts in
// place), which it counts in a file in stateDir, and in earlier pods
// ($PRIOR_FAILURES, such as the operator's job-index-failure-count
// annotation through the downward API). When not, it counts the failure
// this run is about to make.
func failedEnough(index string, times int, stateDir string) bool {
	if times <= 0 {
		return false
	}
	prior, _ := strconv.Atoi(os.Getenv("PRIOR_FAILURES"))
	file := filepath.Join(stateDir, "failures")
	here, _ := os.ReadFile(file)
	if n := prior + len(here); n >= times {
		fmt.Printf("index %s: failed %d times already, succeeding\n", index, n)
		return true
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, _ = f.Write([]byte("x"))
		_ = f.Sync()
		_ = f.Close()
	}
	return false
}

// writeFile writes mib MiB to /tmp/fill, in the container's writable layer,
// and syncs it, so that the kubelet counts it against the container's
// ephemeral-storage limit.
func writeFile(index string, mib int) {
	f, err := os.Create("/tmp/fill")
	if err != nil {
		fmt.Printf("index %s: %v\n", index, err)
		return
	}
	chunk := make([]byte, 1<<20)
	for range mib {
		if _, err := f.Write(chunk); err != nil {
			fmt.Printf("index %s: %v\n", index, err)
			break
		}
	}
	_ = f.Sync()
	_ = f.Close()
	fmt.Printf("index %s: wrote %d MiB to /tmp/fill\n", index, mib)
}

// envIs reports whether the environment variable named before '=' in
// nameValue has the value after it; true for an empty nameValue.
func envIs(nameValue string) bool {
	if nameValue == "" {
		return true
	}
	name, value, _ := strings.Cut(nameValue, "=")
	return os.Getenv(name) == value
}

// listed reports whether index is in the comma-separated list.
func listed(list, index string) bool {
	return index != "" && slices.Contains(strings.Split(list, ","), index)
}

// scrape GETs a URL with the pod's service account token, as Prometheus
// scrapes the operator's metrics Service, and prints the status and the
// body's first lines. Its exit code is 0 only for a 200.
func scrape(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: worker scrape URL")
		return 2
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scrape:", err)
		return 1
	}
	req, err := http.NewRequest(http.MethodGet, args[0], nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scrape:", err)
		return 2
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	// The operator serves its metrics with a certificate of its own making,
	// as Prometheus' kubebuilder scrape configuration trusts it.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a self-signed metrics certificate
	}}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scrape:", err)
		return 1
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	fmt.Printf("status %d\n", resp.StatusCode)
	lines := strings.SplitN(string(body), "\n", 2001)
	fmt.Println(strings.Join(lines[:min(len(lines), 2000)], "\n"))
	if resp.StatusCode != http.StatusOK {
		return 1
	}
	return 0
}
