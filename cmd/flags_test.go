package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// boundFlags binds the manager's flags on a fresh FlagSet and parses args.
func boundFlags(t *testing.T, args ...string) (*flag.FlagSet, options) {
	t.Helper()
	var o options
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.bindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return fs, o
}

// defaultOptions are the options the manager runs with when no flag is set.
func defaultOptions() options {
	return options{
		metricsAddr:   "0",
		probeAddr:     ":8081",
		secureMetrics: true,
		leaseDuration: 15 * time.Second,
		renewDeadline: 10 * time.Second,
		retryPeriod:   2 * time.Second,
		qps:           50,
		burst:         100,
		throttleTick:  250 * time.Millisecond,
		busyLatency:   250 * time.Millisecond,
		maxConcurrent: 5,
		backoffBase:   10 * time.Second,
		backoffMax:    10 * time.Minute,
		finalizerHold: 5 * time.Minute,
		kueue: kueueFlags{
			mode:                         "auto",
			managedJobsNamespaceSelector: "kubernetes.io/metadata.name notin (kube-system,kueue-system)",
		},
		webhook: webhookFlags{
			port:           9443,
			certDir:        "/tmp/k8s-webhook-server/serving-certs",
			certManagement: "internal",
			secretName:     "indexed-batch-job-webhook-server-cert",
			serviceName:    "indexed-batch-job-webhook-service",
			validatingName: "indexed-batch-job-validating-webhook-configuration",
			mutatingName:   "indexed-batch-job-mutating-webhook-configuration",
			dryRunTimeout:  5 * time.Second,
		},
	}
}

// compareOptions compares every option but zap's, whose parsed levels and
// encoders are functions; the zap flags are checked by their defaults and
// by zap-devel.
var compareOptions = cmp.Options{
	cmp.AllowUnexported(options{}, kueueFlags{}, webhookFlags{}),
	cmpopts.IgnoreFields(options{}, "zap"),
}

// TestFlagDefaults checks every flag the manager defines, by name, against
// the default its help text shows, so that a flag dropped, renamed or added
// without a row here fails, and that the options hold those defaults.
func TestFlagDefaults(t *testing.T) {
	want := map[string]string{
		"metrics-bind-address":                  "0",
		"health-probe-bind-address":             ":8081",
		"pprof-bind-address":                    "",
		"leader-elect":                          "false",
		"leader-election-namespace":             "",
		"leader-elect-lease-duration":           "15s",
		"leader-elect-renew-deadline":           "10s",
		"leader-elect-retry-period":             "2s",
		"metrics-secure":                        "true",
		"enable-http2":                          "false",
		"kube-api-qps":                          "50",
		"kube-api-burst":                        "100",
		"kube-api-throttle-tick":                "250ms",
		"api-busy-latency":                      "250ms",
		"max-concurrent-reconciles":             "5",
		"namespaces":                            "",
		"pod-failure-backoff":                   "10s",
		"pod-failure-backoff-max":               "10m0s",
		"counted-finalizer-hold":                "5m0s",
		"kueue":                                 "auto",
		"kueue-manage-jobs-without-queue-name":  "false",
		"kueue-managed-jobs-namespace-selector": "kubernetes.io/metadata.name notin (kube-system,kueue-system)",
		"enable-webhook":                        "false",
		"webhook-port":                          "9443",
		"webhook-cert-dir":                      "/tmp/k8s-webhook-server/serving-certs",
		"webhook-cert-management":               "internal",
		"webhook-namespace":                     "",
		"webhook-secret-name":                   "indexed-batch-job-webhook-server-cert",
		"webhook-service-name":                  "indexed-batch-job-webhook-service",
		"webhook-validating-configuration":      "indexed-batch-job-validating-webhook-configuration",
		"webhook-mutating-configuration":        "indexed-batch-job-mutating-webhook-configuration",
		"webhook-extra-dns-names":               "",
		"webhook-dry-run-timeout":               "5s",
		"zap-devel":                             "false",
		"zap-encoder":                           "",
		"zap-log-level":                         "",
		"zap-stacktrace-level":                  "",
		"zap-time-encoding":                     "",
	}
	fs, o := boundFlags(t)
	got := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		got[f.Name] = f.DefValue
		if f.Usage == "" {
			t.Errorf("--%s has no help text", f.Name)
		}
	})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("flag defaults (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(defaultOptions(), o, compareOptions); diff != "" {
		t.Errorf("options with no flag set (-want +got):\n%s", diff)
	}
	if o.zap.Development {
		t.Error("zap development mode is on by default")
	}
}

// TestFlagsSetOptions checks that parsing a flag sets the option it names.
func TestFlagsSetOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want func(*options)
	}{
		{
			name: "client limits",
			args: []string{"--kube-api-qps=20.5", "--kube-api-burst=7", "--kube-api-throttle-tick=0"},
			want: func(o *options) { o.qps, o.burst, o.throttleTick = 20.5, 7, 0 },
		},
		{
			name: "servers",
			args: []string{"--metrics-bind-address=:8443", "--metrics-secure=false", "--enable-http2",
				"--health-probe-bind-address=:9000", "--pprof-bind-address=:6060"},
			want: func(o *options) {
				o.metricsAddr, o.secureMetrics, o.enableHTTP2 = ":8443", false, true
				o.probeAddr, o.pprofAddr = ":9000", ":6060"
			},
		},
		{
			name: "leader election",
			args: []string{"--leader-elect", "--leader-election-namespace=ops", "--leader-elect-lease-duration=30s",
				"--leader-elect-renew-deadline=20s", "--leader-elect-retry-period=4s"},
			want: func(o *options) {
				o.enableLeaderElection, o.leaderElectionNamespace = true, "ops"
				o.leaseDuration, o.renewDeadline, o.retryPeriod = 30*time.Second, 20*time.Second, 4*time.Second
			},
		},
		{
			name: "controller",
			args: []string{"--max-concurrent-reconciles=12", "--namespaces=a, b,", "--pod-failure-backoff=1s",
				"--pod-failure-backoff-max=1m", "--counted-finalizer-hold=30s"},
			want: func(o *options) {
				o.maxConcurrent, o.namespaces = 12, "a, b,"
				o.backoffBase, o.backoffMax = time.Second, time.Minute
				o.finalizerHold = 30 * time.Second
			},
		},
		{
			name: "kueue",
			args: []string{"--kueue=disabled", "--kueue-manage-jobs-without-queue-name",
				"--kueue-managed-jobs-namespace-selector=team=a"},
			want: func(o *options) {
				o.kueue = kueueFlags{mode: "disabled", manageJobsWithoutQueueName: true,
					managedJobsNamespaceSelector: "team=a"}
			},
		},
		{
			name: "webhook",
			args: []string{"--enable-webhook", "--webhook-port=10250", "--webhook-cert-management=external",
				"--webhook-namespace=ops", "--webhook-extra-dns-names=localhost", "--webhook-dry-run-timeout=3s"},
			want: func(o *options) {
				o.webhook.enabled, o.webhook.port, o.webhook.certManagement = true, 10250, "external"
				o.webhook.namespace, o.webhook.extraDNSNames, o.webhook.dryRunTimeout = "ops", "localhost", 3*time.Second
			},
		},
		{
			name: "zap",
			args: []string{"--zap-devel"},
			want: func(o *options) { o.zap.Development = true },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, got := boundFlags(t, tc.args...)
			want := defaultOptions()
			tc.want(&want)
			if diff := cmp.Diff(want, got, compareOptions); diff != "" {
				t.Errorf("options after %q (-want +got):\n%s", tc.args, diff)
			}
			if got.zap.Development != want.zap.Development {
				t.Errorf("zap development mode %v, want %v", got.zap.Development, want.zap.Development)
			}
		})
	}
}

// TestWatchedNamespaces checks how --namespaces splits: blanks and empty
// entries dropped, nil (every namespace) when none is left.
func TestWatchedNamespaces(t *testing.T) {
	for _, tc := range []struct {
		flag string
		want []string
	}{
		{"", nil},
		{" , ", nil},
		{"a", []string{"a"}},
		{" a, b ,,c", []string{"a", "b", "c"}},
	} {
		o := options{namespaces: tc.flag}
		if diff := cmp.Diff(tc.want, o.watchedNamespaces()); diff != "" {
			t.Errorf("--namespaces=%q (-want +got):\n%s", tc.flag, diff)
		}
	}
}

// documentedFlag is a flag name in backticks, as docs/operations.md writes
// them.
var documentedFlag = regexp.MustCompile("`--([a-z0-9-]+)")

// TestFlagsAreDocumented checks that the "Operator flags" section of
// docs/operations.md names every flag the manager defines and no other.
// Of zap's flags the page names --zap-log-level and points at the rest
// with "…", so only the flags it names are required of them.
func TestFlagsAreDocumented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(data), "\n## Operator flags\n")
	if !found {
		t.Fatal(`docs/operations.md has no "## Operator flags" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	documented := map[string]bool{}
	for _, m := range documentedFlag.FindAllStringSubmatch(section, -1) {
		documented[m[1]] = true
	}
	fs, _ := boundFlags(t)
	defined := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { defined[f.Name] = true })
	var undocumented, unknown []string
	for name := range defined {
		if !documented[name] && !strings.HasPrefix(name, "zap-") {
			undocumented = append(undocumented, name)
		}
	}
	for name := range documented {
		if !defined[name] {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(undocumented)
	slices.Sort(unknown)
	if len(undocumented) > 0 {
		t.Errorf("docs/operations.md does not document --%s", strings.Join(undocumented, ", --"))
	}
	if len(unknown) > 0 {
		t.Errorf("docs/operations.md documents --%s, which the manager does not define", strings.Join(unknown, ", --"))
	}
	if len(documented) < 30 {
		t.Errorf("found %d flags in docs/operations.md's Operator flags section: is the pattern still right?", len(documented))
	}
}

// validate refuses, naming the flag, every value the manager cannot run
// with, and accepts the defaults and the ends of each range.
func TestValidateRefusesFlagsOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--counted-finalizer-hold=0s"}, ""},
		{[]string{"--counted-finalizer-hold=1h"}, ""},
		{[]string{"--counted-finalizer-hold=-1s"}, "--counted-finalizer-hold must be between 0s and 1h0m0s (got -1s)"},
		{[]string{"--counted-finalizer-hold=2h"}, "--counted-finalizer-hold must be between 0s and 1h0m0s (got 2h0m0s)"},
		{[]string{"--kube-api-qps=0"}, "--kube-api-qps must be above 0"},
		{[]string{"--kube-api-burst=0"}, "--kube-api-qps must be above 0"},
		{[]string{"--api-busy-latency=-1s"}, "--api-busy-latency not negative"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, o := boundFlags(t, tc.args...)
			err := o.validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
