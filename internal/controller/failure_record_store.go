package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/failrecord"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
)

// The failure record's ConfigMaps (failrecord): named <job>-failures-<n>,
// labelled with the job's UID (ibjv1.FailureRecordLabel), controlled by
// the job so that they go with it. The reconciler reads them past its
// cache (a ConfigMap informer would hold every ConfigMap of the cluster,
// or every one a tenant labels so): once per job per operator process,
// when the job has had failures, and a shard again when a write finds it
// changed. It writes a shard once the status is written and before the
// finalizers of the pods the shard records go, so that a failure is in
// the record before its pod may be deleted.

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;create;update

// jobFailures is a job's failure record between its syncs.
type jobFailures struct {
	record *failrecord.Record
	// loaded: the record's shards were read (or the job had no failure
	// when it was first synced, so none could exist).
	loaded bool
	// refused is the API server's answer to the last write it refused, ""
	// once a write goes through; the record is not written again before
	// refusedUntil.
	refused      string
	refusedUntil time.Time
}

// failures is the job's failure record, made if it has none.
func (s *jobStates) failures(uid types.UID) *jobFailures {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.state(uid)
	if j.failures == nil {
		j.failures = &jobFailures{record: failrecord.New()}
	}
	return j.failures
}

// loadFailures reads the job's record the first time a sync needs it: a
// job that never had a failure counted or a restart has none to read.
func (r *Reconciler) loadFailures(ctx context.Context, job *ibjv1.IndexedBatchJob) (*jobFailures, error) {
	jf := r.jobs.failures(job.UID)
	if jf.loaded {
		return jf, nil
	}
	if job.Status.Failed == 0 && job.Status.Restarts == 0 && job.Status.UncountedTerminatedPods == nil {
		jf.loaded = true
		return jf, nil
	}
	// A page at a time, since a shard may be up to failrecord.MaxShardBytes;
	// only the shards of the job's indexes, so that ConfigMaps a tenant
	// made to look like shards of its job weigh no more than the job's own
	// record could.
	last := failrecord.ShardOf(max(job.Spec.Completions, 1) - 1)
	opts := []client.ListOption{client.InNamespace(job.Namespace),
		client.MatchingLabels{ibjv1.FailureRecordLabel: string(job.UID)}, client.Limit(recordPageSize)}
	for {
		var list corev1.ConfigMapList
		if err := r.apiReader.List(ctx, &list, opts...); err != nil {
			return nil, fmt.Errorf("reading the failure record: %w", err)
		}
		for i := range list.Items {
			cm := &list.Items[i]
			if n, ok := recordShard(job, cm); ok && n <= last {
				attempts, _ := failrecord.DecodeShard(cm.Data[failrecord.DataKey])
				jf.record.Merge(n, cm.ResourceVersion, attempts)
			}
		}
		if list.Continue == "" {
			break
		}
		opts = append(opts[:3], client.Continue(list.Continue))
	}
	jf.loaded = true
	return jf, nil
}

// recordPageSize is how many shards of a record one list reads.
const recordPageSize = 8

// recordShard is the shard number of a ConfigMap of the job's record
// (failrecord.ShardOfConfigMap).
func recordShard(job *ibjv1.IndexedBatchJob, cm *corev1.ConfigMap) (int, bool) {
	return failrecord.ShardOfConfigMap(job.Name, job.UID, cm)
}

// writeFailures writes the shards of the job's record that changed. It
// returns an error only for what a retry may cure (a conflict that keeps
// coming, a timeout, the server unavailable): the caller then keeps the
// pods' finalizers. A refusal (a quota, a policy, the name taken by a
// ConfigMap the job does not control) is kept in refused for condition
// FailureRecorded, and the record is not written again for
// failureRecordRecheck: the pods' results are counted all the same.
func (r *Reconciler) writeFailures(ctx context.Context, job *ibjv1.IndexedBatchJob) error {
	jf := r.jobs.failures(job.UID)
	dirty := jf.record.Dirty()
	now := r.clock.Now()
	if len(dirty) == 0 || now.Before(jf.refusedUntil) {
		return nil
	}
	for _, n := range dirty {
		err := r.writeShard(ctx, job, jf.record, n)
		var refused *refusedRecord
		switch {
		case err == nil:
		case errors.As(err, &refused), apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsRequestEntityTooLargeError(err), apierrors.IsBadRequest(err):
			jf.refused = fmt.Sprintf("ConfigMap %s: %v", failrecord.ShardName(job.Name, n), err)
			jf.refusedUntil = now.Add(failureRecordRecheck)
			log.FromContext(ctx).Info("Failure record refused", "configMap", failrecord.ShardName(job.Name, n), "error", err)
			return nil
		default:
			return fmt.Errorf("writing the failure record: %w", err)
		}
	}
	jf.refused = ""
	return nil
}

// refusedRecord: a shard's name is taken by a ConfigMap the job does not
// control.
type refusedRecord struct{ name string }

func (e *refusedRecord) Error() string {
	return "the name " + e.name + " is taken by a ConfigMap the job does not control"
}

// writeShard creates or updates shard n, merging what the API server has
// of it when a create finds it there or an update finds it changed (after
// a restart, or a write of another process).
func (r *Reconciler) writeShard(ctx context.Context, job *ibjv1.IndexedBatchJob, rec *failrecord.Record, n int) error {
	name := failrecord.ShardName(job.Name, n)
	for try := 0; ; try++ {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: job.Namespace, ResourceVersion: rec.Version(n),
				Labels:          map[string]string{ibjv1.FailureRecordLabel: string(job.UID), ibjv1.JobNameLabel: job.Name},
				OwnerReferences: []metav1.OwnerReference{podbuild.ControllerRef(job)},
			},
			Data: map[string]string{failrecord.DataKey: string(rec.EncodeShard(n))},
		}
		var err error
		if cm.ResourceVersion == "" {
			err = r.client.Create(ctx, cm)
		} else {
			err = r.client.Update(ctx, cm)
		}
		switch {
		case err == nil:
			rec.Written(n, cm.ResourceVersion)
			return nil
		case try < 3 && apierrors.IsNotFound(err):
			// Someone deleted the shard: it is created again, with what
			// the record holds.
			rec.Merge(n, "", nil)
		case try < 3 && (apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err)):
			var cur corev1.ConfigMap
			if err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: name}, &cur); err != nil {
				return err
			}
			if got, ok := recordShard(job, &cur); !ok || got != n {
				return &refusedRecord{name: name}
			}
			attempts, _ := failrecord.DecodeShard(cur.Data[failrecord.DataKey])
			rec.Merge(n, cur.ResourceVersion, attempts)
		default:
			return err
		}
	}
}
