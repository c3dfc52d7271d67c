package shardcache

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// ResourceType tells the cache how to list and watch one namespaced resource type. It is
// the key of the Cache's informer registry: controllers ask for the types they need
// (Cache.InformerFor, or the typed accessors such as Cache.Pods) and each type gets one
// cluster-wide informer per shard however many controllers share it.
//
// The package provides descriptors for the types kshard's controllers use (Pods,
// ReplicaSets, …). Others are declared the same way; List and Watch receive the Cache's
// clientset, and a descriptor for a dynamic or metadata-only client simply closes over
// its own client instead.
type ResourceType struct {
	// Resource names the type in the registry, in logs and in metrics.
	Resource schema.GroupVersionResource
	// Object is an empty object of the type the informer stores (e.g. &corev1.Pod{}).
	// The reflector drops events of any other type; synthetic bookmarks are copies of it.
	Object runtime.Object
	// List lists the type in namespace, or in all namespaces when namespace is "".
	List func(ctx context.Context, client kubernetes.Interface, namespace string, opts metav1.ListOptions) (runtime.Object, error)
	// Watch watches the type in namespace, or in all namespaces when namespace is "".
	Watch func(ctx context.Context, client kubernetes.Interface, namespace string, opts metav1.ListOptions) (watch.Interface, error)
}

// Name is the resource's name as used in logs and in the resource label of metrics:
// "pods" for the core group, "deployments.apps" otherwise.
func (rt ResourceType) Name() string {
	return rt.Resource.GroupResource().String()
}

func (rt ResourceType) validate() error {
	if rt.Resource.Resource == "" || rt.Object == nil || rt.List == nil || rt.Watch == nil {
		return fmt.Errorf("sharding cache: incomplete ResourceType %q: Resource, Object, List and Watch are required", rt.Name())
	}
	return nil
}

// listWatcher is what every typed client of client-go offers, e.g. client.CoreV1().Pods(ns).
type listWatcher[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// typedResource builds a ResourceType from a typed client getter.
func typedResource[L runtime.Object](gvr schema.GroupVersionResource, object runtime.Object, client func(kubernetes.Interface, string) listWatcher[L]) ResourceType {
	return ResourceType{
		Resource: gvr,
		Object:   object,
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

// Descriptors of the built-in types kshard's controllers cache.
var (
	// Pods are core/v1 pods.
	Pods = typedResource(corev1.SchemeGroupVersion.WithResource("pods"), &corev1.Pod{},
		func(c kubernetes.Interface, ns string) listWatcher[*corev1.PodList] { return c.CoreV1().Pods(ns) })
	// ConfigMaps are core/v1 config maps.
	ConfigMaps = typedResource(corev1.SchemeGroupVersion.WithResource("configmaps"), &corev1.ConfigMap{},
		func(c kubernetes.Interface, ns string) listWatcher[*corev1.ConfigMapList] {
			return c.CoreV1().ConfigMaps(ns)
		})
	// Secrets are core/v1 secrets.
	Secrets = typedResource(corev1.SchemeGroupVersion.WithResource("secrets"), &corev1.Secret{},
		func(c kubernetes.Interface, ns string) listWatcher[*corev1.SecretList] { return c.CoreV1().Secrets(ns) })
	// ServiceAccounts are core/v1 service accounts.
	ServiceAccounts = typedResource(corev1.SchemeGroupVersion.WithResource("serviceaccounts"), &corev1.ServiceAccount{},
		func(c kubernetes.Interface, ns string) listWatcher[*corev1.ServiceAccountList] {
			return c.CoreV1().ServiceAccounts(ns)
		})
	// ReplicaSets are apps/v1 replica sets.
	ReplicaSets = typedResource(appsv1.SchemeGroupVersion.WithResource("replicasets"), &appsv1.ReplicaSet{},
		func(c kubernetes.Interface, ns string) listWatcher[*appsv1.ReplicaSetList] {
			return c.AppsV1().ReplicaSets(ns)
		})
	// Deployments are apps/v1 deployments.
	Deployments = typedResource(appsv1.SchemeGroupVersion.WithResource("deployments"), &appsv1.Deployment{},
		func(c kubernetes.Interface, ns string) listWatcher[*appsv1.DeploymentList] {
			return c.AppsV1().Deployments(ns)
		})
	// ControllerRevisions are apps/v1 controller revisions (deployment history tools use them).
	ControllerRevisions = typedResource(appsv1.SchemeGroupVersion.WithResource("controllerrevisions"), &appsv1.ControllerRevision{},
		func(c kubernetes.Interface, ns string) listWatcher[*appsv1.ControllerRevisionList] {
			return c.AppsV1().ControllerRevisions(ns)
		})
	// Jobs are batch/v1 jobs.
	Jobs = typedResource(batchv1.SchemeGroupVersion.WithResource("jobs"), &batchv1.Job{},
		func(c kubernetes.Interface, ns string) listWatcher[*batchv1.JobList] { return c.BatchV1().Jobs(ns) })
	// CronJobs are batch/v1 cron jobs.
	CronJobs = typedResource(batchv1.SchemeGroupVersion.WithResource("cronjobs"), &batchv1.CronJob{},
		func(c kubernetes.Interface, ns string) listWatcher[*batchv1.CronJobList] {
			return c.BatchV1().CronJobs(ns)
		})
)

// namespaces describes the Namespace type for the unfiltered namespace informer.
var namespaces = typedResource(corev1.SchemeGroupVersion.WithResource("namespaces"), &corev1.Namespace{},
	func(c kubernetes.Interface, _ string) listWatcher[*corev1.NamespaceList] {
		return c.CoreV1().Namespaces()
	})
