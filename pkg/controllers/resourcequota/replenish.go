package resourcequota

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
)

// typedResources are the resources whose evaluators read typed informers of the
// controller's own (Reads): their served informers are not read.
var typedResources = []schema.GroupResource{pods.GroupResource(), svcs.GroupResource(), pvcs.GroupResource(), claims.GroupResource()}

// Added starts counting a resource the API server serves: an object-count evaluator over
// its informer (the legacy-named counts already have one, which now finds the informer),
// and replenishment on its deletes. Quotas of the shard that name one of its counts and
// have no usage for it yet are queued on the priority queue, as a quota added with such a
// count is.
func (c *Controller) Added(r controllers.ServedResource, informer toolscache.SharedIndexInformer) {
	gr := r.GroupResource()
	log := c.log.WithValues("resource", gr.String())
	if !r.Namespaced || slices.Contains(ignoredResources, gr) || slices.Contains(typedResources, gr) {
		return
	}
	c.Removed(r) // a resource handed over again (a new version) replaces the old one
	s := &servedResource{resource: r, informer: informer}
	if _, legacy := legacyCountNames[gr]; !legacy {
		s.evaluator = generic.NewObjectCountEvaluator(gr, c.listServed(gr), "")
	}
	handler, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		// Creates are charged by admission; updates never change a count.
		DeleteFunc: func(obj any) { c.replenish(gr, obj) },
	})
	if err != nil {
		log.Error(err, "cannot watch the deletes of a served resource: its quotas are released at the next full recalculation only")
	}
	s.handler = handler
	c.mu.Lock()
	c.served[gr] = s
	c.mu.Unlock()
	if s.evaluator != nil {
		c.registry.Add(s.evaluator)
	}
	log.V(2).Info("counting a served resource")
	c.queueMissingUsage(gr)
}

// Removed stops counting a resource no longer served: quotas that name it keep their last
// usage of it.
func (c *Controller) Removed(r controllers.ServedResource) {
	gr := r.GroupResource()
	c.mu.Lock()
	s := c.served[gr]
	delete(c.served, gr)
	c.mu.Unlock()
	if s == nil {
		return
	}
	if s.handler != nil {
		_ = s.informer.RemoveEventHandler(s.handler)
	}
	if s.evaluator != nil {
		c.registry.Remove(s.evaluator)
	}
	c.log.V(2).Info("no longer counting a resource that is not served", "resource", gr.String())
}

// queueMissingUsage queues on the priority queue the quotas whose status lacks usage of a
// resource the evaluator of gr now computes.
func (c *Controller) queueMissingUsage(gr schema.GroupResource) {
	e := c.registry.Get(gr)
	if e == nil {
		return
	}
	rqs, err := c.quotaLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, rq := range rqs {
		for _, name := range e.MatchingResources(quota.ResourceNames(rq.Spec.Hard)) {
			if _, found := rq.Status.Used[name]; !found {
				c.priority.Add(rq.Namespace + "/" + rq.Name)
				break
			}
		}
	}
}

// replenishHandler replenishes the quotas of a typed resource's namespace on a delete,
// or an update that changes what quotas count (its replenishment filter). Creates are
// charged by admission.
func (c *Controller) replenishHandler(gr schema.GroupResource) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			if c.updateReplenishes(old, cur) {
				c.replenish(gr, cur)
			}
		},
		DeleteFunc: func(obj any) { c.replenish(gr, obj) },
	}
}

// updateReplenishes is upstream's update filter: the typed resources' own rules, and
// never for anything else.
func (c *Controller) updateReplenishes(old, cur any) bool {
	switch o := old.(type) {
	case *corev1.Pod:
		n, ok := cur.(*corev1.Pod)
		return ok && podUpdateReplenishes(o, n, c.clock)
	case *corev1.Service:
		n, ok := cur.(*corev1.Service)
		return ok && quotaServiceType(o) != quotaServiceType(n)
	case *corev1.PersistentVolumeClaim:
		n, ok := cur.(*corev1.PersistentVolumeClaim)
		return ok && pvcUpdateReplenishes(o, n)
	}
	return false
}

// replenish queues, on the replenishment queue, the quotas of obj's namespace whose
// status.hard names a resource the evaluator of gr computes: only those can have usage to
// release.
func (c *Controller) replenish(gr schema.GroupResource, obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil || m.GetNamespace() == "" {
		return
	}
	e := c.registry.Get(gr)
	if e == nil {
		return
	}
	rqs, err := c.quotaLister.ResourceQuotas(m.GetNamespace()).List(labels.Everything())
	if err != nil {
		c.log.Error(err, "cannot list the resource quotas of a namespace to replenish them", "namespace", m.GetNamespace())
		return
	}
	for _, rq := range rqs {
		if len(e.MatchingResources(quota.ResourceNames(rq.Status.Hard))) > 0 {
			c.log.V(4).Info("replenishing a resource quota", "namespace", rq.Namespace, "name", rq.Name, "resource", gr.String())
			c.replenishment.Add(rq.Namespace + "/" + rq.Name)
		}
	}
}
