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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
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
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/shardcache"
	"github.com/kshard/kshard/pkg/sharding/shardrpc"
	"github.com/kshard/kshard/pkg/sharding/shardruntime"
	"github.com/kshard/kshard/pkg/sharding/transport"
	"github.com/kshard/kshard/pkg/version"
)

// Main runs the shard with args and returns the exit code. extra are controllers beyond
// Descriptors(), for a shard binary built with controllers of its own (kshard's contract
// test builds one with a test-only controller).
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

func run(ctx context.Context, stop context.CancelFunc, o *Options, reg *controllers.Registry) error {
	log := klog.FromContext(ctx)
	cfg, err := restConfig(o)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if o.CheckPermissions {
		if err := CheckPermissions(ctx, client, RequiredPermissions(reg.Enabled(o.Controllers))); err != nil {
			return err
		}
		log.V(1).Info("permissions checked")
	}

	registry := prometheus.NewRegistry()
	shardReg := prometheus.WrapRegistererWith(prometheus.Labels{"shard": o.ShardID}, registry)
	if err := promutil.Register(registry, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return err
	}
	if err := restmetrics.Register(shardReg); err != nil {
		return err
	}

	pmap, err := partition.NewMap(o.Partitions)
	if err != nil {
		return err
	}
	partitionOf := pmap.For
	metadataClient, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(client.Discovery()))
	cacheMode := shardcache.ModeClientFilter
	if o.ServerSideFiltering {
		cacheMode = shardcache.ModeServerFilter
	}
	c, err := shardcache.New(client, partitionOf, shardcache.Options{
		Mode: cacheMode, MaxSelectorRanges: o.SelectorRanges, MaxSelectorWatches: o.SelectorWatches,
		WarmupConcurrency: o.WarmupLists, ClusterListThreshold: clusterListThreshold(o.ClusterListThreshold), MetadataClient: metadataClient, RESTMapper: mapper,
	})
	if err != nil {
		return err
	}
	if err := c.RegisterMetrics(shardReg); err != nil {
		return err
	}
	g := gate.New(gate.ObjectKeys(partitionOf))
	queueProvider, err := queuemetrics.NewProvider(shardReg, nil)
	if err != nil {
		return err
	}
	if err := g.RegisterMetrics(shardReg); err != nil {
		return err
	}
	reconcileMetrics, err := controllers.NewReconcileMetrics(shardReg)
	if err != nil {
		return err
	}

	// One event broadcaster per controller, writing through a client that shares the
	// controller's rate limiter (events count against its --kube-api-qps, as in
	// kube-controller-manager, where each controller records with its own client).
	var broadcasters []record.EventBroadcaster
	defer func() {
		for _, b := range broadcasters {
			b.Shutdown()
		}
	}()

	ca, err := apiServerCA(cfg)
	if err != nil {
		return err
	}
	enabled := reg.Enabled(o.Controllers)
	ctrls, err := buildControllers(enabled, reg.Workers, controllerDeps{
		config: cfg, apiServerCA: ca, cache: c, gate: g, partitionOf: partitionOf, queues: queueProvider,
		recorder: func(component string, events typedcorev1.EventInterface) record.EventRecorder {
			b := record.NewBroadcaster(record.WithContext(ctx))
			b.StartStructuredLogging(3)
			b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: events})
			broadcasters = append(broadcasters, b)
			return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
		},
		metrics: reconcileMetrics, registerer: shardReg, shard: o.ShardID, log: log,
	})
	if err != nil {
		return err
	}
	names := make([]string, 0, len(enabled))
	for _, d := range enabled {
		names = append(names, d.Name)
	}
	log.Info("controllers enabled", "controllers", names, "version", version.Version)

	rt, err := shardruntime.New(c, g, ctrls, shardruntime.Options{}, log)
	if err != nil {
		return err
	}
	if err := rt.RegisterMetrics(shardReg); err != nil {
		return err
	}

	creds, err := transport.ClientCredentials(o.TLS)
	if err != nil {
		return err
	}
	sessionMetrics, err := shardrpc.NewMetrics(shardReg)
	if err != nil {
		return err
	}
	client2, err := shardrpc.New(shardrpc.Options{
		ShardID: o.ShardID, Incarnation: uint64(time.Now().UnixNano()), BuildVersion: version.Version,
		Addresses: o.Coordinators, Credentials: creds, PartitionCount: o.Partitions, Metrics: sessionMetrics,
		TokenFile: o.CoordinatorTokenFile, TokenOverPlaintext: o.TLS.Insecure,
	}, sessionHandler{rt}, log)
	if err != nil {
		return err
	}

	hs := httpserver.New(httpserver.Options{Addr: o.HTTPBindAddress, Gatherer: registry, EnablePprof: o.EnablePprof})
	hs.AddLivez("ping", func() error { return nil })
	hs.AddReadyz("session", func() error {
		if !client2.Welcomed() {
			return errors.New("no welcomed session with the coordinator leader, or the lease has run out")
		}
		return nil
	})
	hs.AddReadyz("caches", rt.Synced)
	if err := hs.Start(ctx); err != nil {
		return err
	}

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	rtDone := make(chan struct{})
	go func() {
		defer close(rtDone)
		rt.Run(runCtx)
	}()
	sessionDone := make(chan error, 1)
	go func() { sessionDone <- client2.Run(runCtx) }()

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	select {
	case sig := <-sigs:
		log.Info("signal received: handing partitions over before exit", "signal", sig.String(), "timeout", o.LeaveTimeout.String())
		client2.Leave()
		select {
		case <-client2.Done():
			log.Info("every partition was handed over")
		case <-time.After(o.LeaveTimeout):
			log.Info("leave timed out; exiting with partitions still held (the coordinator moves them after the lease expires)")
		case <-sigs:
			log.Info("second signal: exiting at once")
		}
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
		log.Info("controllers did not stop within 10s")
	}
	stop()
	return nil
}

// clusterListThreshold maps --warmup-cluster-list-threshold (0: off) to shardcache's
// option (0: default, negative: off).
func clusterListThreshold(flag int) int {
	if flag == 0 {
		return -1
	}
	return flag
}
