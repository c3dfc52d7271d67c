// Package stamp is a test-only controller written against the controller contract alone
// (pkg/controllers) and nothing of the sharding layer: it is the worked example of
// docs/controllers.md and the subject of the contract test.
//
// It reconciles ConfigMaps labelled kshard.io/stamp=true by stamping the name of the
// process that reconciled them into an annotation, and again every --stamp-interval. It
// registers no event handler at all: every key it ever works was put in its queue by the
// shard when the shard started working the ConfigMap's namespace, or by its own requeue.
// So the annotation shows which shard the shard layer handed each namespace to, and a
// shard that lost a namespace stops stamping it.
package stamp

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
)

// Name is the controller's name in --controllers.
const Name = "kshard-stamp"

// Label selects the ConfigMaps the controller stamps; Annotation holds the stamp.
const (
	Label      = "kshard.io/stamp"
	Annotation = "kshard.io/stamped-by"
)

var interval = time.Second

// configMaps are the controller's primary objects.
var configMaps = controllers.Typed(corev1.SchemeGroupVersion.WithResource("configmaps"))

// Descriptor declares the controller: its primary ConfigMaps, one worker, and the patch
// it needs on top of the list and watch that Primary implies.
func Descriptor() controllers.Descriptor {
	return controllers.Descriptor{
		Name: Name, FixedWorkers: 1, TestOnly: true,
		AddFlags: func(fs *pflag.FlagSet) {
			fs.DurationVar(&interval, "stamp-interval", interval, "kshard-stamp: how often each ConfigMap is stamped again")
		},
		Primary:     []controllers.Resource{configMaps},
		Permissions: []controllers.Permission{{Resource: "configmaps", Verbs: []string{"patch"}}},
		New:         New,
	}
}

// Controller stamps ConfigMaps.
type Controller struct {
	client  kubernetes.Interface
	lister  corelisters.ConfigMapLister
	queue   workqueue.TypedRateLimitingInterface[string]
	metrics *controllers.ReconcileMetrics
	self    string
}

// New builds the controller from what the shard hands it.
func New(c controllers.Context) (controllers.Controller, error) {
	inf, err := c.Informers.InformerFor(configMaps)
	if err != nil {
		return nil, err
	}
	return &Controller{client: c.Client, lister: corelisters.NewConfigMapLister(inf.GetIndexer()),
		queue: c.Queue, metrics: c.Metrics, self: c.Shard}, nil
}

// Run runs the workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics)
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	cm, err := c.lister.ConfigMaps(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if cm.Labels[Label] != "true" {
		return nil
	}
	if cm.Annotations[Annotation] != c.self {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, Annotation, c.self)
		if _, err := c.client.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
		klog.FromContext(ctx).V(2).Info("stamped", "namespace", ns, "name", name)
	}
	c.queue.AddAfter(key, interval)
	return nil
}
