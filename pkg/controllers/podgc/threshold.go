package podgc

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
)

var everything = labels.Everything()

// count counts the cluster's terminated pods (the whole-cluster informer every shard
// has) against the threshold, remembers those above it (the oldest, evicted pods first,
// as upstream orders them) and returns their keys. Every shard computes the same set
// from the same view; each deletes those of its own namespaces (the queue drops the
// others' keys), so the threshold holds for the cluster, not per shard.
func (c *Controller) count(log klog.Logger) []string {
	terminated, err := c.terminated.List(everything)
	if err != nil {
		log.Error(err, "Listing terminated pods")
		return nil
	}
	// The informer's selector is the API server's; a cache filled some other way (unit
	// tests) is checked again.
	kept := terminated[:0:0]
	for _, p := range terminated {
		if isTerminated(p) {
			kept = append(kept, p)
		}
	}
	n := len(kept) - c.opts.Threshold
	excess := map[string]string{}
	var keys []string
	if n > 0 {
		sort.Slice(kept, func(i, j int) bool { return before(kept[i], kept[j]) })
		for _, p := range kept[:n] {
			k := p.Namespace + "/" + p.Name
			excess[k] = string(p.UID)
			keys = append(keys, k)
		}
		log.V(2).Info("Terminated pods above the threshold", "terminated", len(kept), "threshold", c.opts.Threshold, "excess", n)
	}
	c.mu.Lock()
	c.excess = excess
	c.mu.Unlock()
	return keys
}

// isTerminated is upstream's test: any phase but Pending, Running and Unknown.
func isTerminated(p *corev1.Pod) bool {
	switch p.Status.Phase {
	case corev1.PodPending, corev1.PodRunning, corev1.PodUnknown:
		return false
	}
	return true
}

// evicted reports whether p was evicted by the kubelet (Failed with reason Evicted).
func evicted(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Evicted"
}

// before orders terminated pods as upstream deletes them: evicted pods first, then by
// creation time, then by name.
func before(a, b *corev1.Pod) bool {
	if ea, eb := evicted(a), evicted(b); ea != eb {
		return ea
	}
	if a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.Name < b.Name
	}
	return a.CreationTimestamp.Before(&b.CreationTimestamp)
}

// inExcess reports whether p was above the threshold at the last count.
func (c *Controller) inExcess(p *corev1.Pod) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	uid, ok := c.excess[p.Namespace+"/"+p.Name]
	return ok && uid == string(p.UID)
}

// forgetExcess drops key from the excess once it is dealt with.
func (c *Controller) forgetExcess(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.excess, key)
}
