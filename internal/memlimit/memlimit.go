// Package memlimit gives the Go runtime a soft memory limit below the
// container's: without one the garbage collector lets the heap grow to
// twice what is live, and a job whose pods fill the cache can push the
// operator past its memory limit and get it OOM-killed, where collecting
// sooner would have kept it alive.
package memlimit

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// CgroupV2File is where cgroup v2 shows the container's memory limit.
const CgroupV2File = "/sys/fs/cgroup/memory.max"

// Ratio is the share of the container's limit the runtime aims to stay
// under; the rest is for what the runtime does not count (the binary's
// mapped pages, memory outside the Go heap).
const Ratio = 0.9

// Limit reads a cgroup v2 memory.max file: the limit in bytes, or false
// when there is none ("max"), the file is missing or unreadable.
func Limit(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v := strings.TrimSpace(string(data))
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// Set gives the runtime a soft memory limit of Ratio times the container's
// limit, unless GOMEMLIMIT is set (an explicit choice wins) or there is
// no limit. It returns the limit set, or 0.
func Set(path string) int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	n, ok := Limit(path)
	if !ok {
		return 0
	}
	soft := int64(float64(n) * Ratio)
	debug.SetMemoryLimit(soft)
	return soft
}
