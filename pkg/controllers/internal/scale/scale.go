package scale

import (
	"context"
	"slices"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
)

// MapperResetPeriod is how often the discovery behind the RESTMapper is forgotten, as
// kube-controller-manager resets its shared RESTMapper, so that kinds served later (a
// CRD created after the start) are found.
const MapperResetPeriod = 30 * time.Second

// Access reads and updates the scale subresource of any served resource. Unit tests
// fill its fields with fakes (client-go's scale/fake, a DefaultRESTMapper, a fake
// discovery); New builds the real one.
type Access struct {
	// Scales is the scale client.
	Scales scale.ScalesGetter
	// Mapper maps kinds to resources.
	Mapper apimeta.RESTMapper
	// Reset forgets Mapper's discovery (nil: nothing to forget).
	Reset func()
	// Discovery tells whether a resource has a scale subresource.
	Discovery discovery.DiscoveryInterface
}

// New builds an Access over client: the scale requests go through the controller's own
// (fenced, rate-limited) client; the scale client builds absolute paths and decodes the
// answer itself.
func New(client kubernetes.Interface) Access {
	disc := client.Discovery()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	scales := scale.New(disc.RESTClient(), mapper, dynamic.LegacyAPIPathResolverFunc,
		scale.NewDiscoveryScaleKindResolver(disc))
	return Access{Scales: scales, Mapper: mapper, Reset: mapper.Reset, Discovery: disc}
}

// RunReset forgets the mapper's discovery every MapperResetPeriod until ctx ends.
func (a Access) RunReset(ctx context.Context) {
	if a.Reset == nil {
		return
	}
	wait.Until(a.Reset, MapperResetPeriod, ctx.Done())
}

// Get reads the scale of name in namespace, of resource gr.
func (a Access) Get(ctx context.Context, namespace string, gr schema.GroupResource, name string) (*autoscalingv1.Scale, error) {
	return a.Scales.Scales(namespace).Get(ctx, gr, name, metav1.GetOptions{})
}

// Update writes s, the scale of an object of resource gr in namespace, and returns what
// the API server stored.
func (a Access) Update(ctx context.Context, namespace string, gr schema.GroupResource, s *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
	return a.Scales.Scales(namespace).Update(ctx, gr, s, metav1.UpdateOptions{})
}

// HasScaleSubresource asks discovery whether gvr serves a scale subresource of a Scale
// kind the scale client understands.
func (a Access) HasScaleSubresource(gvr schema.GroupVersionResource) (bool, error) {
	list, err := a.Discovery.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if err != nil {
		return false, err
	}
	versions := scale.NewScaleConverter().ScaleVersions()
	for _, r := range list.APIResources {
		if r.Name != gvr.Resource+"/scale" || r.Kind != "Scale" {
			continue
		}
		if slices.Contains(versions, schema.GroupVersion{Group: r.Group, Version: r.Version}) {
			return true, nil
		}
	}
	return false, nil
}
