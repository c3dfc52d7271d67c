package endpointslicemirroring

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/kshard/kshard/pkg/controllers"
)

// managedBySelector selects the slices this controller mirrored.
var managedBySelector = labels.Set{discoveryv1.LabelManagedBy: ControllerName}.AsSelectorPreValidated()

// Resync queues, when the shard starts working namespaces, the key of every mirrored slice
// of them, besides the Endpoints keys the shard queues itself: a slice whose Endpoints is
// gone (deleted while the namespace was elsewhere, or before a restart) has no Endpoints to
// queue it, and its sync deletes it. Upstream finds such slices through the slice informer's
// add events at start (its tracker is empty, so every mirrored slice queues its
// Endpoints); here those events came while the shard warmed the namespace's caches, before
// it admitted its keys, and were dropped.
func (c *Controller) Resync(scope controllers.Scope) {
	for _, ns := range scope.Namespaces {
		slices, err := c.slices.EndpointSlices(ns).List(managedBySelector)
		if err != nil {
			utilruntime.HandleError(err)
			continue
		}
		for _, s := range slices {
			if key, err := endpointsKeyOf(s); err == nil {
				c.queue.Add(key)
			}
		}
	}
}
