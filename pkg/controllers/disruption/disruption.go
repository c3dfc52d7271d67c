package disruption

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/scale"
	"github.com/kshard/kshard/pkg/controllers/internal/tombstone"
)

// Name is kube-controller-manager's alias for the controller (canonical name
// "disruption-controller").
const Name = "disruption"

// The controller's further queues, named as upstream names its queues.
const (
	// RecheckQueue holds budgets to sync again when an entry of their disruptedPods
	// expires.
	RecheckQueue = "disruption_recheck"
	// StalePodQueue holds pods whose DisruptionTarget condition may be stale.
	StalePodQueue = "stale_pod_disruption"
)

// EventSource is the component upstream's disruption controller records its events as.
const EventSource = "controllermanager"

const (
	// DeletionTimeout is how long a pod listed in a budget's disruptedPods (the eviction
	// subresource allowed it to go) is given to be seen terminating; until then it does
	// not count as healthy, afterwards its entry is dropped.
	DeletionTimeout = 2 * time.Minute
	// StalePodDisruptionTimeout is how long a pod may carry a True DisruptionTarget
	// condition without terminating before the controller sets it to False.
	StalePodDisruptionTimeout = 2 * time.Minute
)

var (
	pdbs         = controllers.Typed(policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets"))
	pods         = controllers.Typed(corev1.SchemeGroupVersion.WithResource("pods"))
	rcs          = controllers.Typed(corev1.SchemeGroupVersion.WithResource("replicationcontrollers"))
	replicaSets  = controllers.Typed(appsv1.SchemeGroupVersion.WithResource("replicasets"))
	deployments  = controllers.Typed(appsv1.SchemeGroupVersion.WithResource("deployments"))
	statefulSets = controllers.Typed(appsv1.SchemeGroupVersion.WithResource("statefulsets"))
)

// Descriptor registers the controller: on by default, with kube-controller-manager's
// --concurrent-disruption-syncs flag and its default of 1 worker (the recheck and stale
// pod queues have one worker each, as upstream's).
func Descriptor() controllers.Descriptor {
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, WorkersFlag: "concurrent-disruption-syncs", DefaultWorkers: 1,
		Primary: []controllers.Resource{pdbs},
		Reads:   []controllers.Resource{pods, rcs, replicaSets, deployments, statefulSets},
		Queues: []controllers.QueueSpec{
			{Name: RecheckQueue, Primary: []controllers.Resource{pdbs}},
			{Name: StalePodQueue, Primary: []controllers.Resource{pods}},
		},
		Permissions: []controllers.Permission{
			{Group: "policy", Resource: "poddisruptionbudgets/status", Verbs: []string{"update"}},
			{Group: "", Resource: "pods/status", Verbs: []string{"update"}},
			// The scale of any controller kind a pod may have (upstream's rule).
			{Group: "*", Resource: "*/scale", Verbs: []string{"get"}},
		},
		EventSource: EventSource,
		New:         New,
	}
}

// Controller is the disruption controller.
type Controller struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	metrics  *controllers.ReconcileMetrics
	clock    clock.PassiveClock

	pdbLister    policylisters.PodDisruptionBudgetLister
	podLister    corelisters.PodLister
	rcLister     corelisters.ReplicationControllerLister
	rsLister     appslisters.ReplicaSetLister
	dLister      appslisters.DeploymentLister
	ssLister     appslisters.StatefulSetLister
	scale        scale.Access
	staleTimeout time.Duration

	// queue holds budget keys, recheck budget keys to queue again at a delay, stale pod
	// keys.
	queue, recheck, stale workqueue.TypedRateLimitingInterface[string]
}

// New builds the controller on the shard's informers, reading scales through the
// context's client.
func New(c controllers.Context) (controllers.Controller, error) {
	return newController(c, scale.New(c.Client), clock.RealClock{}, StalePodDisruptionTimeout)
}

func newController(c controllers.Context, sa scale.Access, clk clock.PassiveClock, staleTimeout time.Duration) (*Controller, error) {
	infs, err := controllers.InformersFor(c.Informers, pdbs, pods, rcs, replicaSets, deployments, statefulSets)
	if err != nil {
		return nil, err
	}
	recheck, stale := c.Queues[RecheckQueue], c.Queues[StalePodQueue]
	if recheck == nil || stale == nil {
		return nil, fmt.Errorf("the controller's context lacks the %s or %s queue", RecheckQueue, StalePodQueue)
	}
	ctrl := &Controller{
		client: c.Client, recorder: c.Recorder, metrics: c.Metrics, clock: clk,
		pdbLister:    policylisters.NewPodDisruptionBudgetLister(infs[0].GetIndexer()),
		podLister:    corelisters.NewPodLister(infs[1].GetIndexer()),
		rcLister:     corelisters.NewReplicationControllerLister(infs[2].GetIndexer()),
		rsLister:     appslisters.NewReplicaSetLister(infs[3].GetIndexer()),
		dLister:      appslisters.NewDeploymentLister(infs[4].GetIndexer()),
		ssLister:     appslisters.NewStatefulSetLister(infs[5].GetIndexer()),
		scale:        sa,
		staleTimeout: staleTimeout,
		queue:        c.Queue, recheck: recheck, stale: stale,
	}
	log := c.Logger
	if _, err := infs[0].AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ctrl.enqueueBudget(log, obj) },
		UpdateFunc: func(_, cur any) { ctrl.enqueueBudget(log, cur) },
		DeleteFunc: func(obj any) { ctrl.enqueueBudget(log, obj) },
	}); err != nil {
		return nil, err
	}
	if _, err := infs[1].AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ctrl.podChanged(log, obj, true) },
		UpdateFunc: func(_, cur any) { ctrl.podChanged(log, cur, true) },
		DeleteFunc: func(obj any) { ctrl.podChanged(log, obj, false) },
	}); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// Run works the budget queue with workers, and the recheck and stale pod queues with one
// worker each, until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	wg.Go(func() { c.scale.RunReset(ctx) })
	wg.Go(func() { controllers.RunWorkers(ctx, RecheckQueue, c.recheck, 1, c.syncRecheck, nil) })
	wg.Go(func() { controllers.RunWorkers(ctx, StalePodQueue, c.stale, 1, c.syncStalePod, nil) })
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics)
	wg.Wait()
}

// syncRecheck hands a budget whose disruptedPods entry expired to the budget queue, as
// upstream's recheck worker does (rate-limited).
func (c *Controller) syncRecheck(_ context.Context, key string) error {
	c.queue.AddRateLimited(key)
	return nil
}

// enqueueBudget queues the budget obj (a tombstone too).
func (c *Controller) enqueueBudget(log klog.Logger, obj any) {
	pdb, ok := tombstone.Unwrap[*policyv1.PodDisruptionBudget](obj)
	if !ok {
		log.Error(nil, "Couldn't get a PodDisruptionBudget from the object", "obj", obj)
		return
	}
	log.V(4).Info("PodDisruptionBudget changed", "namespace", pdb.Namespace, "name", pdb.Name)
	c.queue.Add(pdb.Namespace + "/" + pdb.Name)
}

// podChanged queues the budget of a pod that was added, updated or deleted and, unless it
// was deleted, the pod itself when its DisruptionTarget condition may turn stale.
func (c *Controller) podChanged(log klog.Logger, obj any, present bool) {
	pod, ok := tombstone.Unwrap[*corev1.Pod](obj)
	if !ok {
		log.Error(nil, "Couldn't get a pod from the object", "obj", obj)
		return
	}
	if pdb := c.budgetOfPod(log, pod); pdb != nil {
		log.V(4).Info("pod changed: queueing its PodDisruptionBudget", "namespace", pod.Namespace, "pod", pod.Name, "name", pdb.Name)
		c.queue.Add(pdb.Namespace + "/" + pdb.Name)
	}
	if !present {
		return
	}
	if stale, after := c.staleDisruptionCondition(pod); stale {
		c.stale.AddAfter(pod.Namespace+"/"+pod.Name, after)
		log.V(4).Info("queued pod to clean up its stale DisruptionTarget condition", "namespace", pod.Namespace, "pod", pod.Name, "after", after)
	}
}

// budgetOfPod returns one budget whose selector matches pod, or nil. A pod matched by
// several gets a MultiplePodDisruptionBudgets warning and only the first the lister
// returns is queued, as upstream does (each budget's sync counts every pod it selects
// whenever it runs).
func (c *Controller) budgetOfPod(log klog.Logger, pod *corev1.Pod) *policyv1.PodDisruptionBudget {
	matching, err := c.pdbLister.GetPodPodDisruptionBudgets(pod)
	if err != nil {
		// The lister's only error: no budget matches.
		return nil
	}
	if len(matching) > 1 {
		msg := fmt.Sprintf("Pod %q/%q matches multiple PodDisruptionBudgets.  Chose %q arbitrarily.", pod.Namespace, pod.Name, matching[0].Name)
		log.Info(msg)
		c.recorder.Event(pod, corev1.EventTypeWarning, "MultiplePodDisruptionBudgets", msg)
	}
	return matching[0]
}
