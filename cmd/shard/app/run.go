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
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	clientgoworkqueue "k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/deployment"
	"github.com/kshard/kshard/pkg/controllers/replicaset"
	"github.com/kshard/kshard/pkg/controllers/testing/audit"
	"github.com/kshard/kshard/pkg/httpserver"
	"github.com/kshard/kshard/pkg/kubeclient"
	"github.com/kshard/kshard/pkg/logging"
	"github.com/kshard/kshard/pkg/metrics/restmetrics"
	"github.com/kshard/kshard/pkg/metrics/queuemetrics"
	"github.com/kshard/kshard/pkg/sharding/shardcache"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/shardruntime"
	"github.com/kshard/kshard/pkg/sharding/shardrpc"
	"github.com/kshard/kshard/pkg/sharding/transport"
	"github.com/kshard/kshard/pkg/sharding/gate"
	"github.com/kshard/kshard/pkg/version"
)

// Descriptors lists every controller a shard can run.
func Descriptors() []controllers.Descriptor {
	return []controllers.Descriptor{
		audit.Descriptor(),
		deployment.Descriptor(),
		replicaset.Descriptor(),
	}
}

// Main runs the shard with args and returns the exit code.
func Main(args []string) int {
	reg, err := controllers.NewRegistry(Descriptors()...)
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
	cfg, err := kubeclient.Config(o.Kubeconfig, "kshard-shard/"+version.Version)
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
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	shardReg := prometheus.WrapRegistererWith(prometheus.Labels{"shard": o.ShardID}, registry)
	restmetrics.Register(shardReg)

	pmap, err := partition.NewMap(o.Partitions)
	if err != nil {
		return err
	}
	partitionOf := func(ns string) uint32 { return uint32(pmap.For(ns)) }
	c, err := shardcache.New(client, partitionOf, shardcache.Options{WarmupConcurrency: o.WarmupLists})
	if err != nil {
		return err
	}
	if err := c.RegisterMetrics(shardReg); err != nil {
		return err
	}
	g := gate.New(gate.NamespaceKeyPartition(partitionOf))
	wqProvider, err := queuemetrics.NewProvider(shardReg, nil)
	if err != nil {
		return err
	}
	shardReg.MustRegister(queuemetrics.NewGateCollector(gate, nil))
	reconcileMetrics := controllers.NewReconcileMetrics(shardReg)

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(3)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()

	enabled := reg.Enabled(o.Controllers)
	var ctrls []controllers.Controller
	var names []string
	for _, d := range enabled {
		ccfg := rest.CopyConfig(cfg)
		ccfg.UserAgent = "kshard-shard/" + version.Version + " " + d.Name + "-controller"
		ccfg.Wrap(gate.FenceTransport(gate))
		cclient, err := kubernetes.NewForConfig(ccfg)
		if err != nil {
			return err
		}
		ctrl, err := d.New(controllers.Context{
			Client:    cclient,
			Informers: c,
			NewQueue: func(name string) clientgoworkqueue.TypedRateLimitingInterface[string] {
				return gate.NewQueue(gate.QueueConfig{Name: name, MetricsProvider: wqProvider})
			},
			Recorder: broadcaster.NewRecorder(clientgoScheme(), corev1.EventSource{Component: d.Name + "-controller"}),
			Shard:    o.ShardID,
			Logger:   log.WithValues("controller", d.Name),
			Metrics:  reconcileMetrics,
			WriteAllowed: func() error {
				return gate.WriteAllowed(gate)
			},
		})
		if err != nil {
			return fmt.Errorf("controller %s: %w", d.Name, err)
		}
		ctrls = append(ctrls, ctrl)
		names = append(names, d.Name)
	}
	log.Info("controllers enabled", "controllers", names, "version", version.Version)

	rt := shardruntime.New(c, gate, ctrls, shardruntime.Options{}, log)
	shardReg.MustRegister(shardruntime.NewCollector(rt))

	creds, err := transport.ClientCredentials(o.TLS)
	if err != nil {
		return err
	}
	sessionMetrics := shardrpc.NewMetrics(shardReg)
	client2, err := shardrpc.New(shardrpc.Options{
		ShardID: o.ShardID, Incarnation: uint64(time.Now().UnixNano()), BuildVersion: version.Version,
		Addresses: o.Coordinators, Credentials: creds, PartitionCount: o.Partitions, Metrics: sessionMetrics,
	}, rt, log)
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
		rt.Run(runCtx, func(i int) int { return reg.Workers(names[i]) })
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
