package resourcequota

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	quota "k8s.io/apiserver/pkg/quota/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
)

// legacyCountNames are the names object counts had before count/<resource>: a quota may
// name these resources either way.
var legacyCountNames = map[schema.GroupResource]corev1.ResourceName{
	{Resource: "configmaps"}:             corev1.ResourceConfigMaps,
	{Resource: "resourcequotas"}:         corev1.ResourceQuotas,
	{Resource: "replicationcontrollers"}: corev1.ResourceReplicationControllers,
	{Resource: "secrets"}:                corev1.ResourceSecrets,
}

// servedResource is a served resource the shard handed over: its informer (typed or
// metadata-only: only its objects' keys are read), the replenishment handler on it, and
// the object-count evaluator the controller added for it (nil for the resources whose
// evaluators are always there).
type servedResource struct {
	resource  controllers.ServedResource
	informer  toolscache.SharedIndexInformer
	handler   toolscache.ResourceEventHandlerRegistration
	evaluator quota.Evaluator
}

// listServed lists a namespace's objects of a served resource. It fails while the
// resource was not handed over or its informer has not synced: a count from a partial
// cache would release quota that is in use, so the quota keeps its old usage and is
// retried (upstream's protected lister).
func (c *Controller) listServed(gr schema.GroupResource) func(namespace string) ([]runtime.Object, error) {
	return func(namespace string) ([]runtime.Object, error) {
		c.mu.Lock()
		s := c.served[gr]
		c.mu.Unlock()
		if s == nil {
			return nil, fmt.Errorf("%s is not served yet", gr)
		}
		if !s.informer.HasSynced() {
			return nil, fmt.Errorf("%s not yet synced", gr)
		}
		if c.servedInformers != nil && c.servedInformers.Failing(s.resource) {
			// Its store may miss objects of any namespace: the old usage stays.
			return nil, fmt.Errorf("%s cannot be listed now: its count would be short", gr)
		}
		return listIndexer(s.informer.GetIndexer())(namespace)
	}
}
