// Command worker is the workload of the node specs (test/e2e, label node):
// one static program whose flags say how its container behaves, by the
// completion index the Job controller or the operator gives it
// (JOB_COMPLETION_INDEX), so that one pod template makes some indexes fail.
//
//	worker [--duration D] [--fail-indexes 1,2] [--exit-code N] [--fail-after D]
//	       [--term-delay D] [--alloc-mib N] [--alloc-indexes 1] [--write-mib N]
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
	"slices"
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
		termDelay   = flag.Duration("term-delay", 0, "on SIGTERM, wait this long before exiting with 143 (0: exit at once)")
		allocMiB    = flag.Int("alloc-mib", 0, "MiB of memory to allocate and touch at the start, held until the end")
		allocOnly   = flag.String("alloc-indexes", "", "comma-separated completion indexes that allocate --alloc-mib (empty: every index)")
		writeMiB    = flag.Int("write-mib", 0, "MiB to write to a file in the container's writable layer at the start (its ephemeral storage)")
	)
	flag.Parse()
	index := os.Getenv("JOB_COMPLETION_INDEX")
	fmt.Printf("index %s: started, pod %s\n", index, os.Getenv("HOSTNAME"))

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
	if listed(*failIndexes, index) {
		code = *exitCode
		if *failAfter > 0 {
			runFor = *failAfter
		}
	}
	select {
	case <-time.After(runFor):
		fmt.Printf("index %s: exiting with %d\n", index, code)
		os.Exit(code)
	case <-terms:
		fmt.Printf("index %s: SIGTERM, exiting with 143 in %s\n", index, *termDelay)
		time.Sleep(*termDelay)
		os.Exit(143)
	}
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
