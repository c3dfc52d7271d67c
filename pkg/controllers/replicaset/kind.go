package replicaset

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
)

// Kind is the API kind a Controller serves. The controller's logic works on
// *appsv1.ReplicaSet; a kind whose objects are of another type (core/v1
// ReplicationControllers) presents them as ReplicaSets and writes them back in their own
// type, as kube-controller-manager's replication manager wraps its ReplicaSet controller
// with a conversion layer. One logic, so the two kinds cannot drift apart.
type Kind struct {
	// Name is kube-controller-manager's --controllers name of the controller serving the
	// kind; its workers' logs and reconcile metrics carry it.
	Name string
	// GVK is the kind written into the controllerRef of the pods the controller creates
	// and adopts, and the kind of the controllerRefs it follows.
	GVK schema.GroupVersionKind
	// Resource is the informer of the kind's objects (the Descriptor's Primary).
	Resource controllers.Resource
	// View presents an object of Resource's informer as a ReplicaSet, and reports false
	// for anything else. The result may be the cached object itself: never modify it.
	View func(obj any) (*appsv1.ReplicaSet, bool)
	// Lister serves the objects of Resource's indexer as ReplicaSets, with the kind's own
	// selector semantics in GetPodReplicaSets.
	Lister func(indexer toolscache.Indexer) appslisters.ReplicaSetLister
	// Object returns the API object a ReplicaSet view stands for: events are recorded on
	// it, so that they name the kind the user created.
	Object func(rs *appsv1.ReplicaSet) runtime.Object
	// Client reads and writes the kind's objects of namespace as ReplicaSets.
	Client func(client kubernetes.Interface, namespace string) Client
	// TerminatingReplicas says whether the kind's status has terminatingReplicas
	// (ReplicaSets have it; ReplicationControllers do not, and upstream leaves it out).
	TerminatingReplicas bool
}

// Client is what the controller does with its primary objects through the API: read one
// fresh (before adopting pods) and write its status. appsclient.ReplicaSetInterface is
// one.
type Client interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*appsv1.ReplicaSet, error)
	UpdateStatus(ctx context.Context, rs *appsv1.ReplicaSet, opts metav1.UpdateOptions) (*appsv1.ReplicaSet, error)
}

// ReplicaSets is the Kind of apps/v1 ReplicaSets, served by the "replicaset" controller.
func ReplicaSets() Kind {
	return Kind{
		Name:     Name,
		GVK:      appsv1.SchemeGroupVersion.WithKind("ReplicaSet"),
		Resource: replicaSets,
		View: func(obj any) (*appsv1.ReplicaSet, bool) {
			rs, ok := obj.(*appsv1.ReplicaSet)
			return rs, ok
		},
		Lister: func(indexer toolscache.Indexer) appslisters.ReplicaSetLister {
			return appslisters.NewReplicaSetLister(indexer)
		},
		Object: func(rs *appsv1.ReplicaSet) runtime.Object { return rs },
		Client: func(client kubernetes.Interface, namespace string) Client {
			return client.AppsV1().ReplicaSets(namespace)
		},
		TerminatingReplicas: true,
	}
}

// viewTombstone is View for the object of a delete event, which may come inside a
// tombstone.
func (k Kind) viewTombstone(obj any) (*appsv1.ReplicaSet, bool) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	rs, ok := k.View(obj)
	if !ok {
		utilruntime.HandleError(fmt.Errorf("%s: delete handler: unexpected object %T", k.Name, obj))
	}
	return rs, ok
}
