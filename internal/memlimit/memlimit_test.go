package memlimit

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func write(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "memory.max")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLimit(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    int64
		ok      bool
	}{
		{"134217728\n", 134217728, true},
		{"max\n", 0, false},
		{"", 0, false},
		{"-1", 0, false},
	} {
		got, ok := Limit(write(t, tc.content))
		if got != tc.want || ok != tc.ok {
			t.Errorf("Limit(%q) = %d, %v; want %d, %v", tc.content, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := Limit(filepath.Join(t.TempDir(), "missing")); ok {
		t.Error("a missing file is a limit")
	}
}

func TestSet(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	t.Setenv("GOMEMLIMIT", "")
	if got := Set(write(t, "1000000000")); got != 900000000 {
		t.Errorf("Set = %d, want 900000000", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 900000000 {
		t.Errorf("runtime limit = %d, want 900000000", got)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	if got := Set(write(t, "max")); got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("no container limit still set a runtime limit (%d)", got)
	}
	t.Setenv("GOMEMLIMIT", "64MiB")
	if got := Set(write(t, "1000000000")); got != 0 {
		t.Errorf("GOMEMLIMIT set, yet Set = %d", got)
	}
}
