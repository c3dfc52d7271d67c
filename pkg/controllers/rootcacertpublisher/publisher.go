package rootcacertpublisher

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/tombstone"
)

// Name is kube-controller-manager's name for the controller (the alias its --controllers
// accepts besides root-ca-certificate-publisher-controller).
const Name = "root-ca-cert-publisher"

// RootCAFileFlag is kube-controller-manager's flag naming the CA bundle to publish.
const RootCAFileFlag = "root-ca-file"

// The ConfigMap the controller publishes, as upstream names and describes it.
const (
	ConfigMapName         = "kube-root-ca.crt"
	DataKey               = "ca.crt"
	DescriptionAnnotation = "kubernetes.io/description"
	Description           = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. " +
		"No other usage is guaranteed across distributions of Kubernetes clusters."
)

// The informers the controller reads: namespaces, whose names its queue holds, and the
// ConfigMaps in them.
var (
	namespaces = controllers.Typed(corev1.SchemeGroupVersion.WithResource("namespaces"))
	configMaps = controllers.Typed(corev1.SchemeGroupVersion.WithResource("configmaps"))
)

// Options are the controller's own flags.
type Options struct {
	// RootCAFile is --root-ca-file: the PEM CA bundle to publish; empty means the CA the
	// shard's client trusts for the API server.
	RootCAFile string
}

// Descriptor registers the controller: on by default and, as kube-controller-manager
// runs it, with one worker and no worker flag; it adds --root-ca-file.
func Descriptor() controllers.Descriptor {
	opts := &Options{}
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, FixedWorkers: 1,
		Primary: []controllers.Resource{namespaces},
		Reads:   []controllers.Resource{configMaps},
		Permissions: []controllers.Permission{
			{Resource: "configmaps", Verbs: []string{"create", "update"}},
		},
		AddFlags: func(fs *pflag.FlagSet) {
			fs.StringVar(&opts.RootCAFile, RootCAFileFlag, opts.RootCAFile,
				"PEM CA bundle the "+Name+" controller publishes as the "+ConfigMapName+" ConfigMap in every namespace; "+
					"empty publishes the CA the shard trusts for the API server (its kubeconfig's, or the in-cluster ServiceAccount's ca.crt)")
		},
		New: func(c controllers.Context) (controllers.Controller, error) {
			ca, err := rootCA(opts.RootCAFile, c.APIServerCA)
			if err != nil {
				return nil, err
			}
			return newController(c, ca)
		},
	}
}

// rootCA returns the bundle to publish: file's content, or else apiServerCA. Either must
// hold at least one PEM certificate, so that a wrong path or file is a startup error
// rather than a ConfigMap every pod would fail to verify the API server with.
func rootCA(file string, apiServerCA []byte) ([]byte, error) {
	if file == "" {
		if len(apiServerCA) == 0 {
			return nil, fmt.Errorf("--%s is not set and the shard's client configuration has no CA bundle for the API server: set --%s to the CA bundle to publish", RootCAFileFlag, RootCAFileFlag)
		}
		if _, err := certutil.ParseCertsPEM(apiServerCA); err != nil {
			return nil, fmt.Errorf("--%s is not set and the CA bundle of the shard's client configuration is not usable: %w", RootCAFileFlag, err)
		}
		return apiServerCA, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", RootCAFileFlag, err)
	}
	if _, err := certutil.ParseCertsPEM(b); err != nil {
		return nil, fmt.Errorf("--%s=%s: %w", RootCAFileFlag, file, err)
	}
	return b, nil
}

// Controller is the root CA certificate publisher.
type Controller struct {
	client   kubernetes.Interface
	cmLister corelisters.ConfigMapLister
	queue    workqueue.TypedRateLimitingInterface[string]
	metrics  *controllers.ReconcileMetrics
	syncs    *syncMetrics
	// rootCA is the bundle published, as read (not re-encoded).
	rootCA []byte
}

func newController(c controllers.Context, rootCA []byte) (*Controller, error) {
	if len(rootCA) == 0 {
		return nil, errors.New("no root CA bundle to publish")
	}
	infs, err := controllers.InformersFor(c.Informers, namespaces, configMaps)
	if err != nil {
		return nil, err
	}
	nsInf, cmInf := infs[0], infs[1]
	syncs, err := newSyncMetrics(c.Registerer)
	if err != nil {
		return nil, err
	}
	ctrl := &Controller{
		client:   c.Client,
		cmLister: corelisters.NewConfigMapLister(cmInf.GetIndexer()),
		queue:    c.Queue,
		metrics:  c.Metrics,
		syncs:    syncs,
		rootCA:   rootCA,
	}
	log := c.Logger
	if _, err := cmInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, cur any) { ctrl.configMapChanged(log, cur) },
		DeleteFunc: func(obj any) { ctrl.configMapChanged(log, obj) },
	}); err != nil {
		return nil, err
	}
	if _, err := nsInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ctrl.namespaceAdded(log, obj) },
		UpdateFunc: func(_, cur any) { ctrl.namespaceUpdated(log, cur) },
	}); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// Run runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics)
}

// configMapChanged queues the namespace of an updated or deleted kube-root-ca.crt: it may
// need repairing or creating again.
func (c *Controller) configMapChanged(log klog.Logger, obj any) {
	cm, ok := tombstone.Unwrap[*corev1.ConfigMap](obj)
	if !ok || cm.Name != ConfigMapName {
		return
	}
	log.V(5).Info("root CA ConfigMap changed", "namespace", cm.Namespace, "name", cm.Name)
	c.queue.Add(cm.Namespace)
}

// namespaceAdded queues a new namespace (or one seen at start), whatever its phase, as
// upstream does: a create in a terminating one is refused by the API server.
func (c *Controller) namespaceAdded(log klog.Logger, obj any) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return
	}
	log.V(5).Info("namespace added", "namespace", ns.Name)
	c.queue.Add(ns.Name)
}

// namespaceUpdated queues an updated (or resynced) namespace while it is Active.
func (c *Controller) namespaceUpdated(log klog.Logger, obj any) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok || ns.Status.Phase != corev1.NamespaceActive {
		return
	}
	log.V(5).Info("namespace updated", "namespace", ns.Name)
	c.queue.Add(ns.Name)
}
