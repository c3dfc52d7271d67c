package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/sharding/gate"
)

// Name is the controller's registry name.
const Name = "kshard-audit"

// Label selects the ConfigMaps the controller reconciles.
const Label = "kshard.io/audit"

// WriteAnnotation is the annotation a reconcile writes on its namespace's
// --audit-write-configmap: "<shard> <Unix nanoseconds when the write was sent>".
const WriteAnnotation = "kshard.io/audit-write"

// Options are the controller's flags (--audit-*).
type Options struct {
	// LogFile is the file the controller appends one JSON line per reconcile to.
	LogFile string
	// ResyncInterval is how often each ConfigMap is reconciled again.
	ResyncInterval time.Duration
	// WorkDuration is how long one reconcile pretends to work.
	WorkDuration time.Duration
	// WriteConfigMap, when set, is the ConfigMap of each namespace that a reconcile also
	// writes WriteAnnotation on, through the API (see Controller.write).
	WriteConfigMap string
}

// addFlags registers o's flags.
func (o *Options) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.LogFile, "audit-log-file", o.LogFile, "kshard-audit: file to append one JSON line per reconcile to")
	fs.DurationVar(&o.ResyncInterval, "audit-resync-interval", o.ResyncInterval, "kshard-audit: how often each ConfigMap is reconciled again")
	fs.DurationVar(&o.WorkDuration, "audit-work-duration", o.WorkDuration, "kshard-audit: how long one reconcile pretends to work")
	fs.StringVar(&o.WriteConfigMap, "audit-write-configmap", o.WriteConfigMap, "kshard-audit: where a ConfigMap of this name exists in the namespace, "+
		"each reconcile also writes its annotation "+WriteAnnotation+" through the API (so that the server-side fence can be seen refusing a stale shard's writes), "+
		"and records the reconcile only if the API server accepted the write")
}

// configMaps are the controller's primary objects (only those labelled Label are audited).
var configMaps = controllers.Typed(corev1.SchemeGroupVersion.WithResource("configmaps"))

// Descriptor registers the controller. It is off by default: enable it with
// --controllers=*,kshard-audit. It is in no production binary: the tests run the shard of
// test/cmd/audit-shard, which adds it. Each Descriptor has options of its own, which its
// AddFlags sets and its New reads.
func Descriptor() controllers.Descriptor {
	o := &Options{ResyncInterval: time.Second, WorkDuration: 20 * time.Millisecond}
	return controllers.Descriptor{
		Name: Name, OnByDefault: false, WorkersFlag: "concurrent-kshard-audit-syncs", DefaultWorkers: 4,
		AddFlags: o.addFlags,
		Primary:  []controllers.Resource{configMaps},
		// For --audit-write-configmap.
		Permissions: []controllers.Permission{{Resource: "configmaps", Verbs: []string{"patch"}}},
		TestOnly:    true,
		New:         func(c controllers.Context) (controllers.Controller, error) { return New(c, *o) },
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
	opts   Options

	mu  sync.Mutex
	out *os.File
	enc *json.Encoder

	// writes counts the API writes of --audit-write-configmap by result.
	writes *prometheus.CounterVec
}

// Results of an API write (the result label of kshard_audit_writes_total).
const (
	WriteAccepted = "accepted"
	// WriteRefusedByShard: the shard's own write fence (its gate) stopped it.
	WriteRefusedByShard = "refused_by_shard"
	// WriteRefusedByAPIServer: a ValidatingAdmissionPolicy (the server-side fence) of the
	// API server denied it (Forbidden, or Invalid when the policy names that reason).
	WriteRefusedByAPIServer = "refused_by_apiserver"
	WriteError              = "error"
)

// New builds the controller with o.
func New(c controllers.Context, o Options) (controllers.Controller, error) {
	if o.LogFile == "" {
		return nil, errors.New("kshard-audit needs --audit-log-file")
	}
	f, err := os.OpenFile(o.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kshard-audit: %w", err)
	}
	inf, err := c.Informers.InformerFor(configMaps)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	ctrl := &Controller{shard: c.Shard, lister: corelisters.NewConfigMapLister(inf.GetIndexer()), queue: c.Queue, ctx: c, opts: o, out: f, enc: json.NewEncoder(f),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kshard_audit_writes_total",
			Help: "API writes of kshard-audit (--audit-write-configmap) by result: accepted, refused_by_shard, refused_by_apiserver, error."}, []string{"result"})}
	if c.Registerer != nil {
		if err := c.Registerer.Register(ctrl.writes); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("kshard-audit: %w", err)
		}
	}
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
	case <-time.After(c.opts.WorkDuration):
	case <-ctx.Done():
	}
	// The record is this controller's only effect: like an API write, it must not happen
	// once the shard's lease has run out (e.g. the process was paused mid-reconcile).
	if err := c.ctx.WriteAllowed(key); err != nil {
		return err
	}
	if wrote, err := c.write(ctx, ns); err != nil {
		return err
	} else if !wrote {
		// Refused: the reconcile had no effect, so it leaves no record. Try again at the
		// next resync rather than at the queue's backoff, to keep the write rate the
		// benchmarks set.
		c.queue.AddAfter(key, c.opts.ResyncInterval)
		return nil
	}
	end := time.Now()
	c.mu.Lock()
	err = c.enc.Encode(Record{Shard: c.shard, Namespace: ns, Name: name, Start: start.UnixNano(), End: end.UnixNano()})
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("writing audit record: %w", err)
	}
	c.queue.AddAfter(key, c.opts.ResyncInterval)
	return nil
}

// write writes WriteAnnotation on the namespace's --audit-write-configmap, if there is
// one, and reports whether the reconcile may be recorded: true when there is nothing to
// write or the API server accepted the write, false when a fence refused it. The write
// makes the reconcile an API effect that the server-side fence guards: a shard cut off
// from the coordinator keeps its lease, and passes its own gate, for up to a session TTL
// after its partitions were seized and granted to others; only the API server stops it.
func (c *Controller) write(ctx context.Context, ns string) (bool, error) {
	if c.opts.WriteConfigMap == "" {
		return true, nil
	}
	if _, err := c.lister.ConfigMaps(ns).Get(c.opts.WriteConfigMap); apierrors.IsNotFound(err) {
		return true, nil
	}
	value := c.shard + " " + strconv.FormatInt(time.Now().UnixNano(), 10)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{WriteAnnotation: value}}})
	if err != nil {
		return false, err
	}
	_, err = c.ctx.Client.CoreV1().ConfigMaps(ns).Patch(ctx, c.opts.WriteConfigMap, types.MergePatchType, patch, metav1.PatchOptions{})
	result := WriteResult(err)
	c.writes.WithLabelValues(result).Inc()
	switch result {
	case WriteAccepted:
		return true, nil
	case WriteRefusedByShard, WriteRefusedByAPIServer:
		c.ctx.Logger.V(4).Info("audit write refused", "namespace", ns, "result", result, "err", err)
		return false, nil
	default:
		return false, fmt.Errorf("writing %s/%s: %w", ns, c.opts.WriteConfigMap, err)
	}
}

// WriteResult classifies the error of an API write by who refused it.
func WriteResult(err error) string {
	var fenced gate.ErrFenced
	var notHeld gate.ErrNotHeld
	switch {
	case err == nil:
		return WriteAccepted
	case errors.As(err, &fenced), errors.As(err, &notHeld):
		return WriteRefusedByShard
	case (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"):
		// Not RBAC's Forbidden, which says nothing of a policy.
		return WriteRefusedByAPIServer
	default:
		return WriteError
	}
}
