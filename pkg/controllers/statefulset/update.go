package statefulset

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
)

// maxBatchSize caps a slow-start batch of parallel pod operations (upstream's
// MaxBatchSize).
const maxBatchSize = 500

// ReasonUnknownStrategy warns about a Recreate update strategy, which needs the
// StatefulSetRecreateStrategy feature (alpha, off in 1.37; kshard does not implement it).
const ReasonUnknownStrategy = "UnknownStrategy"

// updateStatefulSet brings the set's pods towards its spec in upstream's order: replace
// failed and succeeded pods, create missing ones (and their claims), fix identities,
// storage and claim references, delete the condemned pods (ordinals out of range) from
// the highest down, then, for RollingUpdate, delete pods of other revisions from the
// highest ordinal down to the partition within maxUnavailable. OrderedReady (monotonic)
// handles one pod at a time and waits for each to be Running, Ready and available;
// Parallel works on all at once. It returns the status to write, also with an error.
func (c *Controller) updateStatefulSet(ctx context.Context, set *appsv1.StatefulSet, current, update *appsv1.ControllerRevision,
	collisionCount int32, pods []*corev1.Pod, now time.Time) (*appsv1.StatefulSetStatus, error) {
	log := klog.FromContext(ctx)
	currentSet, err := applyRevision(set, current)
	if err != nil {
		return nil, err
	}
	updateSet, err := applyRevision(set, update)
	if err != nil {
		return nil, err
	}
	if set.Spec.UpdateStrategy.Type == appsv1.RecreateStatefulSetStrategyType {
		err := fmt.Errorf("statefulset %s/%s uses Recreate strategy but feature gate %s is disabled",
			set.Namespace, set.Name, "StatefulSetRecreateStrategy")
		c.recorder.Event(set, corev1.EventTypeWarning, ReasonUnknownStrategy, err.Error())
		return nil, err
	}

	status := appsv1.StatefulSetStatus{
		ObservedGeneration: set.Generation,
		CurrentRevision:    current.Name,
		UpdateRevision:     update.Name,
		CollisionCount:     &collisionCount,
	}
	status.Conditions = append(status.Conditions, set.Status.Conditions...)
	countReplicas(&status, set.Spec.MinReadySeconds, current, update, now, pods)

	// replicas[i] is the pod of ordinal start+i (planned when missing); condemned are the
	// pods outside the range, highest ordinal first.
	start, end := startOrdinal(set), endOrdinal(set)
	replicas := make([]*corev1.Pod, int(*set.Spec.Replicas))
	condemned := make([]*corev1.Pod, 0, len(pods))
	for _, pod := range pods {
		if inOrdinalRange(pod, set) {
			replicas[ordinalOf(pod)-start] = pod
		} else if ordinalOf(pod) >= 0 {
			condemned = append(condemned, pod)
		}
	}
	for ord := start; ord <= end; ord++ {
		if replicas[ord-start] == nil {
			replicas[ord-start] = newVersionedPod(currentSet, updateSet, current.Name, update.Name, ord)
		}
	}
	sort.SliceStable(condemned, func(i, j int) bool { return ordinalOf(condemned[i]) > ordinalOf(condemned[j]) })

	// The first unavailable pod, the lowest wanted ordinal first, then the condemned from
	// the lowest: OrderedReady may still delete it while it is unhealthy.
	var firstUnavailable *corev1.Pod
	unavailable := 0
	for _, p := range replicas {
		if isUnavailable(p, set.Spec.MinReadySeconds, now) {
			unavailable++
			if firstUnavailable == nil {
				firstUnavailable = p
			}
		}
	}
	for i := len(condemned) - 1; i >= 0; i-- {
		if isUnavailable(condemned[i], set.Spec.MinReadySeconds, now) {
			unavailable++
			if firstUnavailable == nil {
				firstUnavailable = condemned[i]
			}
		}
	}
	if unavailable > 0 {
		log.V(4).Info("StatefulSet has unavailable Pods", "unavailable", unavailable, "firstUnavailable", klog.KObj(firstUnavailable))
	}

	// A set being deleted gets its status, no pod work.
	if set.DeletionTimestamp != nil {
		return &status, nil
	}
	monotonic := set.Spec.PodManagementPolicy != appsv1.ParallelPodManagement
	recount := func() { countReplicas(&status, set.Spec.MinReadySeconds, current, update, now, replicas, condemned) }

	processReplica := func(i int) (bool, error) {
		return c.processReplica(ctx, set, updateSet, monotonic, replicas, i, now)
	}
	if exit, err := runForAll(replicas, processReplica, monotonic); exit || err != nil {
		recount()
		return &status, err
	}

	fixClaims := func(i int) (bool, error) {
		match, err := c.claimsMatchRetention(ctx, updateSet, condemned[i])
		if err != nil {
			return true, err
		}
		if !match {
			if err := c.updateClaimsForRetention(ctx, updateSet, condemned[i]); err != nil {
				return true, err
			}
		}
		return false, nil
	}
	if exit, err := runForAll(condemned, fixClaims, monotonic); exit || err != nil {
		recount()
		return &status, err
	}

	processCondemned := func(i int) (bool, error) {
		return c.processCondemned(ctx, set, firstUnavailable, monotonic, condemned, i, now)
	}
	if exit, err := runForAll(condemned, processCondemned, monotonic); exit || err != nil {
		recount()
		return &status, err
	}
	recount()

	if set.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		return &status, nil
	}
	return c.rollingUpdate(ctx, set, replicas, update, status, now)
}

// processReplica works the wanted pod replicas[i]; true stops the round (OrderedReady
// waits for this pod).
func (c *Controller) processReplica(ctx context.Context, set, updateSet *appsv1.StatefulSet, monotonic bool, replicas []*corev1.Pod, i int, now time.Time) (bool, error) {
	log := klog.FromContext(ctx)
	pod := replicas[i]
	// A Failed or Succeeded pod is deleted; its replacement comes in a later sync.
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		if pod.DeletionTimestamp == nil {
			if err := c.deletePod(ctx, set, pod); err != nil {
				return true, err
			}
		}
		return true, nil
	}
	if !isCreated(pod) {
		// A claim that still names an earlier pod of this ordinal is about to be
		// deleted by the garbage collector: wait for it to go.
		if stale, err := c.podClaimIsStale(set, pod); err != nil || stale {
			return true, err
		}
		if err := c.createPod(ctx, set, pod); err != nil {
			return true, err
		}
		if monotonic {
			return true, nil // wait for it to run and be ready
		}
	}
	if isPending(pod) {
		log.V(4).Info("StatefulSet is triggering PVC creation for pending Pod", "pod", klog.KObj(pod))
		if err := c.createMissingClaims(ctx, set, pod); err != nil {
			return true, err
		}
	}
	if monotonic {
		if isTerminating(pod) {
			log.V(4).Info("StatefulSet is waiting for Pod to Terminate", "pod", klog.KObj(pod))
			return true, nil
		}
		if !isRunningAndReady(pod) {
			log.V(4).Info("StatefulSet is waiting for Pod to be Running and Ready", "pod", klog.KObj(pod))
			return true, nil
		}
		if !isAvailable(pod, set.Spec.MinReadySeconds, now) {
			log.V(4).Info("StatefulSet is waiting for Pod to be Available", "pod", klog.KObj(pod))
			return true, nil
		}
	}
	// Identity, storage and claim references; the pod's other fields are the revision's
	// and change only by replacement.
	retentionMatch, err := c.claimsMatchRetention(ctx, updateSet, pod)
	if err != nil {
		retentionMatch = true // an error reading claims does not stop the round
	}
	if identityMatches(set, pod) && storageMatches(set, pod) && retentionMatch {
		return false, nil
	}
	if err := c.updatePod(ctx, updateSet, pod.DeepCopy()); err != nil {
		return true, err
	}
	return false, nil
}

// processCondemned deletes condemned[i] (a pod past the last wanted ordinal); true stops
// the round. OrderedReady deletes one at a time, waits for each to terminate, and
// deletes only while every other pod is healthy (an unhealthy pod may itself go first).
func (c *Controller) processCondemned(ctx context.Context, set *appsv1.StatefulSet, firstUnavailable *corev1.Pod, monotonic bool, condemned []*corev1.Pod, i int, now time.Time) (bool, error) {
	log := klog.FromContext(ctx)
	pod := condemned[i]
	if isTerminating(pod) {
		if monotonic {
			log.V(4).Info("StatefulSet is waiting for Pod to Terminate prior to scale down", "pod", klog.KObj(pod))
			return true, nil
		}
		return false, nil
	}
	if monotonic && pod != firstUnavailable {
		if !isRunningAndReady(pod) || !isAvailable(pod, set.Spec.MinReadySeconds, now) {
			log.V(4).Info("StatefulSet is waiting for Pod to be Running, Ready and Available prior to scale down",
				"firstUnavailable", klog.KObj(firstUnavailable))
			return true, nil
		}
	}
	log.V(2).Info("Pod of StatefulSet is terminating for scale down", "pod", klog.KObj(pod))
	return true, c.deletePod(ctx, set, pod)
}

// runForAll runs fn over the pods: in order, stopping at the first that asks to stop or
// fails (monotonic), or all at once in slow-start batches.
func runForAll(pods []*corev1.Pod, fn func(i int) (bool, error), monotonic bool) (bool, error) {
	if monotonic {
		for i := range pods {
			if exit, err := fn(i); exit || err != nil {
				return true, err
			}
		}
		return false, nil
	}
	if _, err := slowStartBatch(1, len(pods), fn); err != nil {
		return true, err
	}
	return false, nil
}

// slowStartBatch calls fn for 0..remaining-1 in concurrent batches of 1, 2, 4, … (at
// most maxBatchSize), stopping after the first batch with a failure; it returns how many
// calls succeeded.
func slowStartBatch(initial, remaining int, fn func(int) (bool, error)) (int, error) {
	successes, next := 0, 0
	for batch := min(remaining, initial); batch > 0; batch = min(2*batch, remaining, maxBatchSize) {
		errCh := make(chan error, batch)
		var wg sync.WaitGroup
		for range batch {
			k := next
			next++
			wg.Go(func() {
				if _, err := fn(k); err != nil {
					errCh <- err
				}
			})
		}
		wg.Wait()
		close(errCh)
		successes += batch - len(errCh)
		if len(errCh) > 0 {
			var errs []error
			for err := range errCh {
				errs = append(errs, err)
			}
			return successes, utilerrors.NewAggregate(errs)
		}
		remaining -= batch
	}
	return successes, nil
}

// maxUnavailable resolves rollingUpdate.maxUnavailable (default 1) against replicas,
// percentages rounded down, at least 1.
func maxUnavailable(set *appsv1.StatefulSet) (int, error) {
	if set.Spec.UpdateStrategy.RollingUpdate == nil {
		return 1, nil
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(
		intstr.ValueOrDefault(set.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable, intstr.FromInt32(1)), int(*set.Spec.Replicas), false)
	if err != nil {
		return 0, err
	}
	return max(n, 1), nil
}

// rollingUpdate deletes pods of other revisions, from the highest ordinal down to the
// partition, while fewer than maxUnavailable wanted pods are unavailable
// (MaxUnavailableStatefulSet, on by default in 1.37). With Parallel management a pod of
// an old revision that is itself unavailable is replaced whatever the budget.
func (c *Controller) rollingUpdate(ctx context.Context, set *appsv1.StatefulSet, replicas []*corev1.Pod, update *appsv1.ControllerRevision,
	status appsv1.StatefulSetStatus, now time.Time) (*appsv1.StatefulSetStatus, error) {
	log := klog.FromContext(ctx)
	partition := 0
	budget, err := maxUnavailable(set)
	if err != nil {
		return &status, err
	}
	if ru := set.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		partition = int(*ru.Partition)
	}
	parallel := set.Spec.PodManagementPolicy == appsv1.ParallelPodManagement
	mrs := set.Spec.MinReadySeconds

	unavailablePods, unavailableNeedingUpdate := 0, 0
	for i := len(replicas) - 1; i >= 0; i-- {
		pod := replicas[i]
		if isUnavailable(pod, mrs, now) {
			unavailablePods++
			if parallel && podRevision(pod) != update.Name && !isTerminating(pod) {
				unavailableNeedingUpdate++
			}
		}
	}
	if unavailablePods >= budget && unavailableNeedingUpdate == 0 {
		log.V(4).Info("StatefulSet found unavailablePods, more than or equal to allowed maxUnavailable",
			"unavailablePods", unavailablePods, "maxUnavailable", budget)
		return &status, nil
	}

	if parallel {
		// Old-revision pods that are unavailable anyway are replaced at once.
		for i := len(replicas) - 1; i >= partition; i-- {
			pod := replicas[i]
			if podRevision(pod) != update.Name && !isAvailable(pod, mrs, now) && !isTerminating(pod) {
				log.V(2).Info("StatefulSet terminating unavailable Pod for update", "pod", klog.KObj(pod))
				if err := c.deletePod(ctx, set, pod); err != nil {
					return &status, err
				}
				status.CurrentReplicas--
			}
		}
		remaining := budget - unavailablePods
		for i := len(replicas) - 1; i >= partition && remaining > 0; i-- {
			pod := replicas[i]
			if podRevision(pod) != update.Name && !isUnavailable(pod, mrs, now) {
				log.V(2).Info("StatefulSet terminating Pod for update", "pod", klog.KObj(pod))
				if err := c.deletePod(ctx, set, pod); err != nil {
					return &status, err
				}
				remaining--
				status.CurrentReplicas--
			}
		}
		return &status, nil
	}

	toDelete, deleted := budget-unavailablePods, 0
	for i := len(replicas) - 1; i >= partition && deleted < toDelete; i-- {
		pod := replicas[i]
		if podRevision(pod) != update.Name && !isTerminating(pod) {
			log.V(2).Info("StatefulSet terminating Pod for update", "pod", klog.KObj(pod))
			if err := c.deletePod(ctx, set, pod); err != nil {
				return &status, err
			}
			deleted++
			status.CurrentReplicas--
		}
	}
	return &status, nil
}
