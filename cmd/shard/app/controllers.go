package app

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/cronjob"
	"github.com/kshard/kshard/pkg/controllers/daemonset"
	"github.com/kshard/kshard/pkg/controllers/deployment"
	"github.com/kshard/kshard/pkg/controllers/disruption"
	"github.com/kshard/kshard/pkg/controllers/endpoint"
	"github.com/kshard/kshard/pkg/controllers/endpointslice"
	"github.com/kshard/kshard/pkg/controllers/endpointslicemirroring"
	"github.com/kshard/kshard/pkg/controllers/ephemeralvolume"
	"github.com/kshard/kshard/pkg/controllers/garbagecollector"
	"github.com/kshard/kshard/pkg/controllers/horizontalpodautoscaling"
	"github.com/kshard/kshard/pkg/controllers/job"
	"github.com/kshard/kshard/pkg/controllers/namespace"
	"github.com/kshard/kshard/pkg/controllers/podgc"
	"github.com/kshard/kshard/pkg/controllers/pvcprotection"
	"github.com/kshard/kshard/pkg/controllers/replicaset"
	"github.com/kshard/kshard/pkg/controllers/replicationcontroller"
	"github.com/kshard/kshard/pkg/controllers/resourcequota"
	"github.com/kshard/kshard/pkg/controllers/rootcacertpublisher"
	"github.com/kshard/kshard/pkg/controllers/serviceaccount"
	"github.com/kshard/kshard/pkg/controllers/statefulset"
	"github.com/kshard/kshard/pkg/controllers/ttlafterfinished"
	"github.com/kshard/kshard/pkg/metrics/promutil"
	"github.com/kshard/kshard/pkg/metrics/queuemetrics"
	"github.com/kshard/kshard/pkg/sharding/gate"
	"github.com/kshard/kshard/pkg/sharding/loadmeter"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/shardcache"
	"github.com/kshard/kshard/pkg/sharding/shardruntime"
	"github.com/kshard/kshard/pkg/version"
)

// Descriptors lists every controller a shard can run. Adding a controller is a package
// under pkg/controllers/<name> and one line here; see docs/controllers.md. Test-only
// controllers are not here: a test's shard binary adds them (Main's extra).
func Descriptors() []controllers.Descriptor {
	return []controllers.Descriptor{
		cronjob.Descriptor(),
		daemonset.Descriptor(),
		deployment.Descriptor(),
		disruption.Descriptor(),
		endpoint.Descriptor(),
		endpointslice.Descriptor(),
		endpointslicemirroring.Descriptor(),
		ephemeralvolume.Descriptor(),
		garbagecollector.Descriptor(),
		horizontalpodautoscaling.Descriptor(),
		job.Descriptor(),
		namespace.Descriptor(),
		podgc.Descriptor(),
		pvcprotection.Descriptor(),
		replicaset.Descriptor(),
		replicationcontroller.Descriptor(),
		resourcequota.Descriptor(),
		rootcacertpublisher.Descriptor(),
		serviceaccount.Descriptor(),
		statefulset.Descriptor(),
		ttlafterfinished.Descriptor(),
	}
}

// controllerDeps are what every controller is built with.
type controllerDeps struct {
	config *rest.Config
	// apiServerCA is the PEM CA bundle config trusts for the API server (Context.APIServerCA).
	apiServerCA []byte
	cache       *shardcache.Cache
	gate        *gate.Gate
	partitionOf func(namespace string) partition.ID
	// meter counts each controller's API requests and rate-limiter wait per partition
	// (controllerClients); nil measures nothing.
	meter  *loadmeter.Meter
	queues *queuemetrics.Provider
	// recorder returns the event recorder of component, sending its events through events.
	recorder func(component string, events typedcorev1.EventInterface) record.EventRecorder
	metrics  *controllers.ReconcileMetrics
	// registerer takes the controllers' own series (with the shard label).
	registerer prometheus.Registerer
	// kubeMetrics takes the controllers' component-base series (Context.RegisterKubeMetrics).
	kubeMetrics *promutil.KubeMetrics
	// served collects the consumers of served resources (Context.Served).
	served *servedHub
	shard  string
	log    logr.Logger
}

// buildControllers builds each enabled controller against the contract, and returns what
// the runtime needs of it: its queues, the cache keys of each queue's primary objects
// (which the runtime enqueues when it acquires a partition) and its Run.
func buildControllers(enabled []controllers.Descriptor, workers func(name string) int, deps controllerDeps) ([]shardruntime.Controller, error) {
	var out []shardruntime.Controller
	for _, d := range enabled {
		// A controller of served resources without Primary (the garbage collector) has
		// only its further queues: a queue named after it would stay empty.
		var queue workqueue.TypedRateLimitingInterface[string]
		var rqs []shardruntime.Queue
		if len(d.Primary) > 0 || d.Served == nil {
			q, rq, err := deps.newQueue(d.QueueNameOrName(), d.Primary, d.RateLimiter, d.Served != nil)
			if err != nil {
				return nil, fmt.Errorf("controller %s: %w", d.Name, err)
			}
			queue, rqs = q, []shardruntime.Queue{rq}
		}
		var more map[string]workqueue.TypedRateLimitingInterface[string]
		for _, spec := range d.Queues {
			q, rq, err := deps.newQueue(spec.Name, spec.Primary, spec.RateLimiter, d.Served != nil)
			if err != nil {
				return nil, fmt.Errorf("controller %s: queue %s: %w", d.Name, spec.Name, err)
			}
			if more == nil {
				more = map[string]workqueue.TypedRateLimitingInterface[string]{}
			}
			more[spec.Name] = q
			rqs = append(rqs, rq)
		}
		cs, err := controllerClients(deps.config, d, gate.FenceTransport(deps.gate, deps.partitionOf), deps.metering())
		if err != nil {
			return nil, fmt.Errorf("controller %s: %w", d.Name, err)
		}
		ctrl, err := d.New(controllers.Context{
			Client:              cs.client,
			Metadata:            cs.metadata,
			RESTConfig:          cs.restConfig,
			RegisterKubeMetrics: deps.kubeMetrics.Register,
			Informers:           controllers.Declared(d, cacheInformers{deps.cache}),
			Queue:               queue,
			Queues:              more,
			Recorder:            deps.recorder(d.EventComponent(), cs.events.CoreV1().Events("")),
			Shard:               deps.shard,
			Logger:              deps.log.WithValues("controller", d.Name),
			Metrics:             deps.metrics,
			Registerer:          deps.registerer,
			APIServerCA:         deps.apiServerCA,
			WriteAllowed:        deps.gate.WriteAllowedFor,
			Served:              deps.served.forController(d),
		})
		if err != nil {
			return nil, fmt.Errorf("controller %s: %w", d.Name, err)
		}
		n := workers(d.Name)
		rc := shardruntime.Controller{
			Name: d.Name, Queues: rqs,
			Run: func(ctx context.Context) { ctrl.Run(ctx, n) },
		}
		if c, ok := ctrl.(controllers.DiscoveryFailureCounter); ok && deps.served != nil {
			deps.served.counters = append(deps.served.counters, c)
		}
		if r, ok := ctrl.(controllers.Resyncer); ok {
			rc.Resync = func(namespaces []string, cluster bool) {
				r.Resync(controllers.Scope{Namespaces: namespaces, Cluster: cluster})
			}
		} else if refillsItself(d) {
			return nil, fmt.Errorf("controller %s: a queue of it has no Primary, so it must refill its queues itself (controllers.Resyncer), and does not", d.Name)
		}
		out = append(out, rc)
	}
	return out, nil
}

// refillsItself reports whether d has no Primary (a controller of served resources whose
// keys no Primary names): nothing fills its queues on acquire but its own Resync. A
// further queue without Primary beside a Primary is filled by the controller's handlers
// only.
func refillsItself(d controllers.Descriptor) bool {
	return len(d.Primary) == 0
}

// newQueue returns a queue named name behind the gate, whose keys are those of primary's
// objects (their partitions as gate.KeysFor maps them), and what the runtime needs to fill
// it on acquire. A queue of a controller of served resources without a primary holds
// object keys of any resource ("namespace/…" in its namespace's partition, a key without
// a namespace in the cluster partition: gate.ObjectKeys); the controller refills it.
func (deps controllerDeps) newQueue(name string, primary []controllers.Resource,
	rateLimiter func() workqueue.TypedRateLimiter[string], served bool) (*gate.Queue, shardruntime.Queue, error) {
	cacheKeys, kinds, err := primaries(primary, deps.cache)
	if err != nil {
		return nil, shardruntime.Queue{}, err
	}
	keys, err := gate.KeysFor(deps.partitionOf, kinds)
	if err != nil {
		return nil, shardruntime.Queue{}, err
	}
	if len(primary) == 0 && served {
		keys = gate.ObjectKeys(deps.partitionOf)
	}
	qcfg := gate.QueueConfig{Name: name, MetricsProvider: deps.queues, Keys: keys}
	if rateLimiter != nil {
		qcfg.RateLimiter = rateLimiter()
	}
	q := deps.gate.NewQueue(qcfg)
	return q, shardruntime.Queue{Name: name, Queue: q, Primary: cacheKeys}, nil
}

// apiServerCA returns the PEM CA bundle config trusts for the API server: its CAData, or
// the content of its CAFile (a kubeconfig's certificate-authority, the in-cluster
// ServiceAccount's ca.crt); nil when it has neither.
func apiServerCA(config *rest.Config) ([]byte, error) {
	if len(config.CAData) > 0 || config.CAFile == "" {
		return config.CAData, nil
	}
	b, err := os.ReadFile(config.CAFile)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's CA bundle: %w", err)
	}
	return b, nil
}

// metering returns how controllerClients meters the clients' load: by deps.meter, the
// requests' partitions told by deps.partitionOf; nil without a meter.
func (deps controllerDeps) metering() *metering {
	if deps.meter == nil {
		return nil
	}
	return &metering{meter: deps.meter, partitionOf: deps.partitionOf}
}

// metering is the load meter a controller's clients count their requests and
// rate-limiter wait in, and the namespace → partition mapping of its requests.
type metering struct {
	meter       *loadmeter.Meter
	partitionOf func(namespace string) partition.ID
}

// limiter wraps a client's token bucket so that its wait is counted as d's.
func (m *metering) limiter(d controllers.Descriptor, bucket flowcontrol.RateLimiter) flowcontrol.RateLimiter {
	if m == nil {
		return bucket
	}
	return loadmeter.Limiter(m.meter, d.Name, bucket)
}

// requestWeight is what one request of d's clients counts as load: 1/ClientQPSScale, so
// that a client given a larger budget (the namespace controller's ×20) counts its
// requests as a share of one default client's.
func requestWeight(d controllers.Descriptor) float64 {
	if d.ClientQPSScale > 0 {
		return 1 / float64(d.ClientQPSScale)
	}
	return 1
}

// clients are a controller's API clients.
type clients struct {
	// client is the controller's clientset, its writes fenced.
	client *kubernetes.Clientset
	// events sends the controller's events, unfenced.
	events *kubernetes.Clientset
	// metadata is the controller's metadata-only client, its writes fenced.
	metadata metadata.Interface
	// restConfig returns a copy of client's configuration without its rate limiter
	// (Context.RESTConfig).
	restConfig func() *rest.Config
}

// controllerClients returns d's API client, its writes fenced by fence, the client its
// events are sent with, and its metadata client. The first two share one token bucket of
// config's QPS and burst, times d's ClientQPSScale and ClientBurstScale: like a
// kube-controller-manager controller, which records events with its own client, a
// controller's events count against its rate limit (and a benchmark at equal
// --kube-api-qps compares equal budgets). The metadata client has a bucket of its own of
// the same size, as kube-controller-manager's metadata clients do, and logs no API
// warnings. Events are not fenced: an event may be sent after the reconcile that made it,
// and ownership, ended (see ownerrecord's policy).
//
// With metering (the shard's load meter), all three count their requests as load of the
// partitions their URLs name (loadmeter.Transport, inside the fence, so refused writes do
// not count; weighted by requestWeight), and both buckets count their wait as d's and as
// the partition of the reconcile that waited (loadmeter.Limiter). Clients built from
// Context.RESTConfig count their requests too.
func controllerClients(config *rest.Config, d controllers.Descriptor, fence func(http.RoundTripper) http.RoundTripper, metered *metering) (clients, error) {
	cfg := rest.CopyConfig(config)
	cfg.UserAgent = "kshard-shard/" + version.Version + " " + d.Name + "-controller"
	if d.ClientQPSScale > 0 {
		cfg.QPS *= d.ClientQPSScale
	}
	if d.ClientBurstScale > 0 {
		cfg.Burst *= d.ClientBurstScale
	}
	cfg.RateLimiter = metered.limiter(d, flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst))
	if metered != nil {
		cfg.Wrap(loadmeter.Transport(metered.meter, metered.partitionOf, requestWeight(d)))
	}
	var out clients
	var err error
	if out.events, err = kubernetes.NewForConfig(cfg); err != nil {
		return clients{}, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(fence)
	if out.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return clients{}, err
	}
	unlimited := rest.CopyConfig(cfg)
	unlimited.RateLimiter = nil
	out.restConfig = func() *rest.Config { return rest.CopyConfig(unlimited) }
	mcfg := rest.CopyConfig(cfg)
	mcfg.RateLimiter = metered.limiter(d, flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst))
	mcfg.WarningHandler = rest.NoWarnings{}
	if out.metadata, err = metadata.NewForConfig(mcfg); err != nil {
		return clients{}, err
	}
	return out, nil
}

// primaries returns the cache keys of a queue's primary resources, and what the gate needs
// to know of them to map the queue's keys to partitions (gate.KeysFor).
func primaries(primary []controllers.Resource, c *shardcache.Cache) ([]shardcache.Key, []gate.Primary, error) {
	var keys []shardcache.Key
	var kinds []gate.Primary
	for _, r := range primary {
		k := cacheKey(r)
		scoped, err := c.ClusterScoped(k)
		if err != nil {
			return nil, nil, fmt.Errorf("primary %s: %w", r, err)
		}
		keys = append(keys, k)
		kinds = append(kinds, gate.Primary{Name: r.String(), Namespaces: r.GroupVersionResource == shardcache.NamespacesResource, ClusterScoped: scoped})
	}
	return keys, kinds, nil
}

func cacheKey(r controllers.Resource) shardcache.Key {
	return shardcache.Key{Resource: r.GroupVersionResource, Metadata: r.Metadata, FieldSelector: r.FieldSelector}
}

// cacheInformers serves controllers.Informers from the shard's cache.
type cacheInformers struct{ c *shardcache.Cache }

func (i cacheInformers) InformerFor(r controllers.Resource) (toolscache.SharedIndexInformer, error) {
	return i.c.Informer(cacheKey(r))
}

// controllerList is --list-controllers' output: a line per controller that
// kube-controller-manager also runs (upstreamControllers), with its canonical name first
// and kshard's name, its alias, last ("replicaset-controller replicaset"; one name when
// it has no alias). --controllers takes either; hack/cluster.sh switches the first off in
// the local kube-controller-manager.
func controllerList(ds []controllers.Descriptor) string {
	var b strings.Builder
	for _, name := range upstreamControllers(ds) {
		n, ok := controllers.NamesOf(name)
		if !ok || n.Alias == "" {
			fmt.Fprintln(&b, name)
			continue
		}
		fmt.Fprintln(&b, n.Canonical, n.Alias)
	}
	return b.String()
}

// upstreamControllers returns the names of the registered controllers that
// kube-controller-manager also runs (not kshard's test-only ones), sorted: the local
// control plane switches exactly these off in its kube-controller-manager.
func upstreamControllers(ds []controllers.Descriptor) []string {
	var out []string
	for _, d := range ds {
		if !d.TestOnly {
			out = append(out, d.Name)
		}
	}
	slices.Sort(out)
	return out
}
