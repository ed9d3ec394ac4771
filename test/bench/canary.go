package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// The canary: a Deployment in a namespace of its own, scaled up from 0
// while a run's jobs are at work, by kube-controller-manager's deployment
// and replicaset controllers running as system:kube-controller-manager
// (FlowSchema kube-controller-manager, priority level workload-high), as on
// a cluster. Its time to all replicas Ready is what the controller under
// test costs the cluster's other controllers through the API server they
// share.
const (
	canaryNamespace = "bench-canary"
	canaryName      = "canary"
	canaryLabel     = "bench.indexedjob.dev/canary"
	// canaryNode is the node the canary's pods are bound to; no Node
	// object is needed, the API server does not check.
	canaryNode = "bench-canary-node"
	// canaryAloneWorkload names the result of the canary scaled up once
	// before the first run, with no controller under test running.
	canaryAloneWorkload = "canary alone"
	// noController is the controller of the canary alone's result.
	noController = "none"
)

// The canary's user agents: kube-controller-manager appends each
// controller's name to its clients' agent. Their requests are not the
// built-in Job controller's, though both run as
// system:kube-controller-manager (auditCount leaves them out).
var canaryAgents = []string{"/deployment-controller", "/replicaset-controller"}

var (
	canaryReplicas = flag.Int("canary", 0, "replicas a Deployment is scaled up to from 0 during each run (0: no canary), timed until all are Ready")
	canaryAfter    = flag.Duration("canary-after", 5*time.Second, "when the canary is scaled up, from a run's first create")
	canaryTimeout  = flag.Duration("canary-timeout", 10*time.Minute, "the longest the canary's scale-up is waited for")
)

// canaryResult is one scale-up's time, or why it was not measured.
type canaryResult struct {
	seconds float64
	err     error
}

// startCanary gives system:kube-controller-manager the deployment and
// replicaset controllers' bootstrap ClusterRoles, creates the canary's
// Deployment at 0 replicas, starts a pod simulator that binds its pods to
// canaryNode and reports them Running and Ready until deleted, and starts
// kube-controller-manager with those two controllers.
func (b *bench) startCanary(ctx context.Context) error {
	for _, role := range []string{"system:controller:deployment-controller", "system:controller:replicaset-controller"} {
		if err := b.cl.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "bench-canary-" + role[len("system:controller:"):]},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: kcmSelf}},
		}); err != nil {
			return err
		}
	}
	if err := b.cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: canaryNamespace}}); err != nil {
		return err
	}
	if err := b.cl.Create(ctx, canaryDeployment()); err != nil {
		return err
	}
	sim := podsim.New(podsim.Options{
		Client: b.cs, Namespace: canaryNamespace, LabelSelector: canaryLabel,
		Script: func(*corev1.Pod, int) podsim.Plan { return podsim.Plan{Hold: true} },
		Node:   canaryNode, ReportRunning: true, Recheck: time.Minute, Workers: 8,
	})
	if err := sim.Run(ctx); err != nil {
		return err
	}
	b.stopCanarySim = sim.Stop
	port, err := b.cp.FreePort()
	if err != nil {
		return err
	}
	if _, err := b.cp.StartComponent(controlplane.ControllerManager, controlplane.Component{
		User: kcmSelf, Port: port,
		Flags: []string{"--controllers=deployment,replicaset", "--use-service-account-credentials=false"},
	}); err != nil {
		return err
	}
	// Started when its deployment controller has written the Deployment's
	// status once.
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		d, err := b.cs.AppsV1().Deployments(canaryNamespace).Get(ctx, canaryName, metav1.GetOptions{})
		return err == nil && d.Status.ObservedGeneration >= d.Generation, nil
	})
}

// canaryDeployment is the canary at 0 replicas: pods of one container
// that the canary's simulator keeps Running.
func canaryDeployment() *appsv1.Deployment {
	labels := map[string]string{canaryLabel: labelOn}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: canaryNamespace, Name: canaryName},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers:                    []corev1.Container{{Name: "serve", Image: "busybox:1.36", Command: []string{"sleep", "infinity"}}},
				},
			},
		},
	}
}

// scaleCanary sets the canary's replicas and returns how long it took from
// the request until the Deployment reported them all (canaryReady).
func (b *bench) scaleCanary(ctx context.Context, replicas int32) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, *canaryTimeout)
	defer cancel()
	start := time.Now()
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	if _, err := b.cs.AppsV1().Deployments(canaryNamespace).Patch(ctx, canaryName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return 0, fmt.Errorf("scaling the canary to %d: %w", replicas, err)
	}
	ready := make(chan time.Time, 1)
	go listWatch(ctx, b.wcl, func() client.ObjectList { return &appsv1.DeploymentList{} }, canaryNamespace,
		func(_ watch.EventType, o client.Object) {
			if d, ok := o.(*appsv1.Deployment); ok && d.Name == canaryName && canaryReady(d, replicas) {
				select {
				case ready <- time.Now():
				default:
				}
			}
		})
	select {
	case at := <-ready:
		return at.Sub(start), nil
	case <-ctx.Done():
		return 0, fmt.Errorf("canary: %d replicas not ready within %s", replicas, *canaryTimeout)
	}
}

// canaryReady reports whether the Deployment's controller has seen its
// spec and reports exactly replicas pods, all of them Ready.
func canaryReady(d *appsv1.Deployment, replicas int32) bool {
	return d.Status.ObservedGeneration >= d.Generation && ptr.Deref(d.Spec.Replicas, 1) == replicas &&
		d.Status.Replicas == replicas && d.Status.ReadyReplicas == replicas
}

// runCanary scales the canary up -canary-after from the run's start, and
// sends its time (none without -canary).
func (b *bench) runCanary(ctx context.Context, start time.Time) <-chan canaryResult {
	done := make(chan canaryResult, 1)
	if *canaryReplicas <= 0 {
		done <- canaryResult{}
		return done
	}
	go func() {
		select {
		case <-time.After(time.Until(start.Add(*canaryAfter))):
		case <-ctx.Done():
			done <- canaryResult{err: ctx.Err()}
			return
		}
		d, err := b.scaleCanary(ctx, int32(*canaryReplicas))
		done <- canaryResult{seconds: d.Seconds(), err: err}
	}()
	return done
}

// canaryAlone scales the canary up with no controller under test running
// and back to 0: the time the runs' canaries compare with.
func (b *bench) canaryAlone(ctx context.Context) result {
	r := result{Workload: canaryAloneWorkload, Controller: noController, Rep: 1, APF: !*exempt, FlowSchema: *flowSchema}
	d, err := b.scaleCanary(ctx, int32(*canaryReplicas))
	r.CanarySeconds, r.OK = d.Seconds(), err == nil
	if err := errors.Join(err, b.resetCanary(ctx)); err != nil {
		r.Detail = err.Error()
	}
	return r
}

// resetCanary scales the canary back to 0 (none without -canary).
func (b *bench) resetCanary(ctx context.Context) error {
	if *canaryReplicas <= 0 {
		return nil
	}
	_, err := b.scaleCanary(ctx, 0)
	return err
}
