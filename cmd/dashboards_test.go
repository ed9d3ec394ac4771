package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The Grafana dashboards of config/grafana, as kubebuilder's grafana plugin
// lays them out.
var dashboards = []string{
	"controller-runtime-metrics.json",
	"controller-resources-metrics.json",
	"custom-metrics/custom-metrics-dashboard.json",
}

// metricInQuery finds the metric names of PromQL expressions, which these
// dashboards always write with a label matcher (name{...}), and of the
// variables' label_values(name, label).
var metricInQuery = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{|label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*)`)

// probe is a collector of one descriptor, to ask the registry whether a name
// is taken.
type probe struct{ desc *prometheus.Desc }

func (p probe) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }
func (p probe) Collect(chan<- prometheus.Metric)    {}

// registered reports whether the manager's registry (controller-runtime's,
// which its metrics endpoint serves) holds a metric of that name. A vector
// with no series yet is not gathered, so this asks the registry to register
// a second metric of the name instead: it refuses exactly when the name is
// taken.
func registered(t *testing.T, name string) bool {
	t.Helper()
	p := probe{prometheus.NewDesc(name, "a probe of the dashboards test", nil, nil)}
	err := metrics.Registry.Register(p)
	if err == nil {
		metrics.Registry.Unregister(p)
		return false
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) || strings.Contains(err.Error(), "previously registered descriptor with the same fully-qualified name") {
		return true
	}
	t.Fatalf("probing %s: %v", name, err)
	return false
}

// servedAs is the registered metric a queried series belongs to: a
// histogram's _bucket, _sum and _count series are served under its name.
func servedAs(t *testing.T, series string) (string, bool) {
	if registered(t, series) {
		return series, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(series, suffix); ok && registered(t, base) {
			return base, true
		}
	}
	return "", false
}

// TestDashboardsQueryServedMetrics checks that every dashboard is valid JSON
// and that every metric its panels and variables query is one the manager
// binary registers (its own, controller-runtime's, client-go's, the Go and
// process collectors), and that the operator's own metrics are all shown.
func TestDashboardsQueryServedMetrics(t *testing.T) {
	if registered(t, "indexedbatchjob_no_such_metric_total") {
		t.Fatal("the registry probe finds a metric nobody registered")
	}
	shown := map[string]bool{}
	for _, name := range dashboards {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("..", "config", "grafana", filepath.FromSlash(name)))
			if err != nil {
				t.Fatal(err)
			}
			var dashboard struct {
				Title  string `json:"title"`
				UID    string `json:"uid"`
				Panels []struct {
					Title   string `json:"title"`
					Type    string `json:"type"`
					Targets []struct {
						Expr string `json:"expr"`
					} `json:"targets"`
				} `json:"panels"`
				Templating struct {
					List []struct {
						Name       string `json:"name"`
						Definition string `json:"definition"`
					} `json:"list"`
				} `json:"templating"`
			}
			if err := json.Unmarshal(data, &dashboard); err != nil {
				t.Fatalf("not a JSON dashboard: %v", err)
			}
			if dashboard.Title == "" || dashboard.UID == "" {
				t.Errorf("title %q, uid %q: a dashboard needs both", dashboard.Title, dashboard.UID)
			}
			queries := map[string]string{}
			for _, v := range dashboard.Templating.List {
				if v.Definition != "" {
					queries["variable "+v.Name] = v.Definition
				}
			}
			for _, p := range dashboard.Panels {
				if p.Type != "row" && len(p.Targets) == 0 {
					t.Errorf("panel %q queries nothing", p.Title)
				}
				for i, target := range p.Targets {
					queries["panel "+p.Title+" #"+string(rune('A'+i))] = target.Expr
				}
			}
			for where, query := range queries {
				found := metricInQuery.FindAllStringSubmatch(query, -1)
				if len(found) == 0 {
					t.Errorf("%s: no metric in %q", where, query)
				}
				for _, m := range found {
					series := m[1] + m[2]
					metric, ok := servedAs(t, series)
					if !ok {
						t.Errorf("%s queries %s, which the manager does not serve", where, series)
						continue
					}
					shown[metric] = true
				}
			}
		})
	}
	// The operator's own metrics, each of which the custom dashboard shows.
	for _, name := range []string{
		"indexedbatchjob_sync_duration_seconds",
		"indexedbatchjob_pods_creation_total",
		"indexedbatchjob_pods_finished_total",
		"indexedbatchjob_jobs_finished_total",
		"indexedbatchjob_finished_indexes_total",
		"indexedbatchjob_pods_deleted_total",
		"indexedbatchjob_kueue_integration",
	} {
		if !registered(t, name) {
			t.Errorf("%s is not registered: a metric was renamed or removed; update this list and the dashboard", name)
		}
		if !shown[name] {
			t.Errorf("no dashboard shows %s", name)
		}
	}
	if t.Failed() {
		return
	}
	var names []string
	for n := range shown {
		names = append(names, n)
	}
	slices.Sort(names)
	t.Logf("dashboards show %d metrics: %s", len(names), strings.Join(names, ", "))
}
