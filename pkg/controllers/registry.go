package controllers

import (
	"context"
	"fmt"
	"sort"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	batchinformers "k8s.io/client-go/informers/batch/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

// Informers are the shard's filtered informers (pkg/sharding/cache implements it). Ask
// for informers in the controller's constructor: the shard starts them after every
// controller was built.
type Informers interface {
	Pods() coreinformers.PodInformer
	ConfigMaps() coreinformers.ConfigMapInformer
	Secrets() coreinformers.SecretInformer
	ServiceAccounts() coreinformers.ServiceAccountInformer
	Namespaces() coreinformers.NamespaceInformer
	ReplicaSets() appsinformers.ReplicaSetInformer
	Deployments() appsinformers.DeploymentInformer
	ControllerRevisions() appsinformers.ControllerRevisionInformer
	Jobs() batchinformers.JobInformer
	CronJobs() batchinformers.CronJobInformer
}

// Context is what a controller gets from the shard runtime.
type Context struct {
	// Client is a clientset whose user agent names the controller.
	Client kubernetes.Interface
	// Informers are filtered to the shard's partitions.
	Informers Informers
	// NewQueue returns a named, rate-limited work queue that admits only keys of
	// acquired partitions (named queues get client-go workqueue metrics).
	NewQueue func(name string) workqueue.TypedRateLimitingInterface[string]
	// Recorder records Kubernetes events as the controller's component.
	Recorder record.EventRecorder
	// Shard is this shard's ID, for logs only.
	Shard string
	// Logger is the controller's logger (keys controller and shard set).
	Logger logr.Logger
	// Metrics records reconciles, errors and durations per controller.
	Metrics *ReconcileMetrics
	// WriteAllowed fails while the shard must not change anything (its lease ran out).
	// Client's API writes are already checked by its transport; a controller with
	// effects outside the API must call it right before each.
	WriteAllowed func() error
}

// Controller is a running controller.
type Controller interface {
	// Run runs workers until ctx ends.
	Run(ctx context.Context, workers int)
	// EnqueueNamespace queues every object of namespace this controller reconciles. The
	// runtime calls it when the namespace's partition is acquired, because adds made
	// while it was not acquired were dropped.
	EnqueueNamespace(namespace string)
}

// Descriptor registers one controller.
type Descriptor struct {
	// Name is kube-controller-manager's name for the controller.
	Name string
	// OnByDefault says whether "*" enables it.
	OnByDefault bool
	// WorkersFlag is kube-controller-manager's --concurrent-…-syncs flag name.
	WorkersFlag    string
	DefaultWorkers int
	// AddFlags registers controller-specific flags (optional).
	AddFlags func(fs *pflag.FlagSet)
	// Permissions are the API permissions the controller needs, cluster-wide. The shard
	// checks them at start (a missing one is a clear startup error, not a stream of
	// 403s), and the Helm chart's ClusterRole grants exactly these for the enabled
	// controllers (a test keeps the two equal).
	Permissions []Permission
	// New builds the controller.
	New func(ctx Context) (Controller, error)
}

// Permission is one RBAC rule a controller needs: verbs on a resource (or a subresource,
// as "replicasets/status") of an API group ("" is the core group).
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
		if d.Name == "" || d.New == nil || d.WorkersFlag == "" || d.DefaultWorkers < 1 {
			return nil, fmt.Errorf("controller descriptor %q is incomplete", d.Name)
		}
		if _, dup := r.byName[d.Name]; dup {
			return nil, fmt.Errorf("controller %q registered twice", d.Name)
		}
		r.byName[d.Name] = d
		n := d.DefaultWorkers
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

// AddFlags registers every --concurrent-…-syncs flag and the controllers' own flags.
func (r *Registry) AddFlags(fs *pflag.FlagSet) {
	for _, n := range r.Names() {
		d := r.byName[n]
		fs.IntVar(r.workers[n], d.WorkersFlag, *r.workers[n], fmt.Sprintf(
			"number of %s objects synced concurrently: more is more responsive, and more CPU and API load", n))
		if d.AddFlags != nil {
			d.AddFlags(fs)
		}
	}
}

// Validate checks the selection and the worker counts.
func (r *Registry) Validate(sel Selection) error {
	if err := sel.Validate(r.Names()); err != nil {
		return err
	}
	for _, n := range r.Names() {
		if w := *r.workers[n]; w < 1 {
			return fmt.Errorf("--%s=%d: must be at least 1", r.byName[n].WorkersFlag, w)
		}
	}
	return nil
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

// Workers returns the configured worker count of a controller.
func (r *Registry) Workers(name string) int { return *r.workers[name] }
