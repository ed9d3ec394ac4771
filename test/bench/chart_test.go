package main

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

func TestDrawChartWritesAPNGOfTheChartsSize(t *testing.T) {
	for name, rs := range map[string][]ratio{
		"no workload": nil,
		"two workloads, one far over its targets": {
			{workload: quickWorkload, time: 0.3, cpu: 0.9, rss: 0.4, req: 1, targets: usual(targets{})},
			{workload: "10k/p500 10% failing, backoffLimitPerIndex=1", time: 2.4, cpu: 0.5, rss: 0.3, req: 1.2, targets: usual(targets{Time: 0.75})},
		},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "results.png")
			if err := drawChart(path, rs); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cfg, err := png.DecodeConfig(f)
			if err != nil {
				t.Fatalf("not a PNG: %v", err)
			}
			if cfg.Width != chartWidth || cfg.Height != chartHeight {
				t.Errorf("chart is %dx%d, want %dx%d", cfg.Width, cfg.Height, chartWidth, chartHeight)
			}
		})
	}
}

func TestChartLabelFitsAWorkloadUnderItsBars(t *testing.T) {
	for in, want := range map[string]string{
		quickWorkload: quickWorkload,
		"10k/p500 10% failing, backoffLimitPerIndex=1": "10k/p500\n10% failing, BLPI=1",
	} {
		if got := chartLabel(in); got != want {
			t.Errorf("chartLabel(%q) = %q, want %q", in, got, want)
		}
	}
}
