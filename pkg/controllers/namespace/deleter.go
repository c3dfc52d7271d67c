package namespace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/discovery"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// finalizerEstimateSeconds is the wait assumed for content held by finalizers.
const finalizerEstimateSeconds = int64(15)

// podsGVR is deleted before every other resource.
var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

// contentRemainingError says that the namespace's content is being deleted but is not
// gone yet: estimate is the seconds it is expected to take.
type contentRemainingError struct{ estimate int64 }

func (e *contentRemainingError) Error() string {
	return fmt.Sprintf("some content remains in the namespace, estimate %d seconds before it is removed", e.estimate)
}

// discoverFunc returns the namespaced resources the API server serves, and what it could
// not discover (with the partial result, as client-go's discovery does).
type discoverFunc func() ([]*metav1.APIResourceList, error)

// deleter deletes namespaces' content and then the namespaces' finalizer.
type deleter struct {
	core     typedcorev1.CoreV1Interface
	metadata metadata.Interface
	discover discoverFunc
	// unsupported remembers the list and deletecollection operations a resource does not
	// support (from discovery at start, and from 405 and 404 answers since).
	unsupported *opCache
}

// newDeleter fills the operation cache from one discovery: a server that reports no
// resources at all is an error (upstream's controller exits then).
func newDeleter(log logr.Logger, core typedcorev1.CoreV1Interface, md metadata.Interface, discover discoverFunc) (*deleter, error) {
	d := &deleter{core: core, metadata: md, discover: discover, unsupported: &opCache{m: map[opKey]bool{}}}
	lists, err := discover()
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("namespace controller: unable to get all supported resources from server: %w", err))
	}
	if len(lists) == 0 {
		return nil, fmt.Errorf("namespace controller: unable to get any supported resources from the server: %v", err)
	}
	for _, rl := range lists {
		gv, err := schema.ParseGroupVersion(rl.GroupVersion)
		if err != nil {
			log.Error(err, "failed to parse GroupVersion, skipping", "groupVersion", rl.GroupVersion)
			continue
		}
		for _, r := range rl.APIResources {
			gvr := gv.WithResource(r.Name)
			for _, op := range []operation{opList, opDeleteCollection} {
				if !slices.Contains(r.Verbs, string(op)) {
					d.unsupported.set(opKey{op, gvr})
				}
			}
		}
	}
	return d, nil
}

// operation is a collection operation a resource may not support.
type operation string

const (
	opList             operation = "list"
	opDeleteCollection operation = "deletecollection"
)

type opKey struct {
	op  operation
	gvr schema.GroupVersionResource
}

// opCache remembers unsupported operations; it is shared by the workers.
type opCache struct {
	mu sync.RWMutex
	m  map[opKey]bool
}

func (c *opCache) supported(k opKey) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return !c.m[k]
}

func (c *opCache) set(k opKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[k] = true
}

// delete finishes the deletion of namespace name: the phase, the content, the conditions,
// then the finalizer. It returns a *contentRemainingError while content is going away.
func (d *deleter) delete(ctx context.Context, name string) error {
	ns, err := d.core.Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ns.DeletionTimestamp == nil {
		return nil
	}
	ns, err = d.updateWithRetry(ctx, ns, d.markTerminating)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ns.DeletionTimestamp.IsZero() || finalized(ns) {
		return nil
	}
	estimate, err := d.deleteAllContent(ctx, ns)
	if err != nil {
		return err
	}
	if estimate > 0 {
		return &contentRemainingError{estimate: estimate}
	}
	if _, err := d.updateWithRetry(ctx, ns, d.finalize); err != nil && !apierrors.IsNotFound(err) {
		// Not found: another controller with the same finalizer finished it.
		return err
	}
	return nil
}

// updateWithRetry applies fn to ns, reading the namespace again and retrying on a
// conflict; a namespace whose UID changed meanwhile (deleted and created again) is an
// error.
func (d *deleter) updateWithRetry(ctx context.Context, ns *corev1.Namespace, fn func(context.Context, *corev1.Namespace) (*corev1.Namespace, error)) (*corev1.Namespace, error) {
	latest := ns
	var out *corev1.Namespace
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		out, err = fn(ctx, latest)
		if !apierrors.IsConflict(err) {
			return err
		}
		fresh, getErr := d.core.Namespaces().Get(ctx, latest.Name, metav1.GetOptions{})
		if getErr != nil {
			return getErr
		}
		if fresh.UID != latest.UID {
			return errors.New("namespace uid has changed across retries")
		}
		latest = fresh
		return err
	})
	return out, err
}

// markTerminating sets the phase of a namespace being deleted to Terminating.
func (d *deleter) markTerminating(ctx context.Context, ns *corev1.Namespace) (*corev1.Namespace, error) {
	if ns.DeletionTimestamp.IsZero() || ns.Status.Phase == corev1.NamespaceTerminating {
		return ns, nil
	}
	ns = ns.DeepCopy()
	ns.Status.Phase = corev1.NamespaceTerminating
	return d.core.Namespaces().UpdateStatus(ctx, ns, metav1.UpdateOptions{})
}

// finalize removes the "kubernetes" finalizer from ns's spec through the finalize
// subresource; the other finalizers stay, sorted.
func (d *deleter) finalize(ctx context.Context, ns *corev1.Namespace) (*corev1.Namespace, error) {
	rest := sets.New[string]()
	for _, f := range ns.Spec.Finalizers {
		if f != corev1.FinalizerKubernetes {
			rest.Insert(string(f))
		}
	}
	out := &corev1.Namespace{ObjectMeta: ns.ObjectMeta, Spec: ns.Spec}
	out.Spec.Finalizers = make([]corev1.FinalizerName, 0, rest.Len())
	for _, f := range sets.List(rest) {
		out.Spec.Finalizers = append(out.Spec.Finalizers, corev1.FinalizerName(f))
	}
	got, err := d.core.Namespaces().Finalize(ctx, out, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return got, nil
	}
	return got, err
}

// remaining is what a resource (or all of them) left in a namespace.
type remaining struct {
	// estimate is how many more seconds to wait; zero means no estimate, not that the
	// content is gone.
	estimate int64
	// count is how many objects remain.
	count int
	// byFinalizer counts the remaining objects per finalizer they carry.
	byFinalizer map[string]int
}

// totals is what every resource left in a namespace.
type totals struct {
	byResource  map[schema.GroupVersionResource]int
	byFinalizer map[string]int
}

func (t *totals) add(gvr schema.GroupVersionResource, r remaining) {
	if r.count == 0 {
		return
	}
	t.byResource[gvr] = r.count
	for f, n := range r.byFinalizer {
		if n > 0 {
			t.byFinalizer[f] += n
		}
	}
}

// deleteAllContent deletes the content of every deletable namespaced resource, pods
// first, writes the namespace's deletion conditions, and returns the estimate of the
// seconds until the content is gone, with the errors of discovery and deletion. An
// unavailable group does not stop the others.
func (d *deleter) deleteAllContent(ctx context.Context, ns *corev1.Namespace) (int64, error) {
	log := klog.FromContext(ctx)
	deletedAt := *ns.DeletionTimestamp
	var errs []error
	conds := conditionUpdater{}
	lists, err := d.discover()
	if err != nil {
		// Not fatal: what was discovered is still deleted.
		errs = append(errs, err)
		conds.discoveryFailed(err)
	}
	deletable := discovery.FilteredBy(discovery.SupportsAllVerbs{Verbs: []string{"delete"}}, lists)
	gvrs, err := discovery.GroupVersionResources(deletable)
	if err != nil {
		errs = append(errs, err)
		conds.groupVersionFailed(err)
	}
	sum := totals{byResource: map[schema.GroupVersionResource]int{}, byFinalizer: map[string]int{}}
	estimate := int64(0)
	if _, ok := gvrs[podsGVR]; ok {
		r, err := d.deleteResource(ctx, podsGVR, ns.Name, deletedAt)
		if err != nil {
			errs = append(errs, fmt.Errorf("failed to delete pods for namespace: %s, err: %w", ns.Name, err))
			conds.contentFailed(err)
		}
		estimate = max(estimate, r.estimate)
		sum.add(podsGVR, r)
		if sum.byResource[podsGVR] > 0 {
			// The other resources wait for the pods, which may still use them.
			log.V(5).Info("pods remain, delaying the deletion of other resources")
			d.writeConditions(ctx, ns, &conds)
			return estimate, utilerrors.NewAggregate(errs)
		}
	}
	for gvr := range gvrs {
		if gvr == podsGVR {
			continue
		}
		r, err := d.deleteResource(ctx, gvr, ns.Name, deletedAt)
		if err != nil {
			errs = append(errs, err)
			conds.contentFailed(err)
		}
		estimate = max(estimate, r.estimate)
		sum.add(gvr, r)
	}
	conds.contentTotals(sum)
	// Always written when they changed: a failure condition that cleared must say so.
	d.writeConditions(ctx, ns, &conds)
	err = utilerrors.NewAggregate(errs)
	log.V(4).Info("deleted the namespace's content", "estimate", estimate, "err", err)
	return estimate, err
}

// writeConditions writes ns's status when its conditions changed; a failure is logged,
// not returned, as upstream does.
func (d *deleter) writeConditions(ctx context.Context, ns *corev1.Namespace, conds *conditionUpdater) {
	if !conds.update(ns) {
		return
	}
	if _, err := d.core.Namespaces().UpdateStatus(ctx, ns, metav1.UpdateOptions{}); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Couldn't update status condition for namespace", "namespace", ns.Name)
	}
}

// deleteResource deletes namespace's objects of gvr and reports what remains of them.
func (d *deleter) deleteResource(ctx context.Context, gvr schema.GroupVersionResource, namespace string, deletedAt metav1.Time) (remaining, error) {
	log := klog.FromContext(ctx).WithValues("resource", gvr)
	estimate, err := d.estimateGracefulTermination(ctx, gvr, namespace, deletedAt)
	if err != nil {
		log.V(5).Info("unable to estimate", "err", err)
		return remaining{}, err
	}
	supported, err := d.deleteCollection(ctx, gvr, namespace)
	if err != nil {
		return remaining{estimate: estimate}, err
	}
	if !supported {
		if err := d.deleteEachItem(ctx, gvr, namespace); err != nil {
			return remaining{estimate: estimate}, err
		}
	}
	left, supported, err := d.listCollection(ctx, gvr, namespace)
	if err != nil {
		log.V(5).Info("error verifying no items remain", "err", err)
		return remaining{estimate: estimate}, err
	}
	if !supported {
		return remaining{estimate: estimate}, nil
	}
	if len(left.Items) == 0 {
		return remaining{}, nil
	}
	byFinalizer := map[string]int{}
	for _, item := range left.Items {
		for _, f := range item.GetFinalizers() {
			byFinalizer[f]++
		}
	}
	r := remaining{estimate: estimate, count: len(left.Items), byFinalizer: byFinalizer}
	switch {
	case estimate != 0:
		return r, nil
	case len(byFinalizer) > 0:
		// Content held by finalizers is normal: give them time.
		r.estimate = finalizerEstimateSeconds
		return r, nil
	default:
		// Nothing explains why they are still there.
		r.byFinalizer = nil
		return r, fmt.Errorf("unexpected items still remain in namespace: %s for gvr: %v", namespace, gvr)
	}
}

// deleteCollection deletes namespace's objects of gvr at once; it returns false when the
// resource does not support it.
func (d *deleter) deleteCollection(ctx context.Context, gvr schema.GroupVersionResource, namespace string) (bool, error) {
	key := opKey{opDeleteCollection, gvr}
	if !d.unsupported.supported(key) {
		return false, nil
	}
	err := d.metadata.Resource(gvr).Namespace(namespace).DeleteCollection(ctx, backgroundDelete(), metav1.ListOptions{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsMethodNotSupported(err) || apierrors.IsNotFound(err):
		// Some resources answer a collection request with 404 rather than 405.
		return false, nil
	default:
		return true, err
	}
}

// listCollection lists namespace's objects of gvr; supported is false when the resource
// cannot be listed.
func (d *deleter) listCollection(ctx context.Context, gvr schema.GroupVersionResource, namespace string) (*metav1.PartialObjectMetadataList, bool, error) {
	if !d.unsupported.supported(opKey{opList, gvr}) {
		return nil, false, nil
	}
	list, err := d.metadata.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		return list, true, nil
	case apierrors.IsMethodNotSupported(err) || apierrors.IsNotFound(err):
		return nil, false, nil
	default:
		return nil, true, err
	}
}

// deleteEachItem lists namespace's objects of gvr and deletes them one by one.
func (d *deleter) deleteEachItem(ctx context.Context, gvr schema.GroupVersionResource, namespace string) error {
	list, supported, err := d.listCollection(ctx, gvr, namespace)
	if err != nil || !supported {
		return err
	}
	for _, item := range list.Items {
		err := d.metadata.Resource(gvr).Namespace(namespace).Delete(ctx, item.GetName(), backgroundDelete())
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsMethodNotSupported(err) {
			return err
		}
	}
	return nil
}

// estimateGracefulTermination estimates the seconds gvr's objects in namespace may take
// to go away once deleted: for pods, the longest grace period of a pod not yet finished,
// counted from the namespace's deletion; zero for everything else.
func (d *deleter) estimateGracefulTermination(ctx context.Context, gvr schema.GroupVersionResource, namespace string, deletedAt metav1.Time) (int64, error) {
	if gvr.GroupResource() != podsGVR.GroupResource() {
		return 0, nil
	}
	pods, err := d.core.Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	estimate := int64(0)
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if g := p.Spec.TerminationGracePeriodSeconds; g != nil && *g > estimate {
			estimate = *g
		}
	}
	if time.Since(deletedAt.Time) >= time.Duration(estimate)*time.Second {
		return 0, nil
	}
	return estimate, nil
}
