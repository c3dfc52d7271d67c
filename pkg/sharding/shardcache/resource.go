package shardcache

// The resource types the Cache knows how to list and watch. A Key names one informer; a
// ResourceType describes how to reach its objects. The built-in table is fixed at
// compile time; metadata-only types are described on demand (cache.go).

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// Key names one informer of the Cache: a resource, as typed objects (the built-in types
// of Builtin) or, with Metadata, as *metav1.PartialObjectMetadata for any resource the API
// server serves. Every caller asking for the same Key shares one informer.
type Key struct {
	Resource schema.GroupVersionResource
	Metadata bool
	// FieldSelector, when set, names a separate informer of the resource that is cached
	// whole (every namespace, not only the shard's partitions) and holds only the objects
	// the selector selects: it lists and watches with it, and indexes every object under
	// the cluster partition, as a cluster-scoped type. It is for work of the cluster
	// partition that must see the whole cluster (the pod garbage collector's threshold
	// on terminated pods), at the cost of caching every selected object on every shard.
	FieldSelector string
}

// String is the resource's name as used in logs and in the resource label of metrics
// ("pods", "deployments.apps"), with " (metadata)" for metadata-only informers and
// " (fieldSelector=…)" for field-selected ones.
func (k Key) String() string {
	s := k.Resource.GroupResource().String()
	if k.Metadata {
		s += " (metadata)"
	}
	if k.FieldSelector != "" {
		s += " (fieldSelector=" + k.FieldSelector + ")"
	}
	return s
}

// ResourceType tells the cache how to list and watch one resource type. Builtin holds
// the descriptors of the built-in types; metadata-only descriptors are made on demand
// (Cache.Informer). A type not listed there can still be declared by hand and passed to
// InformerFor: List and Watch receive the Cache's clientset, and a descriptor for a
// dynamic client simply closes over its own client instead.
type ResourceType struct {
	// Resource names the type in the registry, in logs and in metrics.
	Resource schema.GroupVersionResource
	// Metadata marks a metadata-only type (Object is a PartialObjectMetadata).
	Metadata bool
	// ClusterScoped types are not filtered by partition: every shard caches all of their
	// objects (Nodes, PersistentVolumes, …), which controllers read to reconcile their own
	// namespaced objects. The work on them belongs to the cluster partition (see
	// partition.ClusterKey).
	ClusterScoped bool
	// FieldSelector, when set, makes the informer a whole one (every namespace, indexed
	// under the cluster partition) that lists and watches with this field selector
	// (Key.FieldSelector).
	FieldSelector string
	// Optional marks a resource the shard serves because discovery found it (for the
	// controllers that act on every served resource): while its lists fail, nothing
	// waits for its informer (optional.go).
	Optional bool
	// Object is an empty object of the type the informer stores (e.g. &corev1.Pod{}).
	// The reflector drops events of any other type; synthetic bookmarks are copies of it.
	Object runtime.Object
	// List lists the type in namespace, or in all namespaces when namespace is "".
	List func(ctx context.Context, client kubernetes.Interface, namespace string, opts metav1.ListOptions) (runtime.Object, error)
	// Watch watches the type in namespace, or in all namespaces when namespace is "".
	Watch func(ctx context.Context, client kubernetes.Interface, namespace string, opts metav1.ListOptions) (watch.Interface, error)
}

// Key returns the registry key of rt.
func (rt ResourceType) Key() Key {
	return Key{Resource: rt.Resource, Metadata: rt.Metadata, FieldSelector: rt.FieldSelector}
}

// whole reports whether rt's informer is cached whole: a cluster-scoped type, or a
// field-selected one.
func (rt ResourceType) whole() bool { return rt.ClusterScoped || rt.FieldSelector != "" }

// Name is the resource's name as used in logs and in the resource label of metrics:
// "pods" for the core group, "deployments.apps" otherwise.
func (rt ResourceType) Name() string { return rt.Key().String() }

func (rt ResourceType) validate() error {
	if rt.Resource.Resource == "" || rt.Object == nil || rt.List == nil || rt.Watch == nil {
		return fmt.Errorf("shardcache: incomplete ResourceType %q: Resource, Object, List and Watch are required", rt.Name())
	}
	return nil
}

// listWatcher is what every typed client of client-go offers, e.g. client.CoreV1().Pods(ns).
type listWatcher[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// typed builds a ResourceType from a typed client getter; ns is "" for cluster-scoped types.
func typed[L runtime.Object](gvr schema.GroupVersionResource, object runtime.Object, clusterScoped bool, client func(kubernetes.Interface, string) listWatcher[L]) ResourceType {
	return ResourceType{
		Resource:      gvr,
		ClusterScoped: clusterScoped,
		Object:        object,
		List: func(ctx context.Context, c kubernetes.Interface, ns string, opts metav1.ListOptions) (runtime.Object, error) {
			list, err := client(c, ns).List(ctx, opts)
			if err != nil {
				// Do not return a typed nil inside a non-nil interface.
				return nil, err
			}
			return list, nil
		},
		Watch: func(ctx context.Context, c kubernetes.Interface, ns string, opts metav1.ListOptions) (watch.Interface, error) {
			return client(c, ns).Watch(ctx, opts)
		},
	}
}

func namespaced[L runtime.Object](gvr schema.GroupVersionResource, object runtime.Object, client func(kubernetes.Interface, string) listWatcher[L]) ResourceType {
	return typed(gvr, object, false, client)
}

func clusterScoped[L runtime.Object](gvr schema.GroupVersionResource, object runtime.Object, client func(kubernetes.Interface) listWatcher[L]) ResourceType {
	return typed(gvr, object, true, func(c kubernetes.Interface, _ string) listWatcher[L] { return client(c) })
}

var (
	core      = corev1.SchemeGroupVersion
	apps      = appsv1.SchemeGroupVersion
	batch     = batchv1.SchemeGroupVersion
	policy    = policyv1.SchemeGroupVersion
	discovery = discoveryv1.SchemeGroupVersion
	autoscale = autoscalingv2.SchemeGroupVersion
	dra       = resourcev1.SchemeGroupVersion
)

// builtin lists the built-in types the controllers of kube-controller-manager read,
// typed. Every controller asks for them by GroupVersionResource through Cache.Informer,
// so a controller that reads one of these needs no new code here; a resource not listed
// is read metadata-only (Key.Metadata) or added as one line.
var builtin = indexTypes(
	namespaced(core.WithResource("pods"), &corev1.Pod{},
		func(c kubernetes.Interface, ns string) listWatcher[*corev1.PodList] { return c.CoreV1().Pods(ns) }),
	namespaced(core.WithResource("services"), &corev1.Service{},
		func(c kubernetes.Interface, ns string) listWatcher[*corev1.ServiceList] {
			return c.CoreV1().Services(ns)
		}),
	//lint:ignore SA1019 kube-controller-manager's endpoints controller still serves Endpoints
	namespaced(core.WithResource("endpoints"), &corev1.Endpoints{},
		func(c kubernetes.Interface, ns string) listWatcher[*corev1.EndpointsList] {
			return c.CoreV1().Endpoints(ns)
		}), //nolint:staticcheck
	namespaced(core.WithResource("configmaps"), &corev1.ConfigMap{},
		func(c kubernetes.Interface, ns string) listWatcher[*corev1.ConfigMapList] {
			return c.CoreV1().ConfigMaps(ns)
		}),
	namespaced(core.WithResource("secrets"), &corev1.Secret{},
		func(c kubernetes.Interface, ns string) listWatcher[*corev1.SecretList] { return c.CoreV1().Secrets(ns) }),
	namespaced(core.WithResource("serviceaccounts"), &corev1.ServiceAccount{},
		func(c kubernetes.Interface, ns string) listWatcher[*corev1.ServiceAccountList] {
			return c.CoreV1().ServiceAccounts(ns)
		}),
	namespaced(core.WithResource("replicationcontrollers"), &corev1.ReplicationController{},
		func(c kubernetes.Interface, ns string) listWatcher[*corev1.ReplicationControllerList] {
			return c.CoreV1().ReplicationControllers(ns)
		}),
	namespaced(core.WithResource("resourcequotas"), &corev1.ResourceQuota{},
		func(c kubernetes.Interface, ns string) listWatcher[*corev1.ResourceQuotaList] {
			return c.CoreV1().ResourceQuotas(ns)
		}),
	namespaced(core.WithResource("limitranges"), &corev1.LimitRange{},
		func(c kubernetes.Interface, ns string) listWatcher[*corev1.LimitRangeList] {
			return c.CoreV1().LimitRanges(ns)
		}),
	namespaced(core.WithResource("persistentvolumeclaims"), &corev1.PersistentVolumeClaim{},
		func(c kubernetes.Interface, ns string) listWatcher[*corev1.PersistentVolumeClaimList] {
			return c.CoreV1().PersistentVolumeClaims(ns)
		}),
	namespaced(core.WithResource("podtemplates"), &corev1.PodTemplate{},
		func(c kubernetes.Interface, ns string) listWatcher[*corev1.PodTemplateList] {
			return c.CoreV1().PodTemplates(ns)
		}),
	namespaced(apps.WithResource("replicasets"), &appsv1.ReplicaSet{},
		func(c kubernetes.Interface, ns string) listWatcher[*appsv1.ReplicaSetList] {
			return c.AppsV1().ReplicaSets(ns)
		}),
	namespaced(apps.WithResource("deployments"), &appsv1.Deployment{},
		func(c kubernetes.Interface, ns string) listWatcher[*appsv1.DeploymentList] {
			return c.AppsV1().Deployments(ns)
		}),
	namespaced(apps.WithResource("statefulsets"), &appsv1.StatefulSet{},
		func(c kubernetes.Interface, ns string) listWatcher[*appsv1.StatefulSetList] {
			return c.AppsV1().StatefulSets(ns)
		}),
	namespaced(apps.WithResource("daemonsets"), &appsv1.DaemonSet{},
		func(c kubernetes.Interface, ns string) listWatcher[*appsv1.DaemonSetList] {
			return c.AppsV1().DaemonSets(ns)
		}),
	namespaced(apps.WithResource("controllerrevisions"), &appsv1.ControllerRevision{},
		func(c kubernetes.Interface, ns string) listWatcher[*appsv1.ControllerRevisionList] {
			return c.AppsV1().ControllerRevisions(ns)
		}),
	namespaced(batch.WithResource("jobs"), &batchv1.Job{},
		func(c kubernetes.Interface, ns string) listWatcher[*batchv1.JobList] { return c.BatchV1().Jobs(ns) }),
	namespaced(batch.WithResource("cronjobs"), &batchv1.CronJob{},
		func(c kubernetes.Interface, ns string) listWatcher[*batchv1.CronJobList] {
			return c.BatchV1().CronJobs(ns)
		}),
	namespaced(policy.WithResource("poddisruptionbudgets"), &policyv1.PodDisruptionBudget{},
		func(c kubernetes.Interface, ns string) listWatcher[*policyv1.PodDisruptionBudgetList] {
			return c.PolicyV1().PodDisruptionBudgets(ns)
		}),
	namespaced(discovery.WithResource("endpointslices"), &discoveryv1.EndpointSlice{},
		func(c kubernetes.Interface, ns string) listWatcher[*discoveryv1.EndpointSliceList] {
			return c.DiscoveryV1().EndpointSlices(ns)
		}),
	namespaced(autoscale.WithResource("horizontalpodautoscalers"), &autoscalingv2.HorizontalPodAutoscaler{},
		func(c kubernetes.Interface, ns string) listWatcher[*autoscalingv2.HorizontalPodAutoscalerList] {
			return c.AutoscalingV2().HorizontalPodAutoscalers(ns)
		}),
	namespaced(dra.WithResource("resourceclaims"), &resourcev1.ResourceClaim{},
		func(c kubernetes.Interface, ns string) listWatcher[*resourcev1.ResourceClaimList] {
			return c.ResourceV1().ResourceClaims(ns)
		}),
	clusterScoped(dra.WithResource("deviceclasses"), &resourcev1.DeviceClass{},
		func(c kubernetes.Interface) listWatcher[*resourcev1.DeviceClassList] {
			return c.ResourceV1().DeviceClasses()
		}),
	clusterScoped(core.WithResource("nodes"), &corev1.Node{},
		func(c kubernetes.Interface) listWatcher[*corev1.NodeList] { return c.CoreV1().Nodes() }),
	clusterScoped(core.WithResource("persistentvolumes"), &corev1.PersistentVolume{},
		func(c kubernetes.Interface) listWatcher[*corev1.PersistentVolumeList] {
			return c.CoreV1().PersistentVolumes()
		}),
	namespacesType,
)

// namespacesType describes the Namespace type of the unfiltered namespace informer.
var namespacesType = clusterScoped(core.WithResource("namespaces"), &corev1.Namespace{},
	func(c kubernetes.Interface) listWatcher[*corev1.NamespaceList] { return c.CoreV1().Namespaces() })

// NamespacesResource is the Namespace type's resource. Namespace objects are cluster-scoped
// but belong to the partition of the namespace they describe, not to the cluster partition.
var NamespacesResource = namespacesType.Resource

func indexTypes(ts ...ResourceType) map[schema.GroupVersionResource]ResourceType {
	m := make(map[schema.GroupVersionResource]ResourceType, len(ts))
	for _, t := range ts {
		if _, dup := m[t.Resource]; dup {
			panic("shardcache: built-in type listed twice: " + t.Name())
		}
		m[t.Resource] = t
	}
	return m
}

// Builtin returns the typed descriptor of a built-in resource, if the cache knows it.
func Builtin(gvr schema.GroupVersionResource) (ResourceType, bool) {
	rt, ok := builtin[gvr]
	return rt, ok
}

// Descriptors of built-in types this package's tests use directly (controllers ask
// through Cache.Informer).
var (
	Pods       = builtin[core.WithResource("pods")]
	ConfigMaps = builtin[core.WithResource("configmaps")]
	Secrets    = builtin[core.WithResource("secrets")]
)
