package horizontalpodautoscaling

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	autoscalinglisters "k8s.io/client-go/listers/autoscaling/v2"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/spf13/pflag"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/horizontalpodautoscaling/replicacalc"
	"github.com/kshard/kshard/pkg/controllers/internal/consistency"
	"github.com/kshard/kshard/pkg/controllers/internal/scale"
)

// Name is kube-controller-manager's alias for the controller (canonical name
// "horizontal-pod-autoscaler-controller").
const Name = "horizontalpodautoscaling"

// QueueName is the name of upstream's queue, and so of the controller's queue and its
// workqueue series.
const QueueName = "horizontalpodautoscaler"

// EventSource is the component upstream's horizontal pod autoscaler records its events
// as; the rebuild (rebuild.go) also selects the previous owner's events by it.
const EventSource = "horizontal-pod-autoscaler"

// kube-controller-manager's flags and defaults
// (k8s.io/kube-controller-manager/config/v1alpha1, HPAControllerConfiguration).
const (
	SyncPeriodFlag              = "horizontal-pod-autoscaler-sync-period"
	DownscaleStabilizationFlag  = "horizontal-pod-autoscaler-downscale-stabilization"
	ToleranceFlag               = "horizontal-pod-autoscaler-tolerance"
	CPUInitializationPeriodFlag = "horizontal-pod-autoscaler-cpu-initialization-period"
	InitialReadinessDelayFlag   = "horizontal-pod-autoscaler-initial-readiness-delay"
)

var (
	hpas = controllers.Typed(autoscalingv2.SchemeGroupVersion.WithResource("horizontalpodautoscalers"))
	pods = controllers.Typed(corev1.SchemeGroupVersion.WithResource("pods"))

	hpaResource = schema.GroupResource{Group: autoscalingv2.GroupName, Resource: "horizontalpodautoscalers"}
)

// Options are the controller's flags, kube-controller-manager's.
type Options struct {
	// SyncPeriod is how often every HPA is synced (the queue's fixed interval).
	SyncPeriod time.Duration
	// DownscaleStabilization is the scale-down window of HPAs without one of their own.
	DownscaleStabilization time.Duration
	// Tolerance is the change of the usage ratio below which no rescale is proposed.
	Tolerance float64
	// CPUInitializationPeriod and InitialReadinessDelay are how the replica calculator
	// treats the CPU samples of young and unready pods.
	CPUInitializationPeriod time.Duration
	InitialReadinessDelay   time.Duration
}

// DefaultOptions are kube-controller-manager 1.37's defaults.
func DefaultOptions() Options {
	return Options{SyncPeriod: 15 * time.Second, DownscaleStabilization: 5 * time.Minute, Tolerance: 0.1,
		CPUInitializationPeriod: 5 * time.Minute, InitialReadinessDelay: 30 * time.Second}
}

func (o *Options) addFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.SyncPeriod, SyncPeriodFlag, o.SyncPeriod, "The period for syncing the number of pods in horizontal pod autoscaler.")
	fs.DurationVar(&o.DownscaleStabilization, DownscaleStabilizationFlag, o.DownscaleStabilization,
		"The period for which autoscaler will look backwards and not scale down below any recommendation it made during that period.")
	fs.Float64Var(&o.Tolerance, ToleranceFlag, o.Tolerance,
		"The minimum change (from 1.0) in the desired-to-actual metrics ratio for the horizontal pod autoscaler to consider scaling.")
	fs.DurationVar(&o.CPUInitializationPeriod, CPUInitializationPeriodFlag, o.CPUInitializationPeriod, "The period after pod start when CPU samples might be skipped.")
	fs.DurationVar(&o.InitialReadinessDelay, InitialReadinessDelayFlag, o.InitialReadinessDelay,
		"The period after pod start during which readiness changes will be treated as initial readiness.")
}

// validate refuses a sync period the queue cannot use. Upstream validates only the
// worker count (≥ 1, which the shard checks for every controller).
func (o *Options) validate() error {
	if o.SyncPeriod <= 0 {
		return fmt.Errorf("--%s must be positive, got %s", SyncPeriodFlag, o.SyncPeriod)
	}
	return nil
}

// Descriptor registers the controller: on by default as upstream's, with
// kube-controller-manager's --concurrent-horizontal-pod-autoscaler-syncs (default 5) and
// its five --horizontal-pod-autoscaler-* flags, and upstream's queue: named
// "horizontalpodautoscaler", every key re-added after each sync at the fixed interval of
// the sync period.
func Descriptor() controllers.Descriptor {
	opts := DefaultOptions()
	return controllers.Descriptor{
		Name: Name, QueueName: QueueName, OnByDefault: true,
		WorkersFlag: "concurrent-horizontal-pod-autoscaler-syncs", DefaultWorkers: 5,
		Primary:     []controllers.Resource{hpas},
		Reads:       []controllers.Resource{pods},
		RateLimiter: func() workqueue.TypedRateLimiter[string] { return newFixedIntervalRateLimiter(opts.SyncPeriod) },
		Permissions: []controllers.Permission{
			{Group: "autoscaling", Resource: "horizontalpodautoscalers/status", Verbs: []string{"update"}},
			// The scale of any target kind (upstream's rule).
			{Group: "*", Resource: "*/scale", Verbs: []string{"get", "update"}},
			// The previous owner's SuccessfulRescale events, for the rebuild.
			{Group: "", Resource: "events", Verbs: []string{"list"}},
			{Group: "metrics.k8s.io", Resource: "pods", Verbs: []string{"list"}},
			{Group: "custom.metrics.k8s.io", Resource: "*", Verbs: []string{"get", "list"}},
			{Group: "external.metrics.k8s.io", Resource: "*", Verbs: []string{"get", "list"}},
		},
		EventSource: EventSource,
		AddFlags:    opts.addFlags,
		Validate:    func(int) error { return opts.validate() },
		New:         func(c controllers.Context) (controllers.Controller, error) { return New(c, opts) },
	}
}

// Calculator computes the replica count an HPA's metrics ask for, and the metrics'
// statuses (package replicacalc). replicas is -1 when no metric could be computed;
// condition, when set, is the ScalingActive condition the failure calls for.
type Calculator interface {
	ComputeReplicasForMetrics(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, scale *autoscalingv1.Scale,
		selector labels.Selector, specs []autoscalingv2.MetricSpec) (replicas int32, metric string,
		statuses []autoscalingv2.MetricStatus, timestamp time.Time, condition *autoscalingv2.HorizontalPodAutoscalerCondition, err error)
}

// Controller is the horizontal pod autoscaler.
type Controller struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	metrics  *controllers.ReconcileMetrics
	clock    clock.PassiveClock
	opts     Options

	hpaLister autoscalinglisters.HorizontalPodAutoscalerLister
	podLister corelisters.PodLister
	scale     scale.Access
	calc      Calculator
	queue     workqueue.TypedRateLimitingInterface[string]

	// invalidate forgets the custom metrics API's preferred version every sync period
	// (nil in unit tests).
	invalidate func(ctx context.Context, period time.Duration)

	histories   *histories
	selectors   *selectorStore
	consistency *consistency.Store
	monitor     *monitor
}

// New builds the controller on the shard's informers: scales read and written through
// the context's client, metrics read with clients built from its RESTConfig (each with
// a token bucket of its own, as upstream's).
func New(c controllers.Context, opts Options) (*Controller, error) {
	sa := scale.New(c.Client)
	mc, err := replicacalc.NewRESTMetricsClient(c.RESTConfig(), sa.Mapper, c.Client.Discovery())
	if err != nil {
		return nil, err
	}
	ctrl, err := newController(c, opts, sa, nil, clock.RealClock{})
	if err != nil {
		return nil, err
	}
	ctrl.calc = replicacalc.New(replicacalc.Config{
		Metrics: mc, Pods: ctrl.podLister, Tolerance: opts.Tolerance,
		CPUInitializationPeriod: opts.CPUInitializationPeriod, InitialReadinessDelay: opts.InitialReadinessDelay,
		Recorder: c.Recorder, ObserveMetricComputation: ctrl.monitor.observeMetricComputation,
	})
	ctrl.invalidate = mc.InvalidateVersionsEvery
	return ctrl, nil
}

// newController builds the controller with calc (nil: New sets it after).
func newController(c controllers.Context, opts Options, sa scale.Access, calc Calculator, clk clock.PassiveClock) (*Controller, error) {
	if c.Queue == nil {
		return nil, errors.New("the controller's context has no queue")
	}
	infs, err := controllers.InformersFor(c.Informers, hpas, pods)
	if err != nil {
		return nil, err
	}
	mon, err := newMonitor(c.Registerer)
	if err != nil {
		return nil, err
	}
	ctrl := &Controller{
		client: c.Client, recorder: c.Recorder, metrics: c.Metrics, clock: clk, opts: opts,
		hpaLister: autoscalinglisters.NewHorizontalPodAutoscalerLister(infs[0].GetIndexer()),
		podLister: corelisters.NewPodLister(infs[1].GetIndexer()),
		scale:     sa, calc: calc, queue: c.Queue,
		histories: newHistories(),
		selectors: newSelectorStore(),
		consistency: consistency.New(map[schema.GroupResource]consistency.RVSource{
			hpaResource: infs[0].GetStore(),
		}),
		monitor: mon,
	}
	log := c.Logger
	if _, err := infs[0].AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ctrl.addHPA(log, obj) },
		UpdateFunc: func(old, cur any) { ctrl.updateHPA(log, old, cur) },
		DeleteFunc: func(obj any) { ctrl.deleteHPA(log, obj) },
	}); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// Run works the queue with workers, and resets the scale mapper's discovery every 30 s,
// until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	wg.Go(func() { c.scale.RunReset(ctx) })
	if c.invalidate != nil {
		wg.Go(func() { c.invalidate(ctx, c.opts.SyncPeriod) })
	}
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics)
	wg.Wait()
}
