package endpointslice

import (
	"context"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
)

// triggerTopology asks for a topology check; triggers made while one is pending coalesce
// into it (upstream's topology queue holds one constant key for the same effect).
func (c *Controller) triggerTopology() {
	select {
	case c.topologyTrigger <- struct{}{}:
	default:
	}
}

// runTopology runs the topology checks asked for until ctx ends, one at a time. It runs
// on every shard, ungated: it writes nothing and only queues Service keys, which the
// shard's gated queue keeps for its own namespaces only.
func (c *Controller) runTopology(ctx context.Context) {
	log := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.topologyTrigger:
			c.checkNodeTopologyDistribution(log)
		}
	}
}

// checkNodeTopologyDistribution gives the topology cache every Node, then queues the
// Services whose endpoints are now too unevenly spread over the zones for their hints.
func (c *Controller) checkNodeTopologyDistribution(log klog.Logger) {
	nodeList, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		log.Error(err, "listing Nodes")
		return
	}
	c.topology.SetNodes(log, nodeList)
	for _, key := range c.topology.GetOverloadedServices() {
		log.V(2).Info("queuing Service after Node change due to overloading", "key", key)
		c.queue.Add(key)
	}
}
