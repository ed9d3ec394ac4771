package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
)

// Peer DNS (spec.network): a headless Service per job, so that the pod of
// index i is reachable as <job>-<i>.<service> from the moment it has an IP.
// This file holds its three parts: the pure builder (newService), the
// reconciler's step that creates it (ensureService), and the core's phase
// that reports what that step found (reportService).

// serviceRecheckInterval is how long a Service name found taken by a
// Service the job does not control is believed taken before the reconciler
// asks the API server again, and how soon a job in that state is synced
// again, so that the job gets its Service within this interval once the
// other Service is deleted (the manager's cache holds only the operator's
// own Services, so that deletion brings no event).
const serviceRecheckInterval = 30 * time.Second

// serviceName is the name of the job's headless Service, and whether the
// job asks for one (network.enableDNSHostnames): network.subdomain, or the
// job's name.
func serviceName(job *ibjv1.IndexedBatchJob) (string, bool) { return podbuild.ServiceName(job) }

// newService builds the job's headless Service: no cluster IP, so that DNS
// answers with the pods' own addresses and each pod's <hostname>.<service>
// record exists; selecting the job's controller-uid label, which only this
// job's pods carry (the job-name label would also select the pods of an
// earlier job of the same name); publishing pods that are not Ready yet,
// since distributed trainers resolve their peers while they start; labelled
// like the pods, so that the manager's cache, limited to the operator's
// objects, holds it; controlled by the job, so that it goes with the job.
// nil when the job asks for no Service.
func newService(job *ibjv1.IndexedBatchJob) *corev1.Service {
	name, ok := serviceName(job)
	if !ok {
		return nil
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: job.Namespace,
			Labels: map[string]string{
				ibjv1.JobNameLabel:       job.Name,
				ibjv1.ControllerUIDLabel: string(job.UID),
			},
			OwnerReferences: []metav1.OwnerReference{controllerRef(job)},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 map[string]string{ibjv1.ControllerUIDLabel: string(job.UID)},
			PublishNotReadyAddresses: true,
		},
	}
}

// serviceState is what ensureService found of the job's headless Service.
type serviceState int

const (
	// serviceOwned: the Service exists and the job controls it.
	serviceOwned serviceState = iota
	// serviceNameTaken: a Service of the name exists that the job does not
	// control; it is left alone.
	serviceNameTaken
	// serviceCreateFailed: the API server refused to create it.
	serviceCreateFailed
)

// peerService is what the reconciler learned of the job's headless Service
// before the sync, for syncJob to report in the status. The zero value
// (no name) is a job without peer DNS, or one whose Service the reconciler
// did not look at: the status is left as it is.
type peerService struct {
	name  string
	state serviceState
	// err is the API server's answer when the create failed.
	err string
}

// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create

// ensureService creates the job's headless Service if the job asks for one
// and it does not exist yet, and returns what it found. It never changes a
// Service: one of the wanted name that the job does not control is reported
// as taken and left alone, and for serviceRecheckInterval the name is not
// asked about again. A finished job gets no Service.
//
// The manager's cache holds only Services labelled as the operator's, so a
// name missing from it may still be taken: the create tells, and a create
// refused as AlreadyExists is read from the API server, which also tells
// this job's own Service the cache has not shown yet from someone else's.
func (r *Reconciler) ensureService(ctx context.Context, job *ibjv1.IndexedBatchJob) (peerService, error) {
	want := newService(job)
	if want == nil || IsFinished(job) {
		return peerService{}, nil
	}
	if r.jobs.serviceTaken(job.UID, r.clock.Now()) {
		return peerService{name: want.Name, state: serviceNameTaken}, nil
	}
	key := client.ObjectKeyFromObject(want)
	found := &corev1.Service{}
	err := r.client.Get(ctx, key, found)
	if err == nil {
		return r.serviceFound(job, found), nil
	}
	if !apierrors.IsNotFound(err) {
		return peerService{}, fmt.Errorf("reading service %s: %w", key.Name, err)
	}
	switch err := r.client.Create(ctx, want); {
	case err == nil:
		log.FromContext(ctx).V(2).Info("Created service", "service", klog.KObj(want))
		return peerService{name: want.Name, state: serviceOwned}, nil
	case !apierrors.IsAlreadyExists(err):
		return peerService{name: want.Name, state: serviceCreateFailed, err: err.Error()},
			fmt.Errorf("creating service %s: %w", key.Name, err)
	}
	if err := r.apiReader.Get(ctx, key, found); err != nil {
		return peerService{}, fmt.Errorf("reading service %s: %w", key.Name, err)
	}
	return r.serviceFound(job, found), nil
}

// serviceFound classifies an existing Service of the wanted name, and
// remembers a taken name for serviceRecheckInterval.
func (r *Reconciler) serviceFound(job *ibjv1.IndexedBatchJob, svc *corev1.Service) peerService {
	if metav1.IsControlledBy(svc, job) {
		return peerService{name: svc.Name, state: serviceOwned}
	}
	r.jobs.takeService(job.UID, svc.Name, r.clock.Now())
	return peerService{name: svc.Name, state: serviceNameTaken}
}

// reportService records in condition PeerDNSReady what the reconciler found
// of the job's headless Service, with an event when that changed, and while
// the name is taken asks for the sync that checks it again.
func (s *syncState) reportService() {
	svc := s.service
	if svc.name == "" {
		return
	}
	if svc.state == serviceNameTaken {
		s.plan.requeue(serviceRecheckInterval)
	}
	switch c := setPeerDNSReady(s.status, s.job.Generation, s.now, s.job.Name, svc); {
	case c == nil:
	case c.Status == metav1.ConditionTrue:
		s.plan.inform(c.Reason, "%s", c.Message)
	default:
		s.plan.warn(c.Reason, "%s", c.Message)
	}
}

// peerDNSCondition is condition PeerDNSReady for what the reconciler found
// of the Service of job jobName. Its message names the Service and depends on
// nothing else that changes, so that an unchanged state writes no status.
func peerDNSCondition(jobName string, svc peerService) metav1.Condition {
	c := metav1.Condition{Type: ibjv1.ConditionPeerDNSReady, Status: metav1.ConditionFalse}
	switch svc.state {
	case serviceOwned:
		c.Status, c.Reason = metav1.ConditionTrue, ibjv1.ReasonServiceCreated
		c.Message = fmt.Sprintf("Headless service %s resolves the pod of index i as %s-<i>.%s", svc.name, jobName, svc.name)
	case serviceNameTaken:
		c.Reason = ibjv1.ReasonServiceNameTaken
		c.Message = fmt.Sprintf("Service %s exists and is not controlled by this job: the operator leaves it unchanged, "+
			"and %s-<i>.%s resolves only if that Service selects the pods. Delete it, or recreate the job with another network.subdomain",
			svc.name, jobName, svc.name)
	case serviceCreateFailed:
		c.Reason = ibjv1.ReasonServiceCreateFailed
		c.Message = fmt.Sprintf("Error creating headless service %s: %s", svc.name, svc.err)
	}
	return c
}
