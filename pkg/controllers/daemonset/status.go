package daemonset

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
)

// statusUpdateRetries is how many times a status write that failed is retried on a fresh
// read of the DaemonSet (upstream's StatusUpdateRetries).
const statusUpdateRetries = 1

// counts are the status' node and pod counts.
type counts struct {
	desired, current, misscheduled, ready, updated, available, unavailable int32
}

// computeCounts counts, over nodeList, the nodes that should run a pod (desired), those
// that run one (current), those that run one but should not (misscheduled), and of the
// running ones (the oldest pod of a node) the ready, available and updated ones.
func computeCounts(log klog.Logger, ds *appsv1.DaemonSet, nodeList []*corev1.Node, byNode map[string][]*corev1.Pod,
	hash string, now time.Time) counts {
	var n counts
	p := placementOf(ds)
	for _, node := range nodeList {
		shouldRun, _ := p.shouldRun(log, node)
		pods := byNode[node.Name]
		scheduled := len(pods) > 0
		if !shouldRun {
			if scheduled {
				n.misscheduled++
			}
			continue
		}
		n.desired++
		if !scheduled {
			continue
		}
		n.current++
		sortPods(pods)
		pod := pods[0]
		if podutil.IsReady(pod) {
			n.ready++
			if podutil.IsAvailable(pod, ds.Spec.MinReadySeconds, now) {
				n.available++
			}
		}
		if isPodUpdated(ds, pod, hash) {
			n.updated++
		}
	}
	n.unavailable = n.desired - n.available
	return n
}

// updateStatus writes ds's status counts, and observedGeneration when observeGeneration
// (not while earlier creates and deletes are still unobserved), and queues ds again when
// a ready pod turns available after minReadySeconds.
func (c *Controller) updateStatus(ctx context.Context, ds *appsv1.DaemonSet, nodeList []*corev1.Node, hash string, observeGeneration bool) error {
	byNode, err := c.podsByNode(ctx, ds, false)
	if err != nil {
		return fmt.Errorf("couldn't get node to daemon pod mapping for daemon set %q: %w", ds.Name, err)
	}
	n := computeCounts(klog.FromContext(ctx), ds, nodeList, byNode, hash, c.clock.Now())
	updated, err := c.storeStatus(ctx, ds, n, observeGeneration)
	if err != nil {
		return fmt.Errorf("error storing status for daemon set %s/%s: %w", ds.Namespace, ds.Name, err)
	}
	if updated != nil {
		c.consistency.Wrote(keyOf(ds), updated.UID, daemonSetsResource, updated.ResourceVersion)
	}
	if ds.Spec.MinReadySeconds > 0 && n.ready != n.available {
		c.requeueAfter(ds, time.Duration(ds.Spec.MinReadySeconds)*time.Second)
	}
	return nil
}

// storeStatus writes n (and the generation) into ds's status unless nothing changed and
// the generation is observed; a failed write is retried once on a fresh read. It returns
// the written DaemonSet, nil when nothing was written.
func (c *Controller) storeStatus(ctx context.Context, ds *appsv1.DaemonSet, n counts, observeGeneration bool) (*appsv1.DaemonSet, error) {
	st := ds.Status
	if st.DesiredNumberScheduled == n.desired && st.CurrentNumberScheduled == n.current &&
		st.NumberMisscheduled == n.misscheduled && st.NumberReady == n.ready &&
		st.UpdatedNumberScheduled == n.updated && st.NumberAvailable == n.available &&
		st.NumberUnavailable == n.unavailable && st.ObservedGeneration >= ds.Generation {
		return nil, nil
	}
	client := c.client.AppsV1().DaemonSets(ds.Namespace)
	toUpdate := ds.DeepCopy()
	for i := 0; ; i++ {
		if observeGeneration {
			toUpdate.Status.ObservedGeneration = ds.Generation
		}
		toUpdate.Status.DesiredNumberScheduled = n.desired
		toUpdate.Status.CurrentNumberScheduled = n.current
		toUpdate.Status.NumberMisscheduled = n.misscheduled
		toUpdate.Status.NumberReady = n.ready
		toUpdate.Status.UpdatedNumberScheduled = n.updated
		toUpdate.Status.NumberAvailable = n.available
		toUpdate.Status.NumberUnavailable = n.unavailable
		result, err := client.UpdateStatus(ctx, toUpdate, metav1.UpdateOptions{})
		if err == nil {
			return result, nil
		}
		if i >= statusUpdateRetries {
			return nil, err
		}
		if toUpdate, err = client.Get(ctx, ds.Name, metav1.GetOptions{}); err != nil {
			return nil, err
		}
	}
}
