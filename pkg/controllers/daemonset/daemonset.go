package daemonset

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/consistency"
	"github.com/kshard/kshard/pkg/controllers/internal/expectations"
	"github.com/kshard/kshard/pkg/controllers/internal/history"
	"github.com/kshard/kshard/pkg/controllers/internal/podcontrol"
	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
	"github.com/kshard/kshard/pkg/metrics/promutil"
)

// Name is kube-controller-manager's name for the controller.
const Name = "daemonset"

// BurstReplicas caps the pods one sync creates, and those it deletes
// (kube-controller-manager's value for the DaemonSet controller).
const BurstReplicas = 250

// Upstream's failed-pod backoff: 1 s doubling to 15 min per DaemonSet, generation and
// node, forgotten a minute after its last use.
const (
	failedPodBackoffInitial = time.Second
	failedPodBackoffMax     = 15 * time.Minute
	backoffGCInterval       = time.Minute
)

// nodeNameIndex indexes pods by spec.nodeName: a node's change finds the daemon pods on it.
const nodeNameIndex = "kshard.io/pod-node-name"

// controllerKind is the group/version/kind of the pods' and revisions' controllerRef.
var controllerKind = appsv1.SchemeGroupVersion.WithKind("DaemonSet")

// The informers the controller reads: its primary DaemonSets, their revisions and pods,
// and every node (cluster-scoped, cached whole on every shard).
var (
	daemonSets = controllers.Typed(appsv1.SchemeGroupVersion.WithResource("daemonsets"))
	revisions  = controllers.Typed(appsv1.SchemeGroupVersion.WithResource("controllerrevisions"))
	pods       = controllers.Typed(corev1.SchemeGroupVersion.WithResource("pods"))
	nodes      = controllers.Typed(corev1.SchemeGroupVersion.WithResource("nodes"))

	podsResource       = pods.GroupResource()
	daemonSetsResource = daemonSets.GroupResource()
)

// Descriptor registers the controller: on by default, with kube-controller-manager's
// --concurrent-daemonset-syncs flag and default of 2 workers, and the permissions of
// upstream's system:controller:daemon-set-controller role that it uses.
func Descriptor() controllers.Descriptor {
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, WorkersFlag: "concurrent-daemonset-syncs", DefaultWorkers: 2,
		Primary: []controllers.Resource{daemonSets},
		Reads:   []controllers.Resource{revisions, pods, nodes},
		Permissions: []controllers.Permission{
			{Group: "apps", Resource: "daemonsets", Verbs: []string{"get"}},
			{Group: "apps", Resource: "daemonsets/status", Verbs: []string{"update"}},
			// Pods and revisions are created with blockOwnerDeletion, which the
			// OwnerReferencesPermissionEnforcement admission plugin allows only to
			// whoever may update the owner's finalizers.
			{Group: "apps", Resource: "daemonsets/finalizers", Verbs: []string{"update"}},
			{Resource: "pods", Verbs: []string{"create", "delete", "patch"}},
			{Group: "apps", Resource: "controllerrevisions", Verbs: []string{"get", "create", "delete", "update", "patch"}},
		},
		New: New,
	}
}

// Controller is the DaemonSet controller.
type Controller struct {
	client     kubernetes.Interface
	dsLister   appslisters.DaemonSetLister
	history    *history.History
	podLister  corelisters.PodLister
	podIndexer toolscache.Indexer
	nodeLister corelisters.NodeLister
	queue      workqueue.TypedRateLimitingInterface[string]
	recorder   record.EventRecorder
	pods       podcontrol.Control
	metrics    *controllers.ReconcileMetrics
	staleSkips *prometheus.CounterVec

	expectations *expectations.Expectations
	consistency  *consistency.Store
	// failedPods delays the deletion of a failed daemon pod on a node that keeps failing
	// (upstream's failedPodsBackoff).
	failedPods    *flowcontrol.Backoff
	clock         clock.Clock
	burstReplicas int
}

// New builds the controller on the shard's informers; it registers its event handlers
// and indexes before the shard starts them.
func New(c controllers.Context) (controllers.Controller, error) {
	return newController(c, clock.RealClock{})
}

func newController(c controllers.Context, clk clock.Clock) (*Controller, error) {
	infs, err := controllers.InformersFor(c.Informers, daemonSets, revisions, pods, nodes)
	if err != nil {
		return nil, err
	}
	dsInf, revInf, podInf, nodeInf := infs[0], infs[1], infs[2], infs[3]
	reg := c.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry() // nobody collects them
	}
	// Upstream's daemonset_controller_stale_sync_skips_total.
	staleSkips := prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: "daemonset_controller", Name: "stale_sync_skips_total",
		Help: "Total number of DaemonSet syncs skipped due to a stale watch cache.",
	}, []string{"group", "resource"})
	if err := promutil.Register(reg, staleSkips); err != nil {
		return nil, err
	}
	backoff := flowcontrol.NewBackOff(failedPodBackoffInitial, failedPodBackoffMax)
	backoff.Clock = clk
	ctrl := &Controller{
		client:       c.Client,
		dsLister:     appslisters.NewDaemonSetLister(dsInf.GetIndexer()),
		history:      &history.History{Client: c.Client, Indexer: revInf.GetIndexer()},
		podLister:    corelisters.NewPodLister(podInf.GetIndexer()),
		podIndexer:   podInf.GetIndexer(),
		nodeLister:   corelisters.NewNodeLister(nodeInf.GetIndexer()),
		queue:        c.Queue,
		recorder:     c.Recorder,
		pods:         podcontrol.Control{Client: c.Client, Recorder: c.Recorder},
		metrics:      c.Metrics,
		staleSkips:   staleSkips,
		expectations: expectations.New(clk),
		consistency: consistency.New(map[schema.GroupResource]consistency.RVSource{
			podsResource:       podInf.GetStore(),
			daemonSetsResource: dsInf.GetStore(),
		}),
		failedPods:    backoff,
		clock:         clk,
		burstReplicas: BurstReplicas,
	}
	if err := podutil.AddControllerIndex(podInf); err != nil {
		return nil, fmt.Errorf("pod index: %w", err)
	}
	if err := addNodeNameIndex(podInf); err != nil {
		return nil, fmt.Errorf("pod node index: %w", err)
	}
	if err := history.AddControllerIndex(revInf); err != nil {
		return nil, fmt.Errorf("controllerrevision index: %w", err)
	}
	if err := ctrl.addHandlers(c, dsInf, revInf, podInf, nodeInf); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// addNodeNameIndex adds nodeNameIndex to the pod informer, once.
func addNodeNameIndex(inf toolscache.SharedIndexInformer) error {
	if _, ok := inf.GetIndexer().GetIndexers()[nodeNameIndex]; ok {
		return nil
	}
	err := inf.AddIndexers(toolscache.Indexers{nodeNameIndex: func(obj any) ([]string, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Spec.NodeName == "" {
			return nil, nil
		}
		return []string{pod.Spec.NodeName}, nil
	}})
	if err != nil {
		if _, ok := inf.GetIndexer().GetIndexers()[nodeNameIndex]; ok {
			return nil
		}
	}
	return err
}

// Run runs workers until ctx ends, and forgets the failed-pod backoffs of nodes not
// seen for a while.
func (c *Controller) Run(ctx context.Context, workers int) {
	go wait.Until(c.failedPods.GC, backoffGCInterval, ctx.Done())
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics)
}

func keyOf(ds *appsv1.DaemonSet) string { return ds.Namespace + "/" + ds.Name }

func podKey(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

func (c *Controller) enqueue(ds *appsv1.DaemonSet) { c.queue.Add(keyOf(ds)) }
