package statefulset

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/claim"
	"github.com/kshard/kshard/pkg/controllers/internal/history"
	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
)

// sync reconciles the StatefulSet key ("namespace/name").
func (c *Controller) sync(ctx context.Context, key string) error {
	ctx, log, namespace, name, err := controllers.StartSync(ctx, key)
	if err != nil {
		utilruntime.HandleError(err)
		return nil // retrying cannot fix a malformed key
	}
	if err := c.consistency.Ready(key); err != nil {
		return err
	}
	set, err := c.setLister.StatefulSets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		log.Info("StatefulSet has been deleted")
		c.consistency.Clear(key, "")
		return nil
	}
	if err != nil {
		return err
	}
	selector, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil {
		// The API server validates selectors; a bad one cannot get better by retrying.
		utilruntime.HandleError(fmt.Errorf("statefulset %s: invalid selector: %w", key, err))
		return nil
	}

	revs, err := c.history.List(set, controllerKind, selector)
	if err != nil {
		return err
	}
	if err := c.adoptOrphanRevisions(ctx, set, revs); err != nil {
		return err
	}
	pods, err := c.claimPods(ctx, set, selector)
	if err != nil {
		return err
	}

	now := c.clock.Now()
	status, err := c.updateSet(ctx, set, pods, now)
	if err != nil {
		return err
	}
	if mrs := set.Spec.MinReadySeconds; mrs > 0 && status != nil && status.ReadyReplicas != status.AvailableReplicas {
		after := time.Duration(mrs) * time.Second
		if d, ok := podutil.NextAvailabilityCheck(pods, mrs, now, c.clock.Now()); ok {
			after = d
		}
		c.queue.AddAfter(key, after)
	}
	return nil
}

// claimPods returns the set's pods after adopting the orphans its selector matches and
// whose names are its own, and releasing owned pods that no longer match.
func (c *Controller) claimPods(ctx context.Context, set *appsv1.StatefulSet, selector labels.Selector) ([]*corev1.Pod, error) {
	candidates, err := podutil.ByController(c.podIndexer,
		podutil.Owner{Namespace: set.Namespace, Kind: controllerKind.Kind, Name: set.Name, UID: set.UID}, true)
	if err != nil {
		return nil, err
	}
	m := &claim.Manager[*corev1.Pod]{
		Controller: set,
		Kind:       controllerKind,
		Selector:   selector,
		Filter:     func(pod *corev1.Pod) bool { return isMemberOf(set, pod) },
		Fresh:      func(ctx context.Context) (metav1.Object, error) { return c.fresh(ctx, set) },
		Patch: func(ctx context.Context, name string, patch []byte) error {
			pod, err := c.client.CoreV1().Pods(set.Namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			if err == nil && metav1.IsControlledBy(pod, set) {
				c.consistency.Wrote(keyOf(set), set.UID, podsResource, pod.ResourceVersion)
			}
			return err
		},
	}
	return m.Claim(ctx, candidates)
}

// updateSet reconciles the set's revisions, pods and status and truncates its history;
// it returns the status it computed (nil when it failed before one).
func (c *Controller) updateSet(ctx context.Context, set *appsv1.StatefulSet, pods []*corev1.Pod, now time.Time) (*appsv1.StatefulSetStatus, error) {
	set = set.DeepCopy()
	selector, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil {
		return nil, err
	}
	revs, err := c.history.List(set, controllerKind, selector)
	if err != nil {
		return nil, err
	}
	history.Sort(revs)

	current, update, status, err := c.performUpdate(ctx, set, pods, revs, now)
	truncErr := c.truncateHistory(ctx, set, pods, revs, current, update)
	if err != nil {
		errs := []error{err}
		if agg, ok := err.(utilerrors.Aggregate); ok {
			errs = agg.Errors()
		}
		return nil, utilerrors.NewAggregate(append(errs, truncErr))
	}
	return status, truncErr
}

// performUpdate finds the revisions, works the pods and writes the status (also after a
// failure of the pod work, when there is a status to write).
func (c *Controller) performUpdate(ctx context.Context, set *appsv1.StatefulSet, pods []*corev1.Pod, revs []*appsv1.ControllerRevision, now time.Time) (current, update *appsv1.ControllerRevision, status *appsv1.StatefulSetStatus, err error) {
	log := klog.FromContext(ctx)
	current, update, collisionCount, err := c.revisions(ctx, set, revs)
	if err != nil {
		return current, update, nil, err
	}
	status, err = c.updateStatefulSet(ctx, set, current, update, collisionCount, pods, now)
	if err != nil && status == nil {
		return current, update, nil, err
	}
	statusErr := c.writeStatus(ctx, set, status)
	switch {
	case err != nil && statusErr != nil:
		log.Error(statusErr, "Could not update status")
		return current, update, status, err
	case err != nil:
		return current, update, status, err
	case statusErr != nil:
		return current, update, status, statusErr
	}
	log.V(4).Info("StatefulSet revisions", "currentRevision", status.CurrentRevision, "updateRevision", status.UpdateRevision)
	return current, update, status, nil
}
