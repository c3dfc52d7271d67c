package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kshard/kshard/pkg/controllers"
)

// Name is the controller's registry name.
const Name = "kshard-audit"

// Label selects the ConfigMaps the controller reconciles.
const Label = "kshard.io/audit"

var opts = struct {
	file     string
	interval time.Duration
	work     time.Duration
}{interval: time.Second, work: 20 * time.Millisecond}

// configMaps are the controller's primary objects (only those labelled Label are audited).
var configMaps = controllers.Typed(corev1.SchemeGroupVersion.WithResource("configmaps"))

// Descriptor registers the controller. It is off by default: enable it with
// --controllers=*,kshard-audit.
func Descriptor() controllers.Descriptor {
	return controllers.Descriptor{
		Name: Name, OnByDefault: false, WorkersFlag: "concurrent-kshard-audit-syncs", DefaultWorkers: 4,
		AddFlags: func(fs *pflag.FlagSet) {
			fs.StringVar(&opts.file, "audit-log-file", opts.file, "kshard-audit: file to append one JSON line per reconcile to")
			fs.DurationVar(&opts.interval, "audit-resync-interval", opts.interval, "kshard-audit: how often each ConfigMap is reconciled again")
			fs.DurationVar(&opts.work, "audit-work-duration", opts.work, "kshard-audit: how long one reconcile pretends to work")
		},
		Primary:  []controllers.Resource{configMaps},
		TestOnly: true,
		New:      New,
	}
}

// Record is one reconcile, as written to the file.
type Record struct {
	Shard     string `json:"shard"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Start     int64  `json:"start"`
	End       int64  `json:"end"`
}

// Controller is the audit controller.
type Controller struct {
	shard  string
	lister corelisters.ConfigMapLister
	queue  workqueue.TypedRateLimitingInterface[string]
	ctx    controllers.Context

	mu  sync.Mutex
	out *os.File
	enc *json.Encoder
}

// New builds the controller.
func New(c controllers.Context) (controllers.Controller, error) {
	if opts.file == "" {
		return nil, errors.New("kshard-audit needs --audit-log-file")
	}
	f, err := os.OpenFile(opts.file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kshard-audit: %w", err)
	}
	inf, err := c.Informers.InformerFor(configMaps)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	ctrl := &Controller{shard: c.Shard, lister: corelisters.NewConfigMapLister(inf.GetIndexer()), queue: c.Queue, ctx: c, out: f, enc: json.NewEncoder(f)}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    ctrl.enqueue,
		UpdateFunc: func(_, obj any) { ctrl.enqueue(obj) },
	})
	return ctrl, err
}

func (c *Controller) enqueue(obj any) {
	key, err := toolscache.MetaNamespaceKeyFunc(obj)
	if err == nil {
		c.queue.Add(key)
	}
}

// Run runs the workers.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.out.Close()
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.ctx.Metrics)
}

func (c *Controller) sync(ctx context.Context, key string) error {
	start := time.Now()
	ns, name, err := toolscache.SplitMetaNamespaceKey(key)
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
	select {
	case <-time.After(opts.work):
	case <-ctx.Done():
	}
	// The record is this controller's only effect: like an API write, it must not happen
	// once the shard's lease has run out (e.g. the process was paused mid-reconcile).
	if err := c.ctx.WriteAllowed(key); err != nil {
		return err
	}
	end := time.Now()
	c.mu.Lock()
	err = c.enc.Encode(Record{Shard: c.shard, Namespace: ns, Name: name, Start: start.UnixNano(), End: end.UnixNano()})
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("writing audit record: %w", err)
	}
	c.queue.AddAfter(key, opts.interval)
	return nil
}
