// Package app is the shard command: flags, wiring and lifecycle.
package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/httpserver"
	"github.com/kshard/kshard/pkg/logging"
	"github.com/kshard/kshard/pkg/metrics/promutil"
	"github.com/kshard/kshard/pkg/metrics/queuemetrics"
	"github.com/kshard/kshard/pkg/metrics/restmetrics"
	"github.com/kshard/kshard/pkg/sharding/gate"
	"github.com/kshard/kshard/pkg/sharding/loadmeter"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/served"
	"github.com/kshard/kshard/pkg/sharding/shardcache"
	"github.com/kshard/kshard/pkg/sharding/shardrpc"
	"github.com/kshard/kshard/pkg/sharding/shardruntime"
	"github.com/kshard/kshard/pkg/sharding/transport"
	"github.com/kshard/kshard/pkg/version"
)

// Main runs the shard with args and returns the exit code. extra are controllers beyond
// Descriptors(), for a shard binary built with controllers of its own: the tests'
// test/cmd/audit-shard adds kshard-audit, the contract test's shard kshard-stamp.
func Main(args []string, extra ...controllers.Descriptor) int {
	reg, err := controllers.NewRegistry(append(Descriptors(), extra...)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	o := NewOptions()
	fs := pflag.NewFlagSet("shard", pflag.ContinueOnError)
	o.AddFlags(fs, reg)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.ListControllers {
		fmt.Print(controllerList(append(Descriptors(), extra...)))
		return 0
	}
	if err := o.Validate(reg); err != nil {
		fmt.Fprintf(os.Stderr, "invalid flags:\n%v\n", err)
		return 2
	}
	log, flush, err := logging.New(*o.Logging, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer flush()
	log = log.WithValues("shard", o.ShardID)

	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), log))
	defer cancel()
	if err := run(ctx, cancel, o, reg); err != nil {
		log.Error(err, "shard failed")
		return 1
	}
	return 0
}

func restConfig(o *Options) (*rest.Config, error) {
	cfg, err := o.RESTConfig("kshard-shard/" + version.Version)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	return cfg, nil
}

// shard is one shard process, its parts built by run's steps in order: each step uses
// what the steps before it built.
type shard struct {
	o   *Options
	reg *controllers.Registry
	log logr.Logger

	// config and client talk to the API server as the shard (buildClients).
	config *rest.Config
	client *kubernetes.Clientset
	// metrics is served on /metrics; shardMetrics registers in it with the shard label
	// (registerMetrics).
	metrics      *prometheus.Registry
	shardMetrics prometheus.Registerer

	partitionOf func(namespace string) partition.ID // buildCache
	cache       *shardcache.Cache                   // buildCache
	metadata    metadata.Interface                  // buildCache
	// discovery finds the resources the API server serves, for the controllers that act
	// on all of them (buildRuntime; nil when none is enabled).
	discovery *served.Loop
	runtime   *shardruntime.Runtime // buildRuntime
	meter     *loadmeter.Meter      // buildRuntime: the load the session reports
	// broadcasters send the controllers' events, one per controller (buildRuntime); run
	// shuts them down when it returns.
	broadcasters []record.EventBroadcaster
	session      *shardrpc.Client // buildSession
}

// run builds the shard's parts, serves its HTTP endpoints and runs it until a signal (a
// graceful leave), the session's end or ctx's; it calls stop once the controllers have
// stopped.
func run(ctx context.Context, stop context.CancelFunc, o *Options, reg *controllers.Registry) error {
	s := &shard{o: o, reg: reg, log: klog.FromContext(ctx)}
	defer s.shutdownEvents()
	for _, step := range []func(context.Context) error{
		s.buildClients, s.registerMetrics, s.buildCache, s.buildRuntime, s.buildSession, s.serve,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return s.runUntilExit(ctx, stop)
}

// buildClients makes the shard's API client and, with --check-permissions, checks that
// the shard may do what it and the enabled controllers need.
func (s *shard) buildClients(ctx context.Context) error {
	var err error
	if s.config, err = restConfig(s.o); err != nil {
		return err
	}
	if s.client, err = kubernetes.NewForConfig(s.config); err != nil {
		return err
	}
	if s.o.CheckPermissions {
		if err := CheckPermissions(ctx, s.client, RequiredPermissions(s.reg.Enabled(s.o.Controllers))); err != nil {
			return err
		}
		s.log.V(1).Info("permissions checked")
	}
	return nil
}

// registerMetrics makes the registry /metrics serves, with the Go runtime's, the
// process's and the REST client's series.
func (s *shard) registerMetrics(context.Context) error {
	s.metrics = prometheus.NewRegistry()
	s.shardMetrics = prometheus.WrapRegistererWith(prometheus.Labels{"shard": s.o.ShardID}, s.metrics)
	if err := promutil.Register(s.metrics, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return err
	}
	return restmetrics.Register(s.shardMetrics)
}

// buildCache makes the partition map and the cache of the objects of the partitions the
// shard works.
func (s *shard) buildCache(context.Context) error {
	pmap, err := partition.NewMap(s.o.Partitions)
	if err != nil {
		return err
	}
	s.partitionOf = pmap.For
	metadataClient, err := metadata.NewForConfig(s.config)
	if err != nil {
		return err
	}
	s.metadata = metadataClient
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(s.client.Discovery()))
	cacheMode := shardcache.ModeClientFilter
	if s.o.ServerSideFiltering {
		cacheMode = shardcache.ModeServerFilter
	}
	s.cache, err = shardcache.New(s.client, s.partitionOf, shardcache.Options{
		Mode: cacheMode, MaxSelectorRanges: s.o.SelectorRanges, MaxSelectorWatches: s.o.SelectorWatches,
		WarmupConcurrency: s.o.WarmupLists, ClusterListThreshold: clusterListThreshold(s.o.ClusterListThreshold), MetadataClient: metadataClient, RESTMapper: mapper,
	})
	if err != nil {
		return err
	}
	return s.cache.RegisterMetrics(s.shardMetrics)
}

// buildRuntime makes the partition gate, the enabled controllers (their queues behind
// the gate) and the runtime that moves partitions through the cache, the gate and the
// controllers' queues.
func (s *shard) buildRuntime(ctx context.Context) error {
	meter, err := loadmeter.New(s.o.Partitions, loadmeter.DefaultOptions())
	if err != nil {
		return err
	}
	if err := meter.RegisterMetrics(s.shardMetrics); err != nil {
		return err
	}
	s.meter = meter
	g := gate.New(gate.ObjectKeys(s.partitionOf), gate.WithObserver(meter))
	queueProvider, err := queuemetrics.NewProvider(s.shardMetrics, nil)
	if err != nil {
		return err
	}
	if err := g.RegisterMetrics(s.shardMetrics); err != nil {
		return err
	}
	reconcileMetrics, err := controllers.NewReconcileMetrics(s.shardMetrics)
	if err != nil {
		return err
	}
	ca, err := apiServerCA(s.config)
	if err != nil {
		return err
	}
	enabled := s.reg.Enabled(s.o.Controllers)
	hub := &servedHub{failing: func(gvr schema.GroupVersionResource) bool {
		return s.cache.ListsFailing(shardcache.Key{Resource: gvr, Metadata: true})
	}}
	ctrls, err := buildControllers(enabled, s.reg.Workers, controllerDeps{
		config: s.config, apiServerCA: ca, cache: s.cache, gate: g, partitionOf: s.partitionOf, meter: meter, queues: queueProvider,
		recorder: s.eventRecorder(ctx), metrics: reconcileMetrics, registerer: s.shardMetrics,
		kubeMetrics: promutil.NewKubeMetrics(s.shardMetrics), served: hub, shard: s.o.ShardID, log: s.log,
	})
	if err != nil {
		return err
	}
	if s.discovery, err = hub.loop(s.client.Discovery(), s.cache, s.metadata, typedResources(enabled), s.log); err != nil {
		return err
	}
	names := make([]string, 0, len(enabled))
	for _, d := range enabled {
		names = append(names, d.Name)
	}
	s.log.Info("controllers enabled", "controllers", names, "version", version.Version)

	if s.runtime, err = shardruntime.New(s.cache, g, ctrls, shardruntime.Options{Meter: meter}, s.log); err != nil {
		return err
	}
	return s.runtime.RegisterMetrics(s.shardMetrics)
}

// eventRecorder returns controllerDeps.recorder: one event broadcaster per controller,
// writing through a client that shares the controller's rate limiter (events count
// against its --kube-api-qps, as in kube-controller-manager, where each controller
// records with its own client).
func (s *shard) eventRecorder(ctx context.Context) func(component string, events typedcorev1.EventInterface) record.EventRecorder {
	return func(component string, events typedcorev1.EventInterface) record.EventRecorder {
		b := record.NewBroadcaster(record.WithContext(ctx))
		b.StartStructuredLogging(3)
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: events})
		s.broadcasters = append(s.broadcasters, b)
		return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
	}
}

// shutdownEvents stops the controllers' event broadcasters.
func (s *shard) shutdownEvents() {
	for _, b := range s.broadcasters {
		b.Shutdown()
	}
}

// buildSession makes the session client that keeps the shard's session with the
// coordinator leader and hands the runtime the partitions it is granted.
func (s *shard) buildSession(context.Context) error {
	creds, err := transport.ClientCredentials(s.o.TLS)
	if err != nil {
		return err
	}
	sessionMetrics, err := shardrpc.NewMetrics(s.shardMetrics)
	if err != nil {
		return err
	}
	var leaderAddress func(context.Context) (string, error)
	if s.o.CoordinatorLease != "" {
		ns, name, err := splitLeaseRef(s.o.CoordinatorLease) // validated with the flags
		if err != nil {
			return err
		}
		leaderAddress = leaseHolderAddress(s.client, ns, name)
	}
	s.session, err = shardrpc.New(shardrpc.Options{
		ShardID: s.o.ShardID, Group: s.o.ShardGroup, Incarnation: uint64(time.Now().UnixNano()), BuildVersion: version.Version,
		Addresses: s.o.Coordinators, LeaderAddress: leaderAddress, Credentials: creds, PartitionCount: s.o.Partitions,
		Metrics: sessionMetrics, TokenFile: s.o.CoordinatorTokenFile, TokenOverPlaintext: s.o.TLS.Insecure,
		LoadReporter: loadReporter{runtime: s.runtime, meter: s.meter, log: s.log},
	}, sessionHandler{s.runtime}, s.log)
	return err
}

// serve starts the HTTP server: /metrics, /livez, and /readyz (a welcomed session, synced
// caches), until ctx ends.
func (s *shard) serve(ctx context.Context) error {
	hs := httpserver.New(httpserver.Options{Addr: s.o.HTTPBindAddress, Gatherer: s.metrics, EnablePprof: s.o.EnablePprof})
	hs.AddLivez("ping", func() error { return nil })
	hs.AddReadyz("session", func() error {
		if !s.session.Welcomed() {
			return errors.New("no welcomed session with the coordinator leader, or the lease has run out")
		}
		return nil
	})
	hs.AddReadyz("caches", s.runtime.Synced)
	return hs.Start(ctx)
}

// runUntilExit runs the runtime and the session until a signal (after which the shard
// hands its partitions over: leave), the session's end (its error is run's) or ctx's; then
// it stops the controllers, waits up to 10 s for them, and calls stop.
func (s *shard) runUntilExit(ctx context.Context, stop context.CancelFunc) error {
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	if s.discovery != nil {
		runDiscovery(runCtx, s.discovery, s.o.DiscoveryPeriod, s.log)
	}
	rtDone := make(chan struct{})
	go func() {
		defer close(rtDone)
		s.runtime.Run(runCtx)
	}()
	sessionDone := make(chan error, 1)
	go func() { sessionDone <- s.session.Run(runCtx) }()

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	select {
	case sig := <-sigs:
		s.leave(sig, sigs)
	case err := <-sessionDone:
		if err != nil {
			return err
		}
	case <-ctx.Done():
	}
	stopRun()
	select {
	case <-rtDone:
	case <-time.After(10 * time.Second):
		s.log.Info("controllers did not stop within 10s")
	}
	stop()
	return nil
}

// leave, after signal sig, asks the coordinator to move the shard's partitions away and
// waits until it has, --leave-timeout has passed or a second signal comes.
func (s *shard) leave(sig os.Signal, sigs <-chan os.Signal) {
	s.log.Info("signal received: handing partitions over before exit", "signal", sig.String(), "timeout", s.o.LeaveTimeout.String())
	s.session.Leave()
	select {
	case <-s.session.Done():
		s.log.Info("every partition was handed over")
	case <-time.After(s.o.LeaveTimeout):
		s.log.Info("leave timed out; exiting with partitions still held (the coordinator moves them after the lease expires)")
	case <-sigs:
		s.log.Info("second signal: exiting at once")
	}
}

// clusterListThreshold maps --warmup-cluster-list-threshold (0: off) to shardcache's
// option (0: default, negative: off).
func clusterListThreshold(flag int) int {
	if flag == 0 {
		return -1
	}
	return flag
}
