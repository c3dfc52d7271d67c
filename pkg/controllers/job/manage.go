package job

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/internal/podcontrol"
	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
)

// slowStartInitialBatch is the first batch of pod creates; batches double while they
// succeed, so a Job whose creates all fail (a quota) stops after one.
const slowStartInitialBatch = 1

// manage brings the Job's active pods to what it wants: none while suspended, else
// parallelism bounded by the completions left, creating pods (after the failure backoff)
// or deleting surplus ones, never both in one sync. It returns the active count after and
// what it did (the action label of the sync metrics).
func (c *Controller) manage(ctx context.Context, jc *syncContext) (int32, string, error) {
	log := klog.FromContext(ctx)
	job := jc.job
	key := keyOf(job)
	active := int32(len(jc.activePods))
	parallelism := *job.Spec.Parallelism

	if isSuspended(job) {
		log.V(4).Info("Deleting all active pods in suspended job", "active", active)
		rm := podsForRemoval(job, jc.activePods, int(active))
		c.expectations.ExpectDeletions(key, len(rm))
		removedReady, removed, err := c.deleteJobPods(ctx, job, rm)
		jc.terminating += removed
		jc.ready -= removedReady
		return active - removed, actionPodsDeleted, err
	}

	var want int32
	switch {
	case job.Spec.Completions == nil && jc.succeeded > 0:
		// One success ends a Job without completions: leave running what runs.
		want = active
	case job.Spec.Completions == nil:
		want = parallelism
	default:
		want = max(0, min(*job.Spec.Completions-jc.succeeded, parallelism))
	}

	rm := podsForRemoval(job, jc.activePods, int(max(0, active-want)))
	if len(rm) > maxPodChangesOnSync {
		rm = rm[:maxPodChangesOnSync]
	}
	if len(rm) > 0 {
		c.expectations.ExpectDeletions(key, len(rm))
		log.V(4).Info("Too many pods running for job", "deleted", len(rm), "target", want)
		removedReady, removed, err := c.deleteJobPods(ctx, job, rm)
		jc.terminating += removed
		jc.ready -= removedReady
		// Deletions take precedence; creations wait for the next sync.
		return active - removed, actionPodsDeleted, err
	}

	var terminating int32
	if onlyReplaceFailed(job) {
		terminating = jc.terminating
	}
	diff := want - terminating - active
	if diff <= 0 {
		return active, actionTracking, nil
	}
	if !hasBackoffLimitPerIndex(job) {
		if left := jc.backoff.remaining(c.clock); left > 0 {
			c.enqueue(log, job, max(left, syncBatchPeriod))
			return active, actionPodsCreated, nil
		}
	}
	diff = min(diff, int32(maxPodChangesOnSync))
	var indexes []int
	if isIndexed(job) {
		indexes = pendingIndexes(jc, int(diff))
		if hasBackoffLimitPerIndex(job) {
			var left time.Duration
			indexes, left = c.indexesReady(log, indexes, jc.delayedDeletion)
			if left > 0 {
				c.enqueue(log, job, max(left, syncBatchPeriod))
				return active, actionPodsCreated, nil
			}
		}
		diff = int32(len(indexes))
	}

	c.expectations.ExpectCreations(key, int(diff))
	log.V(4).Info("Too few pods running", "need", want, "creating", diff)
	template := job.Spec.Template.DeepCopy()
	if isIndexed(job) {
		addIndexEnv(template)
	}
	if !slices.Contains(template.Finalizers, batchv1.JobTrackingFinalizer) {
		template.Finalizers = append(template.Finalizers, batchv1.JobTrackingFinalizer)
	}

	active += diff
	var errs []error
	var mu sync.Mutex
	var created, failed atomic.Int32
	for batch := min(diff, slowStartInitialBatch); diff > 0; batch = min(2*batch, diff) {
		failedBefore := len(errs)
		var wg sync.WaitGroup
		for i := int32(0); i < batch; i++ {
			ix := noIndex
			if len(indexes) > 0 {
				ix, indexes = indexes[0], indexes[1:]
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				pod := c.podFor(log, jc, template, ix)
				if err := c.createPod(ctx, job, pod); err != nil {
					if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
						// Every later create fails too while the namespace goes away.
						return
					}
					utilruntime.HandleErrorWithContext(ctx, err, "creating pod")
					log.V(2).Info("Failed creation, decrementing expectations")
					c.expectations.CreationObserved(key)
					atomic.AddInt32(&active, -1)
					failed.Add(1)
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				created.Add(1)
			}()
		}
		wg.Wait()
		if skipped := diff - batch; len(errs) > failedBefore && skipped > 0 {
			log.V(2).Info("Slow-start failure. Skipping creating pods, decrementing expectations", "skippedCount", skipped)
			active -= skipped
			for i := int32(0); i < skipped; i++ {
				c.expectations.CreationObserved(key)
			}
			break
		}
		diff -= batch
	}
	c.jobMetrics.podsCreated(job, jc, created.Load(), failed.Load())
	if len(errs) > 0 {
		return active, actionPodsCreated, errs[0]
	}
	return active, actionPodsCreated, nil
}

// indexesReady returns the indexes whose per-index backoff has passed; when none has, the
// shortest wait left.
func (c *Controller) indexesReady(log klog.Logger, indexes []int, delayed map[int]*corev1.Pod) ([]int, time.Duration) {
	var now []int
	var shortest *time.Duration
	for _, ix := range indexes {
		left := remainingForIndex(log, c.clock, delayed[ix])
		if left == 0 {
			now = append(now, ix)
		} else if shortest == nil || left < *shortest {
			shortest = &left
		}
	}
	if len(now) > 0 {
		return now, 0
	}
	return nil, ptr.Deref(shortest, 0)
}

// podFor builds a pod of the Job from template (which carries the tracking finalizer):
// generateName "<job>-", or for index ix "<job>-<ix>-" with the index's annotation and
// label, hostname "<job>-<ix>" and, with backoffLimitPerIndex, the failure counts it
// inherits from the pod it replaces.
func (c *Controller) podFor(log klog.Logger, jc *syncContext, template *corev1.PodTemplateSpec, ix int) *corev1.Pod {
	job := jc.job
	t := template
	generateName := job.Name + "-"
	if ix != noIndex {
		t = template.DeepCopy()
		setIndex(t, ix)
		t.Spec.Hostname = fmt.Sprintf("%s-%d", job.Name, ix)
		generateName = indexedGenerateName(job.Name, ix)
		if hasBackoffLimitPerIndex(job) {
			failed, ignored := newIndexFailureCounts(log, job, jc.delayedDeletion[ix])
			t.Annotations[batchv1.JobIndexFailureCountAnnotation] = fmt.Sprint(failed)
			if ignored > 0 {
				t.Annotations[batchv1.JobIndexIgnoredFailureCountAnnotation] = fmt.Sprint(ignored)
			}
		}
	}
	return podcontrol.FromTemplate(t, job.Namespace, generateName, metav1.NewControllerRef(job, kind))
}

// createPod creates pod for job and records the event upstream records.
func (c *Controller) createPod(ctx context.Context, job *batchv1.Job, pod *corev1.Pod) error {
	created, err := c.pods.Create(ctx, job, pod)
	if err != nil {
		return err
	}
	c.wrotePod(created)
	return nil
}

// deletePodOf deletes one of job's pods and records the event upstream records; a pod
// already gone is reported as NotFound without an event.
func (c *Controller) deletePodOf(ctx context.Context, job *batchv1.Job, name string) error {
	return c.pods.Delete(ctx, job, job.Namespace, name)
}

// deleteJobPods removes the tracking finalizer of each pod, then deletes it: the deletion
// is counted as a failure when its status is written. It returns how many ready pods and
// how many pods were deleted.
func (c *Controller) deleteJobPods(ctx context.Context, job *batchv1.Job, pods []*corev1.Pod) (int32, int32, error) {
	key := keyOf(job)
	return c.forEachPod(ctx, pods, func(pod *corev1.Pod) (bool, error) {
		fail := func(err error) (bool, error) {
			c.expectations.DeletionObserved(key) // the cache will not see this deletion
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			klog.FromContext(ctx).V(2).Info("Failed to delete Pod", "pod", klog.KObj(pod), "err", err)
			return false, err
		}
		if patch := removeFinalizerPatch(pod); patch != nil {
			if err := c.patchPod(ctx, pod.Namespace, pod.Name, patch); err != nil {
				return fail(fmt.Errorf("removing completion finalizer: %w", err))
			}
		}
		if err := c.deletePodOf(ctx, job, pod.Name); err != nil {
			return fail(err)
		}
		return true, nil
	})
}

// deleteActivePods deletes the active pods of a Job that has ended, keeping their
// finalizers: they are removed, and the pods counted, when the status is written.
func (c *Controller) deleteActivePods(ctx context.Context, job *batchv1.Job, pods []*corev1.Pod) (int32, int32, error) {
	return c.forEachPod(ctx, pods, func(pod *corev1.Pod) (bool, error) {
		if err := c.deletePodOf(ctx, job, pod.Name); err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		return true, nil
	})
}

// forEachPod runs del on every pod in parallel and counts the successes (and the ready
// pods among them; a failed deletion of a ready pod still counts there, as upstream).
func (c *Controller) forEachPod(ctx context.Context, pods []*corev1.Pod, del func(*corev1.Pod) (bool, error)) (int32, int32, error) {
	var deleted, deletedReady atomic.Int32
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, pod := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := del(pod)
			if err != nil {
				utilruntime.HandleErrorWithContext(ctx, err, "deleting pod", "pod", klog.KObj(pod))
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				return
			}
			if ok {
				deleted.Add(1)
				if podutil.IsReady(pod) {
					deletedReady.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return deletedReady.Load(), deleted.Load(), first
}

// podsForRemoval returns at least n of the active pods to delete: for Indexed Jobs first
// the pods of duplicate or invalid indexes, then those earliest in their life (activeOrder).
func podsForRemoval(job *batchv1.Job, active []*corev1.Pod, n int) []*corev1.Pod {
	var rm []*corev1.Pod
	left := active
	if isIndexed(job) {
		rm, left = duplicatesForRemoval(active, int(*job.Spec.Completions))
	}
	if len(rm) < n {
		left = slices.Clone(left)
		sort.Sort(activeOrder(left))
		rm = append(rm, left[:n-len(rm)]...)
	}
	return rm
}

// activeOrder sorts the pods to delete first to the front, as upstream's ActivePods:
// unscheduled before scheduled, Pending before Unknown before Running, not ready before
// ready, ready for less time before more, more container restarts before fewer, newer
// before older.
type activeOrder []*corev1.Pod

var phaseOrder = map[corev1.PodPhase]int{corev1.PodPending: 0, corev1.PodUnknown: 1, corev1.PodRunning: 2}

func (s activeOrder) Len() int      { return len(s) }
func (s activeOrder) Swap(i, j int) { s[i], s[j] = s[j], s[i] }
func (s activeOrder) Less(i, j int) bool {
	a, b := s[i], s[j]
	if a.Spec.NodeName != b.Spec.NodeName && (a.Spec.NodeName == "" || b.Spec.NodeName == "") {
		return a.Spec.NodeName == ""
	}
	if pa, pb := phaseOrder[a.Status.Phase], phaseOrder[b.Status.Phase]; pa != pb {
		return pa < pb
	}
	ra, rb := podutil.IsReady(a), podutil.IsReady(b)
	if ra != rb {
		return !ra
	}
	if ra && rb {
		ta, tb := podutil.ReadySince(a), podutil.ReadySince(b)
		if !ta.Equal(&tb) {
			return laterOrZero(ta.Time, tb.Time)
		}
	}
	ra1, sa := maxRestarts(a)
	rb1, sb := maxRestarts(b)
	if ra1 != rb1 {
		return ra1 > rb1
	}
	if sa != sb {
		return sa > sb
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return laterOrZero(a.CreationTimestamp.Time, b.CreationTimestamp.Time)
	}
	return false
}

// laterOrZero: a zero time counts as the latest.
func laterOrZero(a, b time.Time) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero()
	}
	return a.After(b)
}

// maxRestarts returns the most restarts of a regular container and of a sidecar
// (restartable init container).
func maxRestarts(p *corev1.Pod) (regular, sidecar int32) {
	for _, cs := range p.Status.ContainerStatuses {
		regular = max(regular, cs.RestartCount)
	}
	sidecars := map[string]bool{}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars[c.Name] = true
		}
	}
	for _, cs := range p.Status.InitContainerStatuses {
		if sidecars[cs.Name] {
			sidecar = max(sidecar, cs.RestartCount)
		}
	}
	return regular, sidecar
}
