package replicationcontroller

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/replicaset"
)

// Name is kube-controller-manager's name for the controller.
const Name = "replicationcontroller"

// EventSource is the component of the controller's events, as kube-controller-manager's
// replication manager records them.
const EventSource = "replication-controller"

// The informers the controller reads: its primary ReplicationControllers and their pods.
var (
	replicationControllers = controllers.Typed(corev1.SchemeGroupVersion.WithResource("replicationcontrollers"))
	pods                   = controllers.Typed(corev1.SchemeGroupVersion.WithResource("pods"))
)

// Descriptor registers the controller: on by default, with kube-controller-manager's
// --concurrent-rc-syncs flag and default of 5 workers.
func Descriptor() controllers.Descriptor {
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, WorkersFlag: "concurrent-rc-syncs", DefaultWorkers: 5,
		EventSource: EventSource,
		Primary:     []controllers.Resource{replicationControllers},
		Reads:       []controllers.Resource{pods},
		Permissions: []controllers.Permission{
			{Resource: "replicationcontrollers", Verbs: []string{"get"}},
			{Resource: "replicationcontrollers/status", Verbs: []string{"update"}},
			// Pods are created with blockOwnerDeletion, which the
			// OwnerReferencesPermissionEnforcement admission plugin allows only to
			// whoever may update the owner's finalizers.
			{Resource: "replicationcontrollers/finalizers", Verbs: []string{"update"}},
			{Resource: "pods", Verbs: []string{"create", "delete", "patch"}},
		},
		New: New,
	}
}

// New builds the ReplicaSet controller serving ReplicationControllers.
func New(c controllers.Context) (controllers.Controller, error) {
	return replicaset.NewForKind(c, Kind())
}

// Kind is the replicaset.Kind of core/v1 ReplicationControllers.
func Kind() replicaset.Kind {
	return replicaset.Kind{
		Name:     Name,
		GVK:      corev1.SchemeGroupVersion.WithKind("ReplicationController"),
		Resource: replicationControllers,
		View: func(obj any) (*appsv1.ReplicaSet, bool) {
			rc, ok := obj.(*corev1.ReplicationController)
			if !ok {
				return nil, false
			}
			return toReplicaSet(rc), true
		},
		Lister: func(indexer toolscache.Indexer) appslisters.ReplicaSetLister {
			return lister{rcs: corelistersFor(indexer)}
		},
		Object: func(rs *appsv1.ReplicaSet) runtime.Object { return toReplicationController(rs) },
		Client: func(client kubernetes.Interface, namespace string) replicaset.Client {
			return statusClient{rcs: client.CoreV1().ReplicationControllers(namespace)}
		},
		// The ReplicationController API has no status.terminatingReplicas.
		TerminatingReplicas: false,
	}
}

// statusClient reads and writes ReplicationControllers as ReplicaSets.
type statusClient struct {
	rcs typedcorev1.ReplicationControllerInterface
}

func (c statusClient) Get(ctx context.Context, name string, opts metav1.GetOptions) (*appsv1.ReplicaSet, error) {
	rc, err := c.rcs.Get(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	return toReplicaSet(rc), nil
}

func (c statusClient) UpdateStatus(ctx context.Context, rs *appsv1.ReplicaSet, opts metav1.UpdateOptions) (*appsv1.ReplicaSet, error) {
	rc, err := c.rcs.UpdateStatus(ctx, toReplicationController(rs), opts)
	if err != nil {
		return nil, err
	}
	return toReplicaSet(rc), nil
}
