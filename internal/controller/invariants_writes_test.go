package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/failrecord"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// The steps of apply, in its order, as a writeFault names them.
const (
	stepDelete = 1 + iota
	stepCreate
	stepStatus
	stepRecord
	stepRelease
	stepDiscard
)

// writeFault is what goes wrong in one apply. The writes are ordered by
// step, and within a step by the plan's order of their pods (a deletion
// is two writes when it strips the finalizer first: its patch, then its
// delete); the interceptor knows a write's place from the pod it names, so
// a fault strikes the same writes however apply's goroutines interleave.
type writeFault struct {
	step int // the first step whose writes fail
	// within is how many writes of that step still pass.
	within int
	// crash: every write after the fault fails too, and the next sync runs
	// in a new reconciler. Else it is an outage of that step only, and the
	// reconciler lives on.
	crash bool
}

// faultOf decodes a fault from one byte. 0…4 crash after step 1…5, as
// crashAt does; 5 crashes before the first write.
func faultOf(b byte) *writeFault {
	return &writeFault{step: int(b+1)%6 + 1, within: int(b / 6 % 4), crash: b/24%2 == 0}
}

// allows tells whether the write at place pos of step reaches the server.
func (f *writeFault) allows(step, pos int) bool {
	switch {
	case f == nil || step < f.step:
		return true
	case step > f.step:
		return !f.crash
	default:
		return pos < f.within
	}
}

// applying is what the interceptor knows of the apply under way: the plan,
// the places of its pods' writes, and the fault.
type applying struct {
	in    syncInput
	plan  plan
	fault *writeFault
	// whole: every write passes, and none is placed (a plan that deletes
	// the job, whose writes are not apply's steps).
	whole bool
	// background: the writes are the reconciler's background finalizer
	// removals, which any pod may get; each is checked all the same.
	background bool
	// seen are the pods as the sync saw them, by name; written are those
	// of them a write changed, and the pods it created.
	seen    map[string]*corev1.Pod
	written sets.Set[string]
	// The place of each pod in the plan's lists, by name; strips are the
	// deletions that strip the finalizer first.
	deletes, creates, releases, discards map[string]int
	strips                               sets.Set[string]
	// refused counts the writes the fault struck, by step.
	refused [stepDiscard + 1]atomic.Int32
}

func newApplying(in syncInput, p plan, fault *writeFault, seen []*corev1.Pod) *applying {
	a := &applying{
		in: in, plan: p, fault: fault, seen: map[string]*corev1.Pod{}, written: sets.New[string](),
		deletes: map[string]int{}, creates: map[string]int{}, releases: map[string]int{}, discards: map[string]int{},
		strips: sets.New[string](), whole: p.deleteJob,
	}
	for _, pod := range seen {
		a.seen[pod.Name] = pod
	}
	for i, d := range p.delete {
		a.deletes[d.pod.Name] = 2 * i
		if d.stripFinalizer {
			a.strips.Insert(d.pod.Name)
		}
	}
	for i, pc := range p.create {
		a.creates[podName(in.job, pc.Index, pc.Attempt)] = i
	}
	for i, pod := range p.removeFinalizer {
		a.releases[pod.Name] = i
	}
	for i, pod := range p.countHeld {
		a.releases[pod.Name] = len(p.removeFinalizer) + i
	}
	for i, pod := range p.discard {
		a.discards[pod.Name] = i
	}
	return a
}

// refusedIn is how many writes of the steps from..to the fault struck.
func (a *applying) refusedIn(from, to int) int {
	n := 0
	for step := from; step <= to; step++ {
		n += int(a.refused[step].Load())
	}
	return n
}

// refuse returns the error of a write the fault strikes, nil for one that
// may reach the server.
func (a *applying) refuse(step, pos int) error {
	if a.whole || a.fault.allows(step, pos) {
		return nil
	}
	a.refused[step].Add(1)
	if a.fault.crash {
		return errors.New("injected: the controller died before this write")
	}
	return apierrors.NewServiceUnavailable("injected outage")
}

// interceptors sit between the reconciler and the API server.
func (c *cluster) interceptors() interceptor.Funcs {
	return interceptor.Funcs{
		Create:            c.createPod,
		Delete:            c.deletePod,
		Patch:             c.patchPod,
		SubResourceUpdate: c.updateStatus,
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return c.writeRecord(ctx, cl, obj, func() error { return cl.Update(ctx, obj, opts...) })
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			c.errorf("apply patched %s of %T %s; the status is written with an update", sub, obj, obj.GetName())
			return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
}

// current is the apply under way. A write outside one is an error (there
// are no foreign pods to release), and passes unplaced and unchecked.
func (c *cluster) current(verb string, obj client.Object) *applying {
	if c.applying == nil {
		c.errorf("%s %T %s outside apply", verb, obj, obj.GetName())
		a := newApplying(syncInput{job: c.job}, plan{}, nil, nil)
		a.whole = true
		return a
	}
	return c.applying
}

// createPod is what the API server does on a pod create: it gives the pod
// a UID, stamps the creation, sets the phase Pending (and the kubelet's
// finalizer), and refuses a name that exists.
func (c *cluster) createPod(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
	a := c.current("create", obj)
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return c.writeRecord(ctx, cl, obj, func() error { return cl.Create(ctx, obj, opts...) })
	}
	pos, planned := a.creates[pod.Name]
	if !planned && !a.whole {
		c.errorf("created pod %s, which the plan does not create", pod.Name)
	}
	if err := a.refuse(stepCreate, pos); err != nil {
		return err
	}
	seq := c.uids + pos + 1
	pod.UID = types.UID(fmt.Sprintf("u%03d", seq))
	pod.CreationTimestamp = metav1.NewTime(c.now)
	pod.Finalizers = append(pod.Finalizers, kubeletFinalizer)
	pod.Status.Phase = corev1.PodPending
	err := cl.Create(ctx, pod, opts...)
	switch {
	case apierrors.IsAlreadyExists(err):
		c.errorf("created pod %s, which exists (attempt numbers repeat)", pod.Name)
	case err == nil:
		ix, _ := jobpod.Index(pod)
		c.mu.Lock()
		c.order[pod.UID], c.indexOfUID[pod.UID] = seq, ix
		c.genOfUID[pod.UID] = jobpod.Read(pod).Generation
		a.written.Insert(pod.Name)
		c.mu.Unlock()
	}
	return err
}

// deletePod deletes a pod (or, for a plan that deletes it, the job).
func (c *cluster) deletePod(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
	a := c.current("delete", obj)
	if _, isJob := obj.(*ibjv1.IndexedBatchJob); isJob {
		if !a.plan.deleteJob {
			c.errorf("deleted the job, which the plan does not")
		}
		return cl.Delete(ctx, obj, opts...)
	}
	pos, planned := a.deletes[obj.GetName()]
	if !planned && !a.whole {
		c.errorf("deleted pod %s, which the plan does not delete", obj.GetName())
	}
	if err := a.refuse(stepDelete, pos+1); err != nil {
		return err
	}
	err := cl.Delete(ctx, obj, opts...)
	switch {
	case apierrors.IsNotFound(err):
		c.errorf("deleting pod %s that is gone", obj.GetName())
	case err == nil:
		c.deleted(obj.GetName())
		c.mu.Lock()
		a.written.Insert(obj.GetName())
		c.mu.Unlock()
	}
	return err
}

// patchPod lets a finalizer patch through, then checks what it did.
func (c *cluster) patchPod(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	a := c.current("patch", obj)
	name := obj.GetName()
	data, err := patch.Data(obj)
	if err != nil {
		return err
	}
	var step, pos int
	planned := true
	switch discard := bytes.Contains(data, []byte(ibjv1.DiscardedAnnotation)); {
	case discard && a.strips.Has(name):
		step, pos = stepDelete, a.deletes[name]
	case discard:
		step = stepDiscard
		pos, planned = a.discards[name]
	case a.background:
		step, planned = stepRelease, true
	default:
		step = stepRelease
		pos, planned = a.releases[name]
	}
	if !planned && !a.whole {
		c.errorf("patched pod %s, which the plan does not release", name)
	}
	if err := a.refuse(step, pos); err != nil {
		return err
	}
	if err := cl.Patch(ctx, obj, patch, opts...); err != nil {
		return err
	}
	c.mu.Lock()
	a.written.Insert(name)
	c.mu.Unlock()
	if before := a.seen[name]; before != nil {
		c.checkRelease(a, before, obj)
	}
	return nil
}

// updateStatus lets a status write through, then checks what it says.
func (c *cluster) updateStatus(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	a := c.current("update "+sub, obj)
	job, ok := obj.(*ibjv1.IndexedBatchJob)
	if !ok || sub != "status" {
		c.errorf("apply updated %s of %T %s", sub, obj, obj.GetName())
		return cl.SubResource(sub).Update(ctx, obj, opts...)
	}
	if err := a.refuse(stepStatus, 0); err != nil {
		return err
	}
	if err := cl.SubResource(sub).Update(ctx, obj, opts...); err != nil {
		return err
	}
	c.checkStatus(a.in, job.Status)
	return nil
}

// checkRelease checks a patch of a pod (before is the pod as the sync saw
// it) that took its tracking finalizer away: only that finalizer goes, and
// a pod whose end counts goes only once the status holds its result.
func (c *cluster) checkRelease(a *applying, before *corev1.Pod, after client.Object) {
	if slices.Contains(before.Finalizers, kubeletFinalizer) && !slices.Contains(after.GetFinalizers(), kubeletFinalizer) {
		c.errorf("the patch of pod %s removed another finalizer: %v -> %v", before.Name, before.Finalizers, after.GetFinalizers())
	}
	if !slices.Contains(before.Finalizers, ibjv1.TrackingFinalizer) || slices.Contains(after.GetFinalizers(), ibjv1.TrackingFinalizer) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, discarded := after.GetAnnotations()[ibjv1.DiscardedAnnotation]; discarded {
		if a.strips.Has(before.Name) {
			c.stripped.Insert(c.indexOfUID[before.UID])
		}
		return
	}
	ix, _ := jobpod.Index(before)
	if !IsFinished(a.in.job) && !c.recordedSucc.Has(before.UID) && !c.recordedFail.Has(before.UID) &&
		!(before.Status.Phase == corev1.PodFailed && c.ignores(before)) &&
		!(before.Status.Phase == corev1.PodSucceeded && c.failedIdx.Has(ix)) {
		c.errorf("removed the finalizer of pod %s (phase %s) before its result was in the status", before.Name, before.Status.Phase)
	}
	if c.recordedFail.Has(before.UID) && !c.inFailureRecord(before) {
		c.errorf("removed the finalizer of failed pod %s before its failure was in the failure record", before.Name)
	}
}

// inFailureRecord: the job's failure record, as the API server holds it,
// has the pod's attempt, or its shard's name is taken by a ConfigMap the
// job does not control (condition FailureRecorded says so). The caller
// holds c.mu.
func (c *cluster) inFailureRecord(pod *corev1.Pod) bool {
	ix, _ := jobpod.Index(pod)
	var cm corev1.ConfigMap
	if err := c.api.Get(context.Background(), client.ObjectKey{Namespace: pod.Namespace, Name: failrecord.ShardName(c.job.Name, failrecord.ShardOf(ix))}, &cm); err != nil {
		return false
	}
	if _, ours := recordShard(c.job, &cm); !ours {
		return true // the name is taken: the record is refused, and says so
	}
	attempts, _ := failrecord.DecodeShard(cm.Data[failrecord.DataKey])
	attempt := jobpod.Count(pod.Annotations, ibjv1.AttemptAnnotation)
	return slices.ContainsFunc(attempts, func(a failrecord.Attempt) bool { return a.Index == ix && a.Attempt == attempt })
}

// writeRecord lets a write of the job's failure record through: a
// ConfigMap named as one of its shards, within an apply.
func (c *cluster) writeRecord(ctx context.Context, cl client.WithWatch, obj client.Object, write func() error) error {
	a := c.current("write", obj)
	if _, ok := obj.(*corev1.ConfigMap); !ok || !strings.HasPrefix(obj.GetName(), c.job.Name+"-failures-") {
		c.errorf("apply wrote %T %s", obj, obj.GetName())
	}
	if err := a.refuse(stepRecord, 0); err != nil {
		return err
	}
	return write()
}
