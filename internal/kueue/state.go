package kueue

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// State is where the integration stands in one replica of the operator.
type State string

// The states, in the order they usually come.
const (
	// StateDisabled: --kueue=disabled.
	StateDisabled State = "disabled"
	// StateWaiting: Kueue's Workload API is not served (yet).
	StateWaiting State = "waiting"
	// StateStandby: Kueue's API is served and this replica's webhook
	// queues jobs, but it does not lead, so Kueue's reconciler runs
	// elsewhere.
	StateStandby State = "standby"
	// StateRunning: Kueue's reconciler runs in this replica.
	StateRunning State = "running"
	// StateFailed: setting up or running Kueue's reconciler failed here;
	// it is retried with a growing delay.
	StateFailed State = "failed"
)

var states = []State{StateDisabled, StateWaiting, StateStandby, StateRunning, StateFailed}

// integrationState is 1 for the integration's state in this process and 0
// for the others, so that an alert can ask for
// indexedbatchjob_kueue_integration{state="failed"} == 1.
var integrationState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "indexedbatchjob_kueue_integration",
	Help: "The Kueue integration's state in this replica: 1 for the current one of disabled, waiting (for Kueue's API), " +
		"standby (served, another replica leads), running, failed (retried with a growing delay); 0 for the others.",
}, []string{"state"})

func init() {
	metrics.Registry.MustRegister(integrationState)
}

// reportState sets the gauge to s.
func reportState(s State) {
	for _, other := range states {
		v := 0.0
		if other == s {
			v = 1
		}
		integrationState.WithLabelValues(string(other)).Set(v)
	}
}
