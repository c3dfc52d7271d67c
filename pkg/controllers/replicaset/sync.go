package replicaset

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/claim"
	"github.com/kshard/kshard/pkg/controllers/internal/podcontrol"
	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
)

// Event reasons besides ReasonFailedCreate and ReasonFailedDelete: the pod control's.
const (
	ReasonSuccessfulCreate = podcontrol.ReasonSuccessfulCreate
	ReasonSuccessfulDelete = podcontrol.ReasonSuccessfulDelete
)

// sync reconciles the ReplicaSet key ("namespace/name").
func (c *Controller) sync(ctx context.Context, key string) error {
	ctx, log, namespace, name, err := controllers.StartSync(ctx, key)
	if err != nil {
		utilruntime.HandleError(err)
		return nil // retrying cannot fix a malformed key
	}

	if err := c.consistency.Ready(key); err != nil {
		return err
	}
	rs, err := c.rsLister.ReplicaSets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		log.V(4).Info("replicaset gone")
		c.expectations.Forget(key)
		c.consistency.Clear(key, "")
		return nil
	}
	if err != nil {
		return err
	}
	selector, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
	if err != nil {
		// The API server validates selectors; a bad one cannot get better by retrying.
		utilruntime.HandleError(fmt.Errorf("replicaset %s: invalid selector: %w", key, err))
		return nil
	}

	// A deletion the cache already shows needs no event to count as observed.
	c.expectations.ObserveGone(key, c.podLive)
	needsManage := c.expectations.Satisfied(key)

	candidates, err := podutil.ByController(c.podIndexer,
		podutil.Owner{Namespace: rs.Namespace, Kind: c.kind.GVK.Kind, Name: rs.Name, UID: rs.UID}, true)
	if err != nil {
		return err
	}
	active, err := c.claim(ctx, rs, selector, podutil.FilterActive(candidates))
	if err != nil {
		return err
	}
	var terminating []*corev1.Pod
	for _, p := range podutil.FilterTerminating(candidates) {
		if metav1.IsControlledBy(p, rs) && selector.Matches(labels.Set(p.Labels)) {
			terminating = append(terminating, p)
		}
	}

	var manageErr error
	if needsManage && rs.DeletionTimestamp == nil {
		manageErr = c.manageReplicas(ctx, rs, active)
	} else if !needsManage {
		adds, dels := c.expectations.Pending(key)
		log.V(4).Info("waiting for earlier creates and deletes to be observed", "creates", adds, "deletes", dels)
	}

	now := c.clock.Now()
	st := computeStatus(rs, active, terminating, manageErr, now)
	if !c.kind.TerminatingReplicas {
		st.TerminatingReplicas = nil
	}
	updated, err := updateStatus(ctx, c.kind.Client(c.client, rs.Namespace), rs, st)
	if err != nil {
		return err
	}
	c.consistency.Wrote(key, rs.UID, c.kind.Resource.GroupResource(), updated.ResourceVersion)
	if manageErr != nil {
		return manageErr
	}
	if mrs := updated.Spec.MinReadySeconds; mrs > 0 && updated.Status.ReadyReplicas != updated.Status.AvailableReplicas {
		after := time.Duration(mrs) * time.Second
		if d, ok := podutil.NextAvailabilityCheck(active, mrs, now, c.clock.Now()); ok {
			after = d
		}
		c.queue.AddAfter(key, after)
	}
	return nil
}

// podLive reports whether the cache holds the pod podKey and it is not being deleted.
func (c *Controller) podLive(podKey string) bool {
	obj, exists, err := c.podIndexer.GetByKey(podKey)
	if err != nil || !exists {
		return false
	}
	pod, ok := obj.(*corev1.Pod)
	return ok && pod.DeletionTimestamp == nil
}

// claim adopts and releases pods for rs and returns the ones it owns.
func (c *Controller) claim(ctx context.Context, rs *appsv1.ReplicaSet, selector labels.Selector, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	m := &claim.Manager[*corev1.Pod]{
		Controller: rs,
		Kind:       c.kind.GVK,
		Selector:   selector,
		Fresh: func(ctx context.Context) (metav1.Object, error) {
			return c.kind.Client(c.client, rs.Namespace).Get(ctx, rs.Name, metav1.GetOptions{})
		},
		Patch: func(ctx context.Context, name string, patch []byte) error {
			pod, err := c.client.CoreV1().Pods(rs.Namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			if err == nil && metav1.IsControlledBy(pod, rs) {
				c.consistency.Wrote(keyOf(rs), rs.UID, podsResource, pod.ResourceVersion)
			}
			return err
		},
	}
	return m.Claim(ctx, pods)
}

// manageReplicas creates or deletes pods so that rs gets spec.replicas active pods, at
// most burstReplicas in this sync.
func (c *Controller) manageReplicas(ctx context.Context, rs *appsv1.ReplicaSet, active []*corev1.Pod) error {
	log := klog.FromContext(ctx)
	key := keyOf(rs)
	want := int(replicasOf(rs))
	switch diff := len(active) - want; {
	case diff < 0:
		n := min(-diff, c.burstReplicas)
		c.expectations.ExpectCreations(key, n)
		log.V(2).Info("too few replicas", "replicas", want, "active", len(active), "creating", n)
		created, err := slowStart(n, func() error {
			err := c.createPod(ctx, rs)
			if err != nil && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return nil // the namespace is going away: nothing to report or retry
			}
			return err
		})
		// Creates that failed or were never attempted will never be observed.
		if skipped := n - created; skipped > 0 {
			log.V(2).Info("slow-start failure: skipping the remaining creates", "skipped", skipped)
			for range skipped {
				c.expectations.CreationObserved(key)
			}
		}
		return err
	case diff > 0:
		n := min(diff, c.burstReplicas)
		log.V(2).Info("too many replicas", "replicas", want, "active", len(active), "deleting", n)
		related, err := c.relatedPods(rs)
		if err != nil {
			utilruntime.HandleErrorWithContext(ctx, err, "listing related pods for the deletion ranking")
		}
		victims := podsToDelete(active, related, n, c.clock.Now())
		keys := make([]string, len(victims))
		for i, p := range victims {
			keys[i] = podKey(p)
		}
		c.expectations.ExpectDeletionsOf(key, keys)
		errs := make([]error, len(victims))
		var wg sync.WaitGroup
		for i, p := range victims {
			wg.Go(func() {
				if err := c.deletePodOf(ctx, rs, p.Name); err != nil {
					c.expectations.DeletionOfObserved(key, podKey(p)) // it will never be observed
					if !apierrors.IsNotFound(err) {
						log.V(2).Info("failed to delete pod", "pod", p.Name, "err", err.Error())
						errs[i] = err
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// slowStart calls fn count times in batches of 1, 2, 4, … (each batch concurrently) and
// stops after the first batch with a failure, so a doomed create (a quota error) is tried
// a few times, not count times. It returns how many calls succeeded and one of the
// errors of the failed batch.
func slowStart(count int, fn func() error) (int, error) {
	ok := 0
	for batch := min(count, 1); batch > 0; batch = min(2*batch, count-ok) {
		errs := make(chan error, batch)
		var wg sync.WaitGroup
		for range batch {
			wg.Go(func() {
				if err := fn(); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		ok += batch - len(errs)
		if err, failed := <-errs; failed {
			return ok, err
		}
	}
	return ok, nil
}

// relatedPods returns the pods of every ReplicaSet controlled by rs's controller
// (rs's siblings in a Deployment, rs included), each pod once. A ReplicaSet without a
// controller has no related pods: as upstream, co-location does not rank its pods.
func (c *Controller) relatedPods(rs *appsv1.ReplicaSet) ([]*corev1.Pod, error) {
	ref := metav1.GetControllerOfNoCopy(rs)
	if ref == nil {
		return nil, nil
	}
	objs, err := c.rsIndexer.ByIndex(ownerIndex, string(ref.UID))
	if err != nil {
		return nil, err
	}
	var siblings []*appsv1.ReplicaSet
	for _, o := range objs {
		if s, ok := c.kind.View(o); ok {
			siblings = append(siblings, s)
		}
	}
	seen := map[types.UID]bool{}
	var out []*corev1.Pod
	for _, s := range siblings {
		sel, err := metav1.LabelSelectorAsSelector(s.Spec.Selector)
		if err != nil {
			continue
		}
		pods, err := c.podLister.Pods(s.Namespace).List(sel)
		if err != nil {
			return nil, err
		}
		for _, p := range pods {
			if !seen[p.UID] {
				seen[p.UID] = true
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// newPod builds a pod of rs's template, controlled by rs (of kind), named
// "<rs-name>-<random>".
func newPod(rs *appsv1.ReplicaSet, kind schema.GroupVersionKind) *corev1.Pod {
	return podcontrol.FromTemplate(&rs.Spec.Template, rs.Namespace, podcontrol.GenerateNamePrefix(rs.Name), metav1.NewControllerRef(rs, kind))
}

// createPod creates one pod for rs and records the event kube-controller-manager records.
func (c *Controller) createPod(ctx context.Context, rs *appsv1.ReplicaSet) error {
	created, err := c.pods.Create(ctx, c.kind.Object(rs), newPod(rs, c.kind.GVK))
	if err != nil {
		return err
	}
	c.consistency.Wrote(keyOf(rs), rs.UID, podsResource, created.ResourceVersion)
	return nil
}

// deletePodOf deletes rs's pod name and records the event kube-controller-manager
// records. A pod already gone is returned as NotFound, without an event.
func (c *Controller) deletePodOf(ctx context.Context, rs *appsv1.ReplicaSet, name string) error {
	return c.pods.Delete(ctx, c.kind.Object(rs), rs.Namespace, name)
}
