package daemonset

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/claim"
	"github.com/kshard/kshard/pkg/controllers/internal/consistency"
	"github.com/kshard/kshard/pkg/controllers/internal/podcontrol"
	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
)

// Event reasons, upstream's.
const (
	ReasonSelectingAll       = "SelectingAll"
	ReasonFailedDaemonPod    = "FailedDaemonPod"
	ReasonSucceededDaemonPod = "SucceededDaemonPod"
	ReasonSuccessfulCreate   = podcontrol.ReasonSuccessfulCreate
	ReasonFailedCreate       = podcontrol.ReasonFailedCreate
	ReasonSuccessfulDelete   = podcontrol.ReasonSuccessfulDelete
	ReasonFailedDelete       = podcontrol.ReasonFailedDelete
)

// sync reconciles the DaemonSet key ("namespace/name").
func (c *Controller) sync(ctx context.Context, key string) error {
	ctx, log, namespace, name, err := controllers.StartSync(ctx, key)
	if err != nil {
		utilruntime.HandleError(err)
		return nil // retrying cannot fix a malformed key
	}
	if err := c.consistency.Ready(key); err != nil {
		var stale *consistency.StaleError
		if errors.As(err, &stale) {
			c.staleSkips.WithLabelValues(stale.Resource.Group, stale.Resource.Resource).Inc()
		}
		return err
	}
	ds, err := c.dsLister.DaemonSets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		log.V(3).Info("daemonset gone")
		c.expectations.Forget(key)
		c.consistency.Clear(key, "")
		return nil
	}
	if err != nil {
		return fmt.Errorf("unable to retrieve ds %v from store: %w", key, err)
	}
	nodeList, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("couldn't get list of nodes when syncing daemon set %s: %w", key, err)
	}
	// Upstream works the nodes in its cache's order; a fixed order makes the same choices
	// in tests.
	sort.Slice(nodeList, func(i, j int) bool { return nodeList[i].Name < nodeList[j].Name })

	if reflect.DeepEqual(ds.Spec.Selector, &metav1.LabelSelector{}) {
		c.recorder.Eventf(ds, corev1.EventTypeWarning, ReasonSelectingAll, "This daemon set is selecting all pods. A non-empty selector is required.")
		return nil
	}
	if ds.DeletionTimestamp != nil {
		return nil // the garbage collector deletes its pods
	}

	cur, old, err := c.constructHistory(ctx, ds)
	if err != nil {
		return fmt.Errorf("failed to construct revisions of DaemonSet: %w", err)
	}
	hash := cur.Labels[hashLabel]

	// A deletion the cache already shows needs no event to count as observed.
	c.expectations.ObserveGone(key, c.podLive)
	if !c.expectations.Satisfied(key) {
		adds, dels := c.expectations.Pending(key)
		log.V(4).Info("waiting for earlier creates and deletes to be observed", "creates", adds, "deletes", dels)
		return c.updateStatus(ctx, ds, nodeList, hash, false)
	}

	err = c.update(ctx, ds, nodeList, hash, old)
	statusErr := c.updateStatus(ctx, ds, nodeList, hash, true)
	switch {
	case err != nil && statusErr != nil:
		log.Error(statusErr, "failed to update status")
		return err
	case err != nil:
		return err
	default:
		return statusErr
	}
}

// update places and removes pods, rolls the template out, and cleans up old revisions.
func (c *Controller) update(ctx context.Context, ds *appsv1.DaemonSet, nodeList []*corev1.Node, hash string, old []*appsv1.ControllerRevision) error {
	if err := c.manage(ctx, ds, nodeList, hash); err != nil {
		return err
	}
	// Replacing old pods waits until the pods placed above are observed.
	if c.expectations.Satisfied(keyOf(ds)) && ds.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if err := c.rollingUpdate(ctx, ds, nodeList, hash); err != nil {
			return err
		}
	}
	if err := c.cleanupHistory(ctx, ds, old); err != nil {
		return fmt.Errorf("failed to clean up revisions of DaemonSet: %w", err)
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

// claimPods adopts the namespace's orphan pods ds selects, releases its own that it no
// longer selects, and returns those it owns.
func (c *Controller) claimPods(ctx context.Context, ds *appsv1.DaemonSet) ([]*corev1.Pod, error) {
	selector, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, err
	}
	candidates, err := podutil.ByController(c.podIndexer,
		podutil.Owner{Namespace: ds.Namespace, Kind: controllerKind.Kind, Name: ds.Name, UID: ds.UID}, true)
	if err != nil {
		return nil, err
	}
	m := &claim.Manager[*corev1.Pod]{
		Controller: ds, Kind: controllerKind, Selector: selector,
		Fresh: c.freshDaemonSet(ds),
		Patch: func(ctx context.Context, name string, patch []byte) error {
			pod, err := c.client.CoreV1().Pods(ds.Namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			if err == nil && metav1.IsControlledBy(pod, ds) {
				c.consistency.Wrote(keyOf(ds), ds.UID, podsResource, pod.ResourceVersion)
			}
			return err
		},
	}
	return m.Claim(ctx, candidates)
}

// podsByNode returns ds's pods by the node they are on or pinned to; pods both terminal
// and being deleted are left out unless withDeletedTerminal.
func (c *Controller) podsByNode(ctx context.Context, ds *appsv1.DaemonSet, withDeletedTerminal bool) (map[string][]*corev1.Pod, error) {
	claimed, err := c.claimPods(ctx, ds)
	if err != nil {
		return nil, err
	}
	log := klog.FromContext(ctx)
	byNode := map[string][]*corev1.Pod{}
	for _, pod := range claimed {
		if !withDeletedTerminal && podutil.IsTerminal(pod) && pod.DeletionTimestamp != nil {
			continue
		}
		node, err := targetNode(pod)
		if err != nil {
			log.V(4).Info("failed to get the target node of a daemon pod", "pod", pod.Name, "err", err.Error())
			continue
		}
		byNode[node] = append(byNode[node], pod)
	}
	return byNode, nil
}

// sortPods orders a node's daemon pods as upstream ranks them: bound to the node first,
// then oldest first, then by name.
func sortPods(pods []*corev1.Pod) {
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := pods[i], pods[j]
		if (a.Spec.NodeName != "") != (b.Spec.NodeName != "") {
			return a.Spec.NodeName != ""
		}
		if a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.Name < b.Name
		}
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	})
}

// manage creates the pods of nodes that should run one and have none, and deletes the
// pods of nodes that must not run one, surplus pods and finished pods.
func (c *Controller) manage(ctx context.Context, ds *appsv1.DaemonSet, nodeList []*corev1.Node, hash string) error {
	byNode, err := c.podsByNode(ctx, ds, false)
	if err != nil {
		return fmt.Errorf("couldn't get node to daemon pod mapping for daemon set %q: %w", ds.Name, err)
	}
	log := klog.FromContext(ctx)
	p := placementOf(ds)
	var create, del []string
	for _, node := range nodeList {
		cr, de := c.podsShouldBeOnNode(log, node, byNode, ds, hash, p)
		create = append(create, cr...)
		del = append(del, de...)
	}
	// Pods pinned to nodes that no longer exist and never bound: nothing will run them.
	present := make(map[string]bool, len(nodeList))
	for _, n := range nodeList {
		present[n.Name] = true
	}
	for node, pods := range byNode {
		if present[node] {
			continue
		}
		for _, pod := range pods {
			if pod.Spec.NodeName == "" {
				del = append(del, pod.Name)
			}
		}
	}
	return c.syncNodes(ctx, ds, del, create, hash)
}

// podsShouldBeOnNode returns whether node needs a daemon pod created and which of its
// daemon pods to delete.
func (c *Controller) podsShouldBeOnNode(log klog.Logger, node *corev1.Node, byNode map[string][]*corev1.Pod,
	ds *appsv1.DaemonSet, hash string, p placement) (create, del []string) {
	shouldRun, shouldContinueRunning := p.shouldRun(log, node)
	pods, exists := byNode[node.Name]
	switch {
	case shouldRun && !exists:
		create = append(create, node.Name)
	case shouldContinueRunning:
		var running []*corev1.Pod
		for _, pod := range pods {
			if pod.DeletionTimestamp != nil {
				continue
			}
			switch pod.Status.Phase {
			case corev1.PodFailed:
				// A pod failing over and over must not make the controller delete and
				// create pods in a hot loop.
				backoffKey := failedPodsBackoffKey(ds, node.Name)
				now := c.clock.Now()
				if c.failedPods.IsInBackOffSinceUpdate(backoffKey, now) {
					delay := c.failedPods.Get(backoffKey)
					log.V(4).Info("deleting the failed pod on the node is limited by backoff", "pod", pod.Name, "node", node.Name, "currentDelay", delay)
					c.queue.AddAfter(keyOf(ds), delay)
					continue
				}
				c.failedPods.Next(backoffKey, now)
				msg := fmt.Sprintf("Found failed daemon pod %s/%s on node %s, will try to kill it", pod.Namespace, pod.Name, node.Name)
				log.V(2).Info("found a failed daemon pod on the node, will try to kill it", "pod", pod.Name, "node", node.Name)
				c.recorder.Eventf(ds, corev1.EventTypeWarning, ReasonFailedDaemonPod, "%s", msg)
				del = append(del, pod.Name)
			case corev1.PodSucceeded:
				msg := fmt.Sprintf("Found succeeded daemon pod %s/%s on node %s, will try to delete it", pod.Namespace, pod.Name, node.Name)
				log.V(2).Info("found a succeeded daemon pod on the node, will try to delete it", "pod", pod.Name, "node", node.Name)
				c.recorder.Eventf(ds, corev1.EventTypeNormal, ReasonSucceededDaemonPod, "%s", msg)
				del = append(del, pod.Name)
			default:
				running = append(running, pod)
			}
		}
		if !allowsSurge(ds) {
			// Keep the oldest; the rest are surplus.
			if len(running) > 1 {
				sortPods(running)
				for _, pod := range running[1:] {
					del = append(del, pod.Name)
				}
			}
			break
		}
		if len(running) <= 1 {
			// Nothing running (the failed pod is going): place a new one if it should.
			if len(running) == 0 && shouldRun {
				create = append(create, node.Name)
			}
			break
		}
		// With surge a node may run one old and one new pod: keep the oldest of each,
		// and delete the old one once it is not ready or the new one is available.
		sortPods(running)
		var oldestNew, oldestOld *corev1.Pod
		for _, pod := range running {
			if pod.Labels[hashLabel] == hash {
				if oldestNew == nil {
					oldestNew = pod
					continue
				}
			} else if oldestOld == nil {
				oldestOld = pod
				continue
			}
			del = append(del, pod.Name)
		}
		if oldestNew != nil && oldestOld != nil {
			switch {
			case !podutil.IsReady(oldestOld):
				log.V(5).Info("the old daemon pod is no longer ready and will be replaced by the newer pod",
					"oldPod", oldestOld.Name, "newPod", oldestNew.Name)
				del = append(del, oldestOld.Name)
			case podutil.IsAvailable(oldestNew, ds.Spec.MinReadySeconds, c.clock.Now()):
				log.V(5).Info("the new daemon pod is available and replaces the older pod",
					"newPod", oldestNew.Name, "oldPod", oldestOld.Name)
				del = append(del, oldestOld.Name)
			}
		}
	case !shouldContinueRunning && exists:
		for _, pod := range pods {
			if pod.DeletionTimestamp == nil {
				del = append(del, pod.Name)
			}
		}
	}
	return create, del
}

// failedPodsBackoffKey is the failed-pod backoff's key: the DaemonSet (by UID), its
// observed generation and the node.
func failedPodsBackoffKey(ds *appsv1.DaemonSet, node string) string {
	return fmt.Sprintf("%s/%d/%s", ds.UID, ds.Status.ObservedGeneration, node)
}

// syncNodes deletes the pods del and creates a pod pinned to each node of create, at
// most burstReplicas of each, the creates in slow-start batches.
func (c *Controller) syncNodes(ctx context.Context, ds *appsv1.DaemonSet, del, create []string, hash string) error {
	log := klog.FromContext(ctx)
	key := keyOf(ds)
	create = create[:min(len(create), c.burstReplicas)]
	del = del[:min(len(del), c.burstReplicas)]
	delKeys := make([]string, len(del))
	for i, name := range del {
		delKeys[i] = ds.Namespace + "/" + name
	}
	c.expectations.Expect(key, len(create), delKeys)

	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}

	if len(create) > 0 {
		log.V(4).Info("nodes needing daemon pods, creating", "needCount", len(create))
		template := podTemplate(ds, hash)
		created := slowStart(len(create), func(i int) error {
			err := c.createPod(ctx, ds, template, create[i])
			if err != nil && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				c.expectations.CreationObserved(key)
				return nil // the namespace is going away: nothing to report or retry
			}
			if err != nil {
				log.V(2).Info("failed creation, decrementing expectations", "node", create[i])
				c.expectations.CreationObserved(key)
				fail(err)
				utilruntime.HandleErrorWithContext(ctx, err, "creating a daemon pod", "node", create[i])
			}
			return err
		})
		if skipped := len(create) - created.attempted; skipped > 0 {
			log.V(2).Info("slow-start failure: skipping the remaining creates, decrementing expectations", "skippedPods", skipped)
			for range skipped {
				c.expectations.CreationObserved(key)
			}
		}
	}

	if len(del) > 0 {
		log.V(4).Info("pods to delete for the daemon set, deleting", "deleteCount", len(del))
		var wg sync.WaitGroup
		for i, name := range del {
			wg.Go(func() {
				if err := c.deletePod(ctx, ds, name); err != nil {
					c.expectations.DeletionOfObserved(key, delKeys[i])
					if !apierrors.IsNotFound(err) {
						log.V(2).Info("failed deletion, decremented expectations", "pod", name)
						fail(err)
						utilruntime.HandleErrorWithContext(ctx, err, "deleting a daemon pod", "pod", name)
					}
				}
			})
		}
		wg.Wait()
	}
	return errors.Join(errs...)
}

// slowStartResult says how many calls slowStart made.
type slowStartResult struct{ attempted int }

// slowStart calls fn(0..count-1) in batches of 1, 2, 4, … (each batch concurrently) and
// stops after the first batch with a failure, so a doomed create (a quota error) is tried
// a few times, not count times.
func slowStart(count int, fn func(i int) error) slowStartResult {
	pos := 0
	for batch := min(count, 1); batch > 0; batch = min(2*batch, count-pos) {
		var failed bool
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := pos; i < pos+batch; i++ {
			wg.Go(func() {
				if fn(i) != nil {
					mu.Lock()
					failed = true
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		pos += batch
		if failed {
			break
		}
	}
	return slowStartResult{attempted: pos}
}

// podTemplate returns ds's template as its pods get it: the default tolerations added,
// and labelled with the template generation (the deprecated annotation, when set) and
// the revision hash.
func podTemplate(ds *appsv1.DaemonSet, hash string) *corev1.PodTemplateSpec {
	t := ds.Spec.Template.DeepCopy()
	addDaemonTolerations(&t.Spec)
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	if gen, ok := templateGeneration(ds); ok {
		t.Labels[templateGenerationLabel] = fmt.Sprint(gen)
	}
	if hash != "" {
		t.Labels[hashLabel] = hash
	}
	return t
}

// newPod builds ds's pod for node from template, pinned to node, controlled by ds, named
// "<daemonset>-<random>".
func newPod(ds *appsv1.DaemonSet, template *corev1.PodTemplateSpec, node string) *corev1.Pod {
	pod := podcontrol.FromTemplate(template, ds.Namespace, podcontrol.GenerateNamePrefix(ds.Name), metav1.NewControllerRef(ds, controllerKind))
	pod.Spec.Affinity = pinToNode(pod.Spec.Affinity, node)
	return pod
}

// createPod creates ds's pod for node and records the events upstream's pod control
// records.
func (c *Controller) createPod(ctx context.Context, ds *appsv1.DaemonSet, template *corev1.PodTemplateSpec, node string) error {
	created, err := c.pods.Create(ctx, ds, newPod(ds, template, node))
	if err != nil {
		return err
	}
	c.consistency.Wrote(keyOf(ds), ds.UID, podsResource, created.ResourceVersion)
	return nil
}

// deletePod deletes ds's pod name and records the event upstream records. A pod already
// gone is returned as NotFound, without an event.
func (c *Controller) deletePod(ctx context.Context, ds *appsv1.DaemonSet, name string) error {
	return c.pods.Delete(ctx, ds, ds.Namespace, name)
}

// requeueAfter queues ds again after d.
func (c *Controller) requeueAfter(ds *appsv1.DaemonSet, d time.Duration) {
	c.queue.AddAfter(keyOf(ds), d)
}
