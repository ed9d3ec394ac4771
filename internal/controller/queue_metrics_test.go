package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The controller's queue reports its depth in one series however many
// priorities its jobs were ready at, and its metrics land in the
// workqueue_* families controller-runtime serves for every controller.
func TestQueueDepthIsOneSeriesWhateverThePriorities(t *testing.T) {
	// A name of its own: the registry is the process's, and -count runs
	// the test again in it.
	name := fmt.Sprintf("ranked-queue-metrics-test-%d", time.Now().UnixNano())
	clk := clocktesting.NewFakeClock(time.Now())
	order := newJobOrder(clk, 10)
	q := newRankedQueue(name, order, nil, logr.Discard(), workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	const jobs = 20
	priorities := map[int]bool{}
	for i := range jobs {
		r := request("job-" + string(rune('a'+i)))
		// Each job charged past its free allowance by a different amount:
		// twenty priorities.
		order.charge(r.NamespacedName, 10+(i+1)*3)
		priorities[order.priority(r.NamespacedName)] = true
		q.Add(r)
	}
	if len(priorities) != jobs {
		t.Fatalf("the jobs were given %d priorities, want %d", len(priorities), jobs)
	}
	got := drain(t, q, jobs)
	if len(got) != jobs {
		t.Fatalf("drained %v", got)
	}

	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := func(family string) []*dto.Metric {
		var out []*dto.Metric
		for _, f := range families {
			if f.GetName() != family {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "name" && l.GetValue() == name {
						out = append(out, m)
					}
				}
			}
		}
		return out
	}
	depth := series("workqueue_depth")
	if len(depth) != 1 {
		t.Fatalf("workqueue_depth has %d series for the queue, want 1: %v", len(depth), depth)
	}
	if v := depth[0].GetGauge().GetValue(); v != 0 {
		t.Errorf("workqueue_depth is %v with the queue drained, want 0", v)
	}
	if adds := series("workqueue_adds_total"); len(adds) != 1 || adds[0].GetCounter().GetValue() != jobs {
		t.Errorf("workqueue_adds_total for the queue: %v, want one series of %d", adds, jobs)
	}
	for _, family := range []string{"workqueue_queue_duration_seconds", "workqueue_work_duration_seconds",
		"workqueue_unfinished_work_seconds", "workqueue_longest_running_processor_seconds", "workqueue_retries_total"} {
		if len(series(family)) != 1 {
			t.Errorf("%s has %d series for the queue, want 1 (the family is not controller-runtime's registered one)", family, len(series(family)))
		}
	}
}
