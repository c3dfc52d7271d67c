package horizontalpodautoscaling

import (
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers/internal/tombstone"
)

// addHPA registers a new HPA with a selector of nothing (its sync sets the real one), so
// that ambiguity is found among every HPA the shard knows, and queues it at once.
func (c *Controller) addHPA(log klog.Logger, obj any) {
	hpa, ok := tombstone.Unwrap[*autoscalingv2.HorizontalPodAutoscaler](obj)
	if !ok {
		log.Error(nil, "Couldn't get a HorizontalPodAutoscaler from the object", "obj", obj)
		return
	}
	if c.selectors.putIfAbsent(hpa.Namespace, hpa.Name, labels.Nothing()) {
		c.monitor.numHPAs.Inc()
	}
	log.V(4).Info("HorizontalPodAutoscaler added", "namespace", hpa.Namespace, "name", hpa.Name)
	c.queue.Add(hpa.Namespace + "/" + hpa.Name)
}

// updateHPA queues an HPA whose spec changed (its generation moved) at once, and one
// whose status or metadata changed (the controller's own status writes) only after the
// sync period, so that a status write does not make a hot loop (kubernetes#42715).
func (c *Controller) updateHPA(log klog.Logger, old, cur any) {
	curHPA, ok := tombstone.Unwrap[*autoscalingv2.HorizontalPodAutoscaler](cur)
	if !ok {
		log.Error(nil, "Couldn't get a HorizontalPodAutoscaler from the object", "obj", cur)
		return
	}
	if oldHPA, ok := old.(*autoscalingv2.HorizontalPodAutoscaler); ok && oldHPA.Generation != curHPA.Generation {
		c.addHPA(log, curHPA)
		return
	}
	c.queue.AddRateLimited(curHPA.Namespace + "/" + curHPA.Name)
}

// deleteHPA forgets a deleted HPA: its selector, its read-your-writes record and, unless
// the HPA is back in the cache, its history. The shard's cache also deletes every HPA of
// a namespace that leaves the shard, so a moved HPA's history is dropped here too (the
// queue will not run its key again to find it gone).
func (c *Controller) deleteHPA(log klog.Logger, obj any) {
	hpa, ok := tombstone.Unwrap[*autoscalingv2.HorizontalPodAutoscaler](obj)
	if !ok {
		log.Error(nil, "Couldn't get a HorizontalPodAutoscaler from the object", "obj", obj)
		return
	}
	key := hpa.Namespace + "/" + hpa.Name
	c.consistency.Clear(key, hpa.UID)
	c.queue.Forget(key)
	if c.selectors.delete(hpa.Namespace, hpa.Name) {
		c.monitor.numHPAs.Dec()
	}
	if _, err := c.hpaLister.HorizontalPodAutoscalers(hpa.Namespace).Get(hpa.Name); err != nil {
		c.histories.drop(key)
		c.monitor.desired.DeleteLabelValues(hpa.Namespace, hpa.Name)
	}
	log.V(4).Info("HorizontalPodAutoscaler deleted", "namespace", hpa.Namespace, "name", hpa.Name)
}
