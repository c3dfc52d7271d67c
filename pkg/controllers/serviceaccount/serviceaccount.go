package serviceaccount

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/tombstone"
)

// Name is kube-controller-manager's name for the controller.
const Name = "serviceaccount"

// DefaultName is the name of the ServiceAccount every active namespace gets, the one
// kube-controller-manager ensures.
const DefaultName = "default"

// The informers the controller reads: namespaces, whose names its queue holds, and the
// ServiceAccounts in them.
var (
	namespaces      = controllers.Typed(corev1.SchemeGroupVersion.WithResource("namespaces"))
	serviceAccounts = controllers.Typed(corev1.SchemeGroupVersion.WithResource("serviceaccounts"))
)

// Descriptor registers the controller: on by default and, as kube-controller-manager
// runs it, with one worker and no worker flag.
func Descriptor() controllers.Descriptor {
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, FixedWorkers: 1,
		Primary: []controllers.Resource{namespaces},
		Reads:   []controllers.Resource{serviceAccounts},
		Permissions: []controllers.Permission{
			{Resource: "serviceaccounts", Verbs: []string{"create"}},
		},
		New: New,
	}
}

// Controller is the ServiceAccount controller.
type Controller struct {
	client   kubernetes.Interface
	nsLister corelisters.NamespaceLister
	saLister corelisters.ServiceAccountLister
	queue    workqueue.TypedRateLimitingInterface[string]
	metrics  *controllers.ReconcileMetrics
	// ensure are the ServiceAccounts every active namespace gets (upstream's default
	// options: one named "default" with nothing else set).
	ensure []corev1.ServiceAccount
}

// New builds the controller on the shard's Namespace and ServiceAccount informers.
func New(c controllers.Context) (controllers.Controller, error) {
	return newController(c)
}

func newController(c controllers.Context) (*Controller, error) {
	infs, err := controllers.InformersFor(c.Informers, namespaces, serviceAccounts)
	if err != nil {
		return nil, err
	}
	nsInf, saInf := infs[0], infs[1]
	ctrl := &Controller{
		client:   c.Client,
		nsLister: corelisters.NewNamespaceLister(nsInf.GetIndexer()),
		saLister: corelisters.NewServiceAccountLister(saInf.GetIndexer()),
		queue:    c.Queue,
		metrics:  c.Metrics,
		ensure:   []corev1.ServiceAccount{{ObjectMeta: metav1.ObjectMeta{Name: DefaultName}}},
	}
	log := c.Logger
	if _, err := saInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) { ctrl.serviceAccountDeleted(log, obj) },
	}); err != nil {
		return nil, err
	}
	if _, err := nsInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ctrl.namespaceChanged(log, obj) },
		UpdateFunc: func(_, cur any) { ctrl.namespaceChanged(log, cur) },
	}); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// Run runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics)
}

// namespaceChanged queues a namespace that was added or updated (or resynced): it may
// lack its ServiceAccounts. Terminating ones are queued too; the sync skips them.
func (c *Controller) namespaceChanged(log klog.Logger, obj any) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return
	}
	log.V(5).Info("namespace changed", "namespace", ns.Name)
	c.queue.Add(ns.Name)
}

// serviceAccountDeleted queues the namespace of a deleted ServiceAccount, so that one the
// controller ensures is created again. Upstream queues the namespace whatever the
// ServiceAccount's name; so does this.
func (c *Controller) serviceAccountDeleted(log klog.Logger, obj any) {
	sa, ok := tombstone.Unwrap[*corev1.ServiceAccount](obj)
	if !ok {
		return
	}
	log.V(4).Info("service account deleted", "namespace", sa.Namespace, "name", sa.Name)
	c.queue.Add(sa.Namespace)
}
