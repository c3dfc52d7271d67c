package daemonset

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	intstrutil "k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
)

// rollingUpdate replaces ds's old pods. With maxSurge 0 it deletes old pods (their nodes
// then get new ones from manage) while at most maxUnavailable nodes lack an available
// pod; an old pod that is not available anyway is always replaced. With maxSurge it
// creates new pods beside old ones on at most maxSurge nodes at once, and deletes an old
// pod once its node's new pod is available (manage does that too).
func (c *Controller) rollingUpdate(ctx context.Context, ds *appsv1.DaemonSet, nodeList []*corev1.Node, hash string) error {
	log := klog.FromContext(ctx)
	byNode, err := c.podsByNode(ctx, ds, false)
	if err != nil {
		return fmt.Errorf("couldn't get node to daemon pod mapping for daemon set %q: %w", ds.Name, err)
	}
	p := placementOf(ds)
	maxSurge, maxUnavailable, desired, err := updatedDesiredNodeCounts(log, ds, nodeList, byNode, p)
	if err != nil {
		return fmt.Errorf("couldn't get unavailable numbers: %w", err)
	}
	now := c.clock.Now()
	available := func(pod *corev1.Pod) bool { return podutil.IsAvailable(pod, ds.Spec.MinReadySeconds, now) }
	// Upstream walks its map of nodes in random order; sorted here.
	nodeNames := make([]string, 0, len(byNode))
	for n := range byNode {
		nodeNames = append(nodeNames, n)
	}
	sort.Strings(nodeNames)

	if maxSurge == 0 {
		var numUnavailable int
		var allowedReplacements, candidates []string
		for _, nodeName := range nodeNames {
			newPod, oldPod, ok := findUpdatedPodsOnNode(ds, byNode[nodeName], hash)
			if !ok {
				// More than one pod of a kind: manage deletes the surplus first.
				log.V(3).Info("the daemon set has excess pods on the node, skipping to let manage clean up", "node", nodeName)
				numUnavailable++
				continue
			}
			switch {
			case oldPod == nil && newPod == nil, oldPod != nil && newPod != nil:
				// No pod yet (or both): unavailable until the node settles.
				numUnavailable++
			case newPod != nil:
				if !available(newPod) {
					numUnavailable++
				}
			default:
				switch {
				case !available(oldPod):
					log.V(5).Info("the old daemon pod on the node is not available, allowing its replacement", "pod", oldPod.Name, "node", nodeName)
					allowedReplacements = append(allowedReplacements, oldPod.Name)
					numUnavailable++
				case numUnavailable >= maxUnavailable:
					continue
				default:
					log.V(5).Info("the old daemon pod on the node is a candidate for replacement", "pod", oldPod.Name, "node", nodeName)
					candidates = append(candidates, oldPod.Name)
				}
			}
		}
		remaining := min(max(maxUnavailable-numUnavailable, 0), len(candidates))
		log.V(5).Info("allowing replacements", "replacements", len(allowedReplacements), "maxUnavailable", maxUnavailable,
			"numUnavailable", numUnavailable, "candidates", len(candidates))
		return c.syncNodes(ctx, ds, append(allowedReplacements, candidates[:remaining]...), nil, hash)
	}

	var oldPodsToDelete, shouldNotRunPodsToDelete, candidateNewNodes, allowedNewNodes []string
	var numSurge, numAvailable int
	for _, nodeName := range nodeNames {
		newPod, oldPod, ok := findUpdatedPodsOnNode(ds, byNode[nodeName], hash)
		if !ok {
			log.V(3).Info("the daemon set has excess pods on the node, skipping to let manage clean up", "node", nodeName)
			numSurge++
			continue
		}
		if oldPod != nil {
			if available(oldPod) {
				numAvailable++
			}
		} else if newPod != nil && available(newPod) {
			numAvailable++
		}
		switch {
		case oldPod == nil:
			// Nothing to replace (a new pod, or none and manage places one).
		case newPod == nil:
			node, err := c.nodeLister.Get(nodeName)
			if err != nil {
				return fmt.Errorf("couldn't get node for nodeName %q: %w", nodeName, err)
			}
			shouldRun, _ := p.shouldRun(log, node)
			switch {
			case !available(oldPod):
				if !shouldRun {
					log.V(5).Info("the old daemon pod is not available and the node no longer admits it, deleting it", "node", nodeName, "oldPod", oldPod.Name)
					oldPodsToDelete = append(oldPodsToDelete, oldPod.Name)
					continue
				}
				// Not available anyway: start its replacement now, whatever the surge.
				log.V(5).Info("the old daemon pod is not available, allowing its replacement", "pod", oldPod.Name, "node", nodeName)
				allowedNewNodes = append(allowedNewNodes, nodeName)
			default:
				if !shouldRun {
					shouldNotRunPodsToDelete = append(shouldNotRunPodsToDelete, oldPod.Name)
					continue
				}
				if numSurge >= maxSurge {
					continue
				}
				log.V(5).Info("the old daemon pod is a surge candidate", "pod", oldPod.Name, "node", nodeName)
				candidateNewNodes = append(candidateNewNodes, nodeName)
			}
		default:
			// Both: the old one goes once the new one is available.
			if !available(newPod) {
				numSurge++
				continue
			}
			log.V(5).Info("the new daemon pod is available, deleting the old one", "newPod", newPod.Name, "node", nodeName, "oldPod", oldPod.Name)
			oldPodsToDelete = append(oldPodsToDelete, oldPod.Name)
		}
	}
	remainingSurge := maxSurge - numSurge
	// Old available pods on nodes that no longer admit them go as long as more pods
	// are available than desired.
	if deletable := numAvailable - desired; deletable > 0 {
		deletable = min(deletable, len(shouldNotRunPodsToDelete))
		for _, name := range shouldNotRunPodsToDelete[:deletable] {
			pod, err := c.podLister.Pods(ds.Namespace).Get(name)
			if err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return fmt.Errorf("couldn't get pod which should be deleted due to scheduling constraints %q: %w", name, err)
			}
			log.V(5).Info("the daemon pod should be deleted due to scheduling constraints", "pod", pod.Name, "node", pod.Spec.NodeName)
			oldPodsToDelete = append(oldPodsToDelete, name)
		}
	}
	remainingSurge = min(max(remainingSurge, 0), len(candidateNewNodes))
	log.V(5).Info("allowing replacements", "replacements", len(allowedNewNodes), "maxSurge", maxSurge,
		"numSurge", numSurge, "candidates", len(candidateNewNodes))
	return c.syncNodes(ctx, ds, oldPodsToDelete, append(allowedNewNodes, candidateNewNodes[:remainingSurge]...), hash)
}

// findUpdatedPodsOnNode returns a node's new (updated) and old daemon pods, ignoring pods
// being deleted; ok is false when the node has more than one of either.
func findUpdatedPodsOnNode(ds *appsv1.DaemonSet, pods []*corev1.Pod, hash string) (newPod, oldPod *corev1.Pod, ok bool) {
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		if isPodUpdated(ds, pod, hash) {
			if newPod != nil {
				return nil, nil, false
			}
			newPod = pod
		} else {
			if oldPod != nil {
				return nil, nil, false
			}
			oldPod = pod
		}
	}
	return newPod, oldPod, true
}

// updatedDesiredNodeCounts returns maxSurge and maxUnavailable resolved against the
// number of nodes that should run a pod, and that number; every such node gets an entry
// in byNode. With both 0 (possible with percentages that round down) maxUnavailable is 1.
func updatedDesiredNodeCounts(log klog.Logger, ds *appsv1.DaemonSet, nodeList []*corev1.Node,
	byNode map[string][]*corev1.Pod, p placement) (maxSurge, maxUnavailable, desired int, err error) {
	for _, node := range nodeList {
		if run, _ := p.shouldRun(log, node); !run {
			continue
		}
		desired++
		if _, ok := byNode[node.Name]; !ok {
			byNode[node.Name] = nil
		}
	}
	if maxUnavailable, err = unavailableCount(ds, desired); err != nil {
		return -1, -1, -1, fmt.Errorf("invalid value for MaxUnavailable: %w", err)
	}
	if maxSurge, err = surgeCount(ds, desired); err != nil {
		return -1, -1, -1, fmt.Errorf("invalid value for MaxSurge: %w", err)
	}
	if desired > 0 && maxUnavailable == 0 && maxSurge == 0 {
		log.Info("DaemonSet is not configured for surge or unavailability, defaulting to accepting unavailability")
		maxUnavailable = 1
	}
	log.V(5).Info("resolved maxSurge and maxUnavailable", "maxSurge", maxSurge, "maxUnavailable", maxUnavailable)
	return maxSurge, maxUnavailable, desired, nil
}

// surgeCount is maxSurge resolved against n nodes (percentages round up); 0 unless the
// strategy is RollingUpdate with maxSurge set.
func surgeCount(ds *appsv1.DaemonSet, n int) (int, error) {
	r := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || r == nil || r.MaxSurge == nil {
		return 0, nil
	}
	return intstrutil.GetScaledValueFromIntOrPercent(r.MaxSurge, n, true)
}

// unavailableCount is maxUnavailable resolved against n nodes (percentages round up); 0
// unless the strategy is RollingUpdate.
func unavailableCount(ds *appsv1.DaemonSet, n int) (int, error) {
	r := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || r == nil {
		return 0, nil
	}
	return intstrutil.GetScaledValueFromIntOrPercent(r.MaxUnavailable, n, true)
}

// allowsSurge reports whether a node may run an old and a new pod at once.
func allowsSurge(ds *appsv1.DaemonSet) bool {
	n, err := surgeCount(ds, 1)
	return err == nil && n > 0
}

// templateGeneration returns the deprecated templateGeneration annotation of ds, when
// set and a number.
func templateGeneration(ds *appsv1.DaemonSet) (int64, bool) {
	v, ok := ds.Annotations[appsv1.DeprecatedTemplateGeneration]
	if !ok {
		return 0, false
	}
	gen, err := strconv.ParseInt(v, 10, 64)
	return gen, err == nil
}

// isPodUpdated reports whether pod runs ds's current template: it carries the current
// revision hash, or the current template generation.
func isPodUpdated(ds *appsv1.DaemonSet, pod *corev1.Pod, hash string) bool {
	if hash != "" && pod.Labels[hashLabel] == hash {
		return true
	}
	gen, ok := templateGeneration(ds)
	return ok && pod.Labels[templateGenerationLabel] == strconv.FormatInt(gen, 10)
}

// templateGenerationLabel labels a pod with the template generation it was made from
// (extensions/v1beta1's DaemonSetTemplateGenerationKey), for DaemonSets that still carry
// the deprecated templateGeneration annotation.
const templateGenerationLabel = "pod-template-generation"
