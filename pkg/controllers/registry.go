package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	basemetrics "k8s.io/component-base/metrics"

	"github.com/kshard/kshard/pkg/componentopts"
)

// Resource names an informer a controller reads: a built-in type, typed (Typed), or any
// resource the API server serves, metadata only (MetadataOnly; the store then holds
// *metav1.PartialObjectMetadata).
type Resource struct {
	schema.GroupVersionResource
	Metadata bool
	// FieldSelector, when set, names a separate informer of the type, cached whole (every
	// namespace, not only the shard's partitions) and holding only the objects the field
	// selector selects, e.g. "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"
	// on pods: for work of the cluster partition that must see the whole cluster (the pod
	// garbage collector's threshold on terminated pods). Every shard that runs the
	// controller caches every selected object of the cluster, so keep the selection small.
	// It is read only (Reads): a queue's keys come from objects of the shard's partitions.
	FieldSelector string
}

// Typed names the typed informer of a built-in resource, e.g.
// Typed(appsv1.SchemeGroupVersion.WithResource("deployments")).
func Typed(gvr schema.GroupVersionResource) Resource { return Resource{GroupVersionResource: gvr} }

// MetadataOnly names the metadata-only informer of any served resource.
func MetadataOnly(gvr schema.GroupVersionResource) Resource {
	return Resource{GroupVersionResource: gvr, Metadata: true}
}

// String reads "deployments.apps", with " (metadata)" for metadata-only informers and
// " (fieldSelector=…)" for field-selected ones.
func (r Resource) String() string {
	s := r.GroupResource().String()
	if r.Metadata {
		s += " (metadata)"
	}
	if r.FieldSelector != "" {
		s += " (fieldSelector=" + r.FieldSelector + ")"
	}
	return s
}

// Informers hands a controller the shard's shared informers. Ask for them in the
// controller's constructor: the shard starts them after every controller was built.
type Informers interface {
	// InformerFor returns the shared informer of r, which the controller's Descriptor
	// must declare in Primary or Reads (asking for another is an error, so a
	// controller's declared reads, and the RBAC derived from them, are never short).
	// Stores of namespaced types hold the shard's namespaces only; cluster-scoped types
	// (Nodes, …) are cached whole. Build typed listers over its indexer with client-go's
	// listers, e.g. appslisters.NewDeploymentLister(inf.GetIndexer()).
	InformerFor(r Resource) (toolscache.SharedIndexInformer, error)
}

// InformersFor returns the informers of rs, in the order asked, or the first error: a
// constructor's one call for everything it reads.
func InformersFor(i Informers, rs ...Resource) ([]toolscache.SharedIndexInformer, error) {
	out := make([]toolscache.SharedIndexInformer, 0, len(rs))
	for _, r := range rs {
		inf, err := i.InformerFor(r)
		if err != nil {
			return nil, err
		}
		out = append(out, inf)
	}
	return out, nil
}

// Declared returns inner limited to d's Primary and Reads: asking for anything else is an
// error naming the controller and the resource. The shard serves every controller through
// it, and unit tests can too (controllertest.Context).
func Declared(d Descriptor, inner Informers) Informers {
	return declared{name: d.Name, resources: d.Resources(), inner: inner}
}

type declared struct {
	name      string
	resources []Resource
	inner     Informers
}

func (i declared) InformerFor(r Resource) (toolscache.SharedIndexInformer, error) {
	if !slices.Contains(i.resources, r) {
		return nil, fmt.Errorf("controller %s asks for the %s informer without declaring it in its Descriptor's Primary or Reads", i.name, r)
	}
	return i.inner.InformerFor(r)
}

// Context is what a controller gets from the shard.
type Context struct {
	// Client is a clientset whose user agent names the controller. Its Discovery() is an
	// uncached discovery client of the same user agent and rate limit, for a controller
	// that acts on every resource the API server serves (aggregated APIs and CRDs).
	Client kubernetes.Interface
	// Metadata is a metadata-only client (k8s.io/client-go/metadata) for any resource the
	// API server serves, with Client's user agent and fence, and a token bucket of its own
	// of the same QPS and burst (as a kube-controller-manager controller's metadata client
	// has). API server warnings (deprecated resources) are not logged: a controller that
	// lists every resource would log them on every sync.
	Metadata metadata.Interface
	// RESTConfig returns a new copy of Client's configuration (its user agent, its fenced
	// transport, its QPS and burst) without a rate limiter, for the clients a controller
	// builds itself (the HPA's metrics API clients): each client built from it gets a token
	// bucket of its own, as kube-controller-manager's clients built from a controller's
	// client configuration do. Nil in unit tests that do not set it.
	RESTConfig func() *rest.Config
	// RegisterKubeMetrics exports k8s.io/component-base metrics (those of upstream's
	// published controller modules, as k8s.io/endpointslice/metrics) on the shard's
	// /metrics with the shard label, under their own names; a collector registered before
	// (the same package global, by another controller or a controller built again) is not
	// an error. Nil in unit tests that do not set it.
	RegisterKubeMetrics func(cs ...basemetrics.Registerable) error
	// Informers serves the informers the Descriptor declares.
	Informers Informers
	// Queue is the controller's rate-limited work queue, named after it or its
	// Descriptor's QueueName (client-go workqueue metrics). Its keys are client-go's MetaNamespaceKeyFunc keys of the
	// Descriptor's Primary objects. The shard fills it when it starts working a
	// namespace, and drops keys of namespaces it does not work. Nil for a controller of
	// served resources whose Descriptor has no Primary (it works its Queues only).
	Queue workqueue.TypedRateLimitingInterface[string]
	// Queues are the further queues the Descriptor's Queues declare, by QueueSpec.Name,
	// each behind the shard's gate as Queue is (filled when the shard starts working a
	// namespace, keys of namespaces it does not work dropped). Nil when it declares none.
	Queues map[string]workqueue.TypedRateLimitingInterface[string]
	// Recorder records Kubernetes events as the controller's component.
	Recorder record.EventRecorder
	// Shard is this shard's ID, for logs only.
	Shard string
	// Logger is the controller's logger (keys controller and shard set).
	Logger logr.Logger
	// Metrics records reconciles, errors and durations per controller.
	Metrics *ReconcileMetrics
	// Registerer registers the controller's own Prometheus series, for a controller that
	// exports those kube-controller-manager's controller of the same name exports (e.g.
	// the job controller's job_controller_*), under upstream's names so that dashboards
	// and alerts written for upstream work. Series get the shard's shard label. Nil when
	// nobody collects them (unit tests): register with a registry of your own then.
	Registerer prometheus.Registerer
	// APIServerCA is the PEM bundle of certificate authorities the shard's own client
	// trusts for the API server: its kubeconfig's certificate-authority(-data), or the
	// in-cluster ServiceAccount's ca.crt. Empty when the client does not verify the
	// server's certificate (plain HTTP, insecure). For a controller that hands the API
	// server's CA on, as kube-controller-manager's controllers fall back to the CA of
	// their client configuration (the root CA publisher without --root-ca-file).
	APIServerCA []byte
	// WriteAllowed fails while the shard must not change anything for key (a queue key,
	// "namespace/name"): its lease ran out, or key's namespace is no longer held. It is
	// only for effects outside the API (kshard's audit controller's records): Client's
	// and Metadata's writes are checked by their transport, whichever queue's work makes
	// them, so a controller never calls it before an API write.
	WriteAllowed func(key string) error
	// Served hands over the served resources the Descriptor's Served asks for; nil when
	// it asks for none.
	Served ServedInformers
}

// Controller is a running controller.
type Controller interface {
	// Run runs workers until ctx ends.
	Run(ctx context.Context, workers int)
}

// Descriptor declares one controller; the shard derives everything else from it (its
// flags, its queue and what fills it, its informers, its RBAC, the Helm chart's
// ClusterRole, the local kube-controller-manager's --controllers, the docs' table).
type Descriptor struct {
	// Name is kshard's name for the controller (its logs, metrics, queue and flags): the
	// alias kube-controller-manager still accepts for it ("replicaset"), or its canonical
	// name where it has no alias. --controllers takes both (NamesOf, Selection).
	Name string
	// QueueName names Context.Queue (its client-go workqueue series, its gate series) when
	// kube-controller-manager's queue of the controller is not named as the controller
	// ("endpoint_slice" of "endpointslice"), so that dashboards and alerts written for
	// upstream's workqueue_* series work. Empty is Name.
	QueueName string
	// OnByDefault says whether "*" enables it.
	OnByDefault bool
	// WorkersFlag is kube-controller-manager's --concurrent-…-syncs flag name, and
	// DefaultWorkers its default.
	WorkersFlag    string
	DefaultWorkers int
	// FixedWorkers, instead of WorkersFlag and DefaultWorkers, is for a controller that
	// kube-controller-manager runs with a fixed worker count and no flag.
	FixedWorkers int
	// ClientQPSScale and ClientBurstScale multiply the shard's --kube-api-qps and
	// --kube-api-burst for this controller's clients, for a controller that
	// kube-controller-manager gives a larger budget (its namespace controller: ×20 and
	// ×100). Zero means 1.
	ClientQPSScale   float32
	ClientBurstScale int
	// RateLimiter builds the rate limiter of the controller's queue, for a controller whose
	// kube-controller-manager queue has its own (optional; nil is client-go's
	// DefaultTypedControllerRateLimiter).
	RateLimiter func() workqueue.TypedRateLimiter[string]
	// AddFlags registers controller-specific flags (optional).
	AddFlags func(fs *pflag.FlagSet)
	// Validate checks the controller's own flags once they are parsed (optional), for
	// bounds kube-controller-manager enforces on them (--max-endpoints-per-slice within
	// 1..1000): a bad value is a clear startup error, reported with every other bad flag
	// (Registry.Validate), not a controller that misbehaves later. It runs whether or not
	// the controller is enabled, as kube-controller-manager validates every flag.
	Validate func() error
	// Primary are the resources whose objects' keys the controller's Queue holds. When
	// the shard starts working a namespace it adds the key of every cached Primary object
	// of it to the Queue: that sync rebuilds whatever the previous owner held in memory
	// (requeues after minReadySeconds, progress deadlines, schedules, TTLs), as after a
	// restart. Keys without a namespace are Namespace names when Primary holds the
	// namespaces resource, and cluster-scoped work otherwise (one shard at a time).
	Primary []Resource
	// Reads are the other informers the controller reads.
	Reads []Resource
	// Queues declares the controller's queues beyond Queue, for a controller that works
	// more than one kind of key (the job controller's orphan pods, whose tracking
	// finalizers no Job sync removes). Each is served as Context.Queues[Name] and is
	// behind the shard's gate exactly as Queue is: when the shard starts working a
	// namespace it adds the key of every cached object of the queue's Primary in it; keys
	// of namespaces the shard does not work are dropped; when a namespace leaves, its
	// keys are discarded, its work in flight is waited for (or cancelled, if revoked) and
	// its writes are fenced. Work it with RunWorkers, as Queue.
	Queues []QueueSpec
	// Permissions are the API permissions the controller needs beyond list and watch of
	// Primary and Reads, which are added for it (AllPermissions). The shard checks them at
	// start (a missing one is a clear startup error, not a stream of 403s), and the Helm
	// chart's ClusterRole grants exactly these for the enabled controllers (a test keeps
	// the two equal). The shard's own permissions, which every shard has whatever runs
	// (events create, patch and update for the event recorder; namespaces list and watch),
	// are not repeated here.
	Permissions []Permission
	// Served asks for every resource the API server serves that it describes, found by
	// discovery while the shard runs and handed over through Context.Served; nil for a
	// controller whose resources are all in Primary and Reads. AllPermissions adds its
	// rule.
	Served *ServedResources
	// EventSource is the component name of the controller's events when it is not
	// "<Name>-controller" (kube-controller-manager's replication manager records as
	// "replication-controller"): users and tools filter events by it.
	EventSource string
	// TestOnly marks kshard's own test controllers, which kube-controller-manager does not
	// know: they stay out of its --controllers list and of the docs' table.
	TestOnly bool
	// New builds the controller.
	New func(ctx Context) (Controller, error)
}

// AllPermissions returns Permissions with list and watch added on every Primary and Reads
// resource, merged into a rule of the same resource where one exists.
func (d Descriptor) AllPermissions() []Permission {
	out := make([]Permission, 0, len(d.Permissions)+len(d.Primary)+len(d.Reads))
	for _, p := range d.Permissions {
		out = append(out, Permission{Group: p.Group, Resource: p.Resource, Verbs: slices.Clone(p.Verbs)})
	}
	for _, r := range slices.Concat(d.Primary, d.Reads) {
		i := slices.IndexFunc(out, func(p Permission) bool { return p.Group == r.Group && p.Resource == r.Resource })
		if i < 0 {
			out = append(out, Permission{Group: r.Group, Resource: r.Resource})
			i = len(out) - 1
		}
		for _, v := range []string{"list", "watch"} {
			if !slices.Contains(out[i].Verbs, v) {
				out[i].Verbs = append(out[i].Verbs, v)
			}
		}
	}
	if d.Served != nil {
		need := d.Served.permission()
		i := slices.IndexFunc(out, func(p Permission) bool { return p.Group == "*" && p.Resource == "*" })
		if i < 0 {
			return append(out, need)
		}
		for _, v := range need.Verbs {
			if !slices.Contains(out[i].Verbs, v) {
				out[i].Verbs = append(out[i].Verbs, v)
			}
		}
	}
	return out
}

// QueueNameOrName is the name of the controller's Queue: QueueName, or Name.
func (d Descriptor) QueueNameOrName() string {
	if d.QueueName != "" {
		return d.QueueName
	}
	return d.Name
}

// EventComponent is the component name the controller's events carry: EventSource, or
// "<Name>-controller" as most of kube-controller-manager's controllers name it.
func (d Descriptor) EventComponent() string {
	if d.EventSource != "" {
		return d.EventSource
	}
	return d.Name + "-controller"
}

// Resources returns Primary and Reads, without duplicates.
func (d Descriptor) Resources() []Resource {
	var out []Resource
	for _, r := range slices.Concat(d.Primary, d.Reads) {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

func (d Descriptor) validate() error {
	var errs []error
	if d.Name == "" || d.New == nil {
		errs = append(errs, errors.New("a descriptor needs Name and New"))
	}
	switch {
	case d.FixedWorkers > 0 && (d.WorkersFlag != "" || d.DefaultWorkers != 0):
		errs = append(errs, errors.New("a descriptor with FixedWorkers has no WorkersFlag or DefaultWorkers"))
	case d.FixedWorkers == 0 && (d.WorkersFlag == "" || d.DefaultWorkers < 1):
		errs = append(errs, errors.New("a descriptor needs WorkersFlag and DefaultWorkers ≥ 1, or FixedWorkers ≥ 1"))
	}
	if d.ClientQPSScale < 0 || d.ClientBurstScale < 0 {
		errs = append(errs, fmt.Errorf("ClientQPSScale %v and ClientBurstScale %d must not be negative", d.ClientQPSScale, d.ClientBurstScale))
	}
	for _, p := range d.Permissions {
		if !WildcardAllowed(p.Group, p.Resource) || slices.Contains(p.Verbs, "*") {
			errs = append(errs, fmt.Errorf("permission %s/%s %v: a wildcard is only allowed as resource \"*\" (of one group, or of group \"*\") or as group \"*\" with \"*/<subresource>\", and never as a verb", p.Group, p.Resource, p.Verbs))
		}
	}
	if len(d.Primary) == 0 && d.Served == nil {
		errs = append(errs, errors.New("a descriptor's Primary must name the resources whose keys the controller's queue holds (only a controller of served resources, which refills its queues itself through Resyncer, may leave it empty)"))
	}
	if d.Served != nil {
		if err := d.Served.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	names := []string{d.Name, d.QueueNameOrName()}
	for _, q := range d.Queues {
		if q.Name == "" || slices.Contains(names, q.Name) {
			errs = append(errs, fmt.Errorf("queue %q: a queue needs a name of its own, not the controller's nor another queue's", q.Name))
		}
		names = append(names, q.Name)
		if len(q.Primary) == 0 && d.Served == nil {
			errs = append(errs, fmt.Errorf("queue %q: its Primary must name the resources whose keys it holds", q.Name))
		}
		for _, r := range q.Primary {
			if !slices.Contains(d.Resources(), r) {
				errs = append(errs, fmt.Errorf("queue %q: its primary %s must be declared in the descriptor's Primary or Reads", q.Name, r))
			}
		}
	}
	for _, r := range d.Resources() {
		if r.Resource == "" || r.Version == "" {
			errs = append(errs, fmt.Errorf("resource %q needs a version and a resource name", r))
		}
		if r.FieldSelector != "" {
			if _, err := fields.ParseSelector(r.FieldSelector); err != nil {
				errs = append(errs, fmt.Errorf("resource %s: %w", r, err))
			}
		}
	}
	for _, r := range d.Primary {
		if r.FieldSelector != "" {
			errs = append(errs, fmt.Errorf("primary %s: a field-selected resource is cached whole, so its keys could not be mapped to the shard's partitions: read it (Reads), and queue keys of another Primary", r))
		}
	}
	for _, q := range d.Queues {
		for _, r := range q.Primary {
			if r.FieldSelector != "" {
				errs = append(errs, fmt.Errorf("queue %q: primary %s: a field-selected resource cannot be a queue's primary", q.Name, r))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("controller descriptor %q: %w", d.Name, err)
	}
	return nil
}

// QueueSpec declares one of a controller's further queues (Descriptor.Queues).
type QueueSpec struct {
	// Name names the queue (its client-go workqueue metrics, its gate series, its
	// workers' logs), as kube-controller-manager names it where it has one (the job
	// controller's "job_orphan_pod"). It differs from every other queue's and the
	// controller's name.
	Name string
	// Primary are the resources whose objects' keys the queue holds (client-go's
	// MetaNamespaceKeyFunc keys, mapped to partitions as Descriptor.Primary's are); each
	// must also be among the descriptor's Primary or Reads. When the shard starts working a
	// namespace it adds the key of every cached object of them in it. Only a controller of
	// served resources (Descriptor.Served) may leave it empty: the queue then holds object
	// keys of any resource, and only the controller fills it.
	Primary []Resource
	// RateLimiter builds the queue's rate limiter (optional; nil is client-go's
	// DefaultTypedControllerRateLimiter).
	RateLimiter func() workqueue.TypedRateLimiter[string]
}

// WildcardAllowed reports whether a permission's group and resource use wildcards only
// as a controller may: none; resource "*" of a named group (every resource of it, as the
// HPA reads every custom.metrics.k8s.io metric, whose resources are the metrics' names);
// or group "*" with resource "*" (every resource) or with "*/<subresource>" (one
// subresource of every resource, as the disruption controller's "*/scale"), the
// subresource named.
func WildcardAllowed(group, resource string) bool {
	if resource == "*" {
		return true
	}
	if group != "*" {
		return !strings.Contains(resource, "*")
	}
	sub, ok := strings.CutPrefix(resource, "*/")
	return ok && sub != "" && !strings.Contains(sub, "*")
}

// Permission is one RBAC rule a controller needs: verbs on a resource (or a subresource,
// as "replicasets/status") of an API group ("" is the core group). Resource "*" of a named
// group is every resource of that group (the metrics APIs, whose resources are metric
// names). Group "*" with Resource "*" is every resource of every group, for a controller that acts on whatever
// the API server serves (the namespace controller deletes a namespace's contents, CRDs
// and aggregated APIs included), and with Resource "*/scale" one subresource of every
// resource (the disruption controller reads any controller's scale); verbs are always
// named.
type Permission struct {
	Group    string
	Resource string
	Verbs    []string
}

// Registry holds the known controllers and their worker counts.
type Registry struct {
	byName  map[string]Descriptor
	workers map[string]*int
}

// NewRegistry registers descriptors; a duplicate or incomplete one is an error.
func NewRegistry(ds ...Descriptor) (*Registry, error) {
	r := &Registry{byName: map[string]Descriptor{}, workers: map[string]*int{}}
	for _, d := range ds {
		if err := d.validate(); err != nil {
			return nil, err
		}
		for n := range r.byName {
			switch {
			case n == d.Name:
				return nil, fmt.Errorf("controller %q registered twice", d.Name)
			case SameController(n, d.Name):
				return nil, fmt.Errorf("controllers %q and %q are one kube-controller-manager controller, registered twice", n, d.Name)
			}
		}
		r.byName[d.Name] = d
		n := max(d.DefaultWorkers, d.FixedWorkers)
		r.workers[d.Name] = &n
	}
	return r, nil
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.byName))
	for n := range r.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// AddFlags registers every --concurrent-…-syncs flag and the controllers' own flags
// (controllers with FixedWorkers have no worker flag).
func (r *Registry) AddFlags(fs *pflag.FlagSet) {
	for _, n := range r.Names() {
		d := r.byName[n]
		if d.WorkersFlag != "" {
			fs.IntVar(r.workers[n], d.WorkersFlag, *r.workers[n], fmt.Sprintf(
				"number of %s objects synced concurrently: more is more responsive, and more CPU and API load", n))
		}
		if d.AddFlags != nil {
			d.AddFlags(fs)
		}
	}
}

// Validate checks the selection, the worker counts (componentopts.ValidateWorkers) and
// each controller's own flags (Descriptor.Validate), reporting every bad flag at once.
func (r *Registry) Validate(sel Selection) error {
	if err := sel.Validate(r.Names()); err != nil {
		return err
	}
	var errs []error
	for _, n := range r.Names() {
		d := r.byName[n]
		if d.WorkersFlag != "" {
			if err := componentopts.ValidateWorkers(d.WorkersFlag, *r.workers[n]); err != nil {
				errs = append(errs, err)
			}
		}
		if d.Validate != nil {
			if err := d.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("controller %s: %w", n, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Enabled returns the descriptors selected by sel, sorted by name.
func (r *Registry) Enabled(sel Selection) []Descriptor {
	var out []Descriptor
	for _, n := range r.Names() {
		if d := r.byName[n]; sel.Enabled(n, d.OnByDefault) {
			out = append(out, d)
		}
	}
	return out
}

// Descriptor returns the descriptor registered under name.
func (r *Registry) Descriptor(name string) (Descriptor, bool) {
	d, ok := r.byName[name]
	return d, ok
}

// Workers returns the configured worker count of a controller.
func (r *Registry) Workers(name string) int { return *r.workers[name] }
