package podgc

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kshard/kshard/pkg/controllers"
)

// Name is kube-controller-manager's alias for the controller
// (pod-garbage-collector-controller).
const Name = "podgc"

const (
	// ThresholdFlag is kube-controller-manager's flag of the number of terminated pods
	// that may exist before the oldest are deleted; 0 or less switches that pass off.
	ThresholdFlag = "terminated-pod-gc-threshold"
	// DefaultThreshold is its default.
	DefaultThreshold = 12500
	// QuarantineFlag is a hidden flag for tests only: how long a node missing from the
	// cache is waited for before its absence is checked with a live read (upstream's
	// quarantineTime, which kube-controller-manager's integration tests shorten through
	// NewPodGCInternal; it has no flag).
	QuarantineFlag = "podgc-quarantine"

	// gcCheckPeriod is upstream's period of the whole pass: every pod that may need
	// collecting is queued again this often, and the terminated pods are counted.
	gcCheckPeriod = 20 * time.Second
	// defaultQuarantine is upstream's quarantineTime.
	defaultQuarantine = 40 * time.Second
	// nodeNameIndex indexes the shard's pods by spec.nodeName.
	nodeNameIndex = "podgc.spec.nodeName"
)

// terminatedSelector selects the pods upstream counts as terminated: any phase but
// Pending, Running and Unknown.
const terminatedSelector = "status.phase!=" + string(corev1.PodPending) + ",status.phase!=" +
	string(corev1.PodRunning) + ",status.phase!=" + string(corev1.PodUnknown)

var (
	pods  = controllers.Typed(corev1.SchemeGroupVersion.WithResource("pods"))
	nodes = controllers.Typed(corev1.SchemeGroupVersion.WithResource("nodes"))
	// terminatedPods are the cluster's terminated pods, every namespace's, cached whole
	// on every shard: the threshold is cluster-wide.
	terminatedPods = controllers.Resource{GroupVersionResource: pods.GroupVersionResource, FieldSelector: terminatedSelector}
)

// Options are the controller's flags.
type Options struct {
	// Threshold is --terminated-pod-gc-threshold.
	Threshold int
	// Quarantine is the hidden test flag --podgc-quarantine.
	Quarantine time.Duration
}

// Descriptor registers the controller: on by default, with a fixed worker count
// (upstream has no worker flag), kube-controller-manager's --terminated-pod-gc-threshold
// and the hidden test flag --podgc-quarantine.
func Descriptor() controllers.Descriptor {
	opts := &Options{Threshold: DefaultThreshold, Quarantine: defaultQuarantine}
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, FixedWorkers: 5,
		Primary: []controllers.Resource{pods},
		Reads:   []controllers.Resource{nodes, terminatedPods},
		Permissions: []controllers.Permission{
			{Resource: "nodes", Verbs: []string{"get"}},
			{Resource: "pods", Verbs: []string{"delete"}},
			{Resource: "pods/status", Verbs: []string{"patch"}},
		},
		AddFlags: func(fs *pflag.FlagSet) {
			fs.IntVar(&opts.Threshold, ThresholdFlag, opts.Threshold,
				"Number of terminated pods that can exist before the terminated pod garbage collector starts deleting terminated pods. If <= 0, the terminated pod garbage collector is disabled. Counted cluster-wide, over every shard's namespaces.")
			fs.DurationVar(&opts.Quarantine, QuarantineFlag, opts.Quarantine,
				"for tests only: how long the pod garbage collector waits for a node missing from its cache before it checks with the API server that the node is gone")
			_ = fs.MarkHidden(QuarantineFlag)
		},
		New: func(c controllers.Context) (controllers.Controller, error) {
			return newController(c, *opts, clock.RealClock{})
		},
	}
}

// Controller is the pod garbage collector.
type Controller struct {
	client     kubernetes.Interface
	podLister  corelisters.PodLister
	podIndexer toolscache.Indexer
	nodeLister corelisters.NodeLister
	terminated corelisters.PodLister
	queue      workqueue.TypedRateLimitingInterface[string]
	metrics    *controllers.ReconcileMetrics
	gcMetrics  *Metrics
	opts       Options
	clock      clock.Clock
	log        klog.Logger

	mu sync.Mutex
	// missing holds, per node name that pods name and the node cache lacks, when it was
	// first seen missing: the start of its quarantine.
	missing map[string]time.Time
	// absent holds, per node name, when a live read last found it gone: a verdict reused
	// for one period, so that a node's pods cost one read, not one each.
	absent map[string]time.Time
	// excess are the keys (and UIDs) of the terminated pods above the threshold at the
	// last count, oldest first; the pod syncs of the shard's own delete them.
	excess map[string]string
}

// New builds the controller (Descriptor's New, with the default flags).
func New(c controllers.Context) (controllers.Controller, error) {
	return newController(c, Options{Threshold: DefaultThreshold, Quarantine: defaultQuarantine}, clock.RealClock{})
}

func newController(c controllers.Context, opts Options, clk clock.Clock) (*Controller, error) {
	infs, err := controllers.InformersFor(c.Informers, pods, nodes, terminatedPods)
	if err != nil {
		return nil, err
	}
	podInf, nodeInf, termInf := infs[0], infs[1], infs[2]
	if err := podInf.AddIndexers(toolscache.Indexers{nodeNameIndex: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("pod index by node: %w", err)
	}
	m, err := NewMetrics(c.Registerer)
	if err != nil {
		return nil, err
	}
	log := c.Logger
	if log.GetSink() == nil {
		log = klog.Background()
	}
	ctrl := &Controller{
		client:     c.Client,
		podLister:  corelisters.NewPodLister(podInf.GetIndexer()),
		podIndexer: podInf.GetIndexer(),
		nodeLister: corelisters.NewNodeLister(nodeInf.GetIndexer()),
		terminated: corelisters.NewPodLister(termInf.GetIndexer()),
		queue:      c.Queue,
		metrics:    c.Metrics,
		gcMetrics:  m,
		opts:       opts,
		clock:      clk,
		log:        log,
		missing:    map[string]time.Time{},
		absent:     map[string]time.Time{},
		excess:     map[string]string{},
	}
	if _, err := podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    ctrl.podChanged,
		UpdateFunc: func(_, cur any) { ctrl.podChanged(cur) },
	}); err != nil {
		return nil, err
	}
	if _, err := nodeInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    ctrl.nodeChanged,
		UpdateFunc: func(_, cur any) { ctrl.nodeChanged(cur) },
		DeleteFunc: ctrl.nodeDeleted,
	}); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// Run runs workers on the pod queue and upstream's 20 s pass until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	go wait.UntilWithContext(ctx, c.tick, gcCheckPeriod)
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics)
}

// podChanged queues a pod of the shard that may need collecting.
func (c *Controller) podChanged(obj any) {
	if p, ok := obj.(*corev1.Pod); ok && c.candidate(p) {
		c.queue.Add(p.Namespace + "/" + p.Name)
	}
}

// candidate reports whether pod may be collected by a pass other than the threshold's:
// terminating (unscheduled, or on an out-of-service node), or bound to a node the cache
// lacks (an orphan, once its node is verified gone).
func (c *Controller) candidate(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return true
	}
	if p.Spec.NodeName == "" {
		return false
	}
	_, err := c.nodeLister.Get(p.Spec.NodeName)
	return err != nil
}

// nodeChanged ends a quarantine (the node exists) and queues the terminating pods of a
// node that is not ready and tainted out-of-service.
func (c *Controller) nodeChanged(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	c.mu.Lock()
	delete(c.missing, n.Name)
	delete(c.absent, n.Name)
	c.mu.Unlock()
	if outOfService(n) {
		c.queuePodsOn(n.Name, func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil })
	}
}

// nodeDeleted queues the pods of a deleted node: orphans once it is verified gone.
func (c *Controller) nodeDeleted(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if n, ok := obj.(*corev1.Node); ok {
		c.queuePodsOn(n.Name, func(*corev1.Pod) bool { return true })
	}
}

func (c *Controller) queuePodsOn(node string, want func(*corev1.Pod) bool) {
	objs, err := c.podIndexer.ByIndex(nodeNameIndex, node)
	if err != nil {
		return
	}
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && want(p) {
			c.queue.Add(p.Namespace + "/" + p.Name)
		}
	}
}

// tick is upstream's periodic pass: it counts the cluster's terminated pods against the
// threshold, and queues every pod of the shard that may need collecting (the queue drops
// those of namespaces the shard does not work).
func (c *Controller) tick(context.Context) {
	if c.opts.Threshold > 0 {
		for _, key := range c.count(c.log) {
			c.queue.Add(key)
		}
	}
	all, err := c.podLister.List(everything)
	if err != nil {
		return
	}
	referenced := map[string]bool{}
	for _, p := range all {
		if c.candidate(p) {
			c.queue.Add(p.Namespace + "/" + p.Name)
			if p.Spec.NodeName != "" {
				referenced[p.Spec.NodeName] = true
			}
		}
	}
	c.forgetNodes(referenced)
}

// forgetNodes drops quarantines and verdicts of node names no cached pod names any more.
func (c *Controller) forgetNodes(referenced map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for n := range c.missing {
		if !referenced[n] {
			delete(c.missing, n)
		}
	}
	for n := range c.absent {
		if !referenced[n] {
			delete(c.absent, n)
		}
	}
}
