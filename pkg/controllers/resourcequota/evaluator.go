package resourcequota

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// evaluator computes the usage of one resource whose objects use more than a count (pods,
// services, PVCs). It is a quota.Evaluator so that quota.CalculateUsage sums it with the
// object-count evaluators; the controller uses only MatchingResources and UsageStats, the
// rest is what admission would use, answered as upstream's evaluators do.
type evaluator struct {
	gr schema.GroupResource
	// list lists the resource's objects of a namespace.
	list generic.ListFuncByNamespace
	// matching returns the resource names of its input that this resource's usage has.
	matching func([]corev1.ResourceName) []corev1.ResourceName
	// scope reports whether an object matches a quota scope (generic.MatchesNoScopeFunc
	// for a resource that scopes never select).
	scope generic.MatchesScopeFunc
	// usage is one object's usage.
	usage generic.UsageFunc
}

var _ quota.Evaluator = (*evaluator)(nil)

// GroupResource is the resource whose objects the evaluator reads.
func (e *evaluator) GroupResource() schema.GroupResource { return e.gr }

// MatchingResources returns the names of input that the resource's usage has: what
// decides which quotas a change of the resource replenishes.
func (e *evaluator) MatchingResources(input []corev1.ResourceName) []corev1.ResourceName {
	return e.matching(input)
}

// Usage is one object's usage.
func (e *evaluator) Usage(item runtime.Object) (corev1.ResourceList, error) { return e.usage(item) }

// UsageStats sums the usage of the namespace's objects that match every scope. As
// upstream, a scope that cannot be evaluated (an invalid selector) ends the sum early and
// returns what was summed so far without an error.
func (e *evaluator) UsageStats(options quota.UsageStatsOptions) (quota.UsageStats, error) {
	return generic.CalculateUsageStats(options, e.list, e.scope, e.usage)
}

// Matches is admission's: whether a quota covers an object.
func (e *evaluator) Matches(rq *corev1.ResourceQuota, item runtime.Object) (bool, error) {
	return generic.Matches(rq, item, e.matching, e.scope)
}

// Constraints is admission's: the controller never validates an object.
func (e *evaluator) Constraints([]corev1.ResourceName, runtime.Object) error { return nil }

// Handles is admission's: the controller never handles a request.
func (e *evaluator) Handles(admission.Attributes) bool { return false }

// MatchingScopes is admission's: the selectors an object matches.
func (e *evaluator) MatchingScopes(item runtime.Object, selectors []corev1.ScopedResourceSelectorRequirement) ([]corev1.ScopedResourceSelectorRequirement, error) {
	matched := []corev1.ScopedResourceSelectorRequirement{}
	for _, s := range selectors {
		ok, err := e.scope(s, item)
		if err != nil {
			return []corev1.ScopedResourceSelectorRequirement{}, fmt.Errorf("error on matching scope %v: %w", s, err)
		}
		if ok {
			matched = append(matched, s)
		}
	}
	return matched, nil
}

// UncoveredQuotaScopes is admission's: the limited scopes no matched scope covers.
func (e *evaluator) UncoveredQuotaScopes(limited, matched []corev1.ScopedResourceSelectorRequirement) ([]corev1.ScopedResourceSelectorRequirement, error) {
	uncovered := []corev1.ScopedResourceSelectorRequirement{}
	for _, l := range limited {
		covered := false
		for _, m := range matched {
			if m.ScopeName == l.ScopeName {
				covered = true
				break
			}
		}
		if !covered {
			uncovered = append(uncovered, l)
		}
	}
	return uncovered, nil
}

// listIndexer lists a namespace's objects from an informer's cache.
func listIndexer(idx toolscache.Indexer) generic.ListFuncByNamespace {
	return func(namespace string) ([]runtime.Object, error) {
		var out []runtime.Object
		err := toolscache.ListAllByNamespace(idx, namespace, labels.Everything(), func(obj any) {
			if o, ok := obj.(runtime.Object); ok {
				out = append(out, o)
			}
		})
		return out, err
	}
}

// newRegistry returns the evaluators the controller always has: pods, services, PVCs and
// ResourceClaims on their typed informers, and the object counts with a legacy name (configmaps, secrets,
// replicationcontrollers, resourcequotas), which count through the served informer of
// their resource once the shard hands it over, and fail until then. Every other served
// resource gets an object-count evaluator when handed over (Added).
func (c *Controller) newRegistry(podInf, svcInf, pvcInf, claimInf, classInf toolscache.SharedIndexInformer) quota.Registry {
	evals := []quota.Evaluator{
		newPodEvaluator(listIndexer(podInf.GetIndexer()), c.clock),
		newServiceEvaluator(listIndexer(svcInf.GetIndexer())),
		newPVCEvaluator(listIndexer(pvcInf.GetIndexer())),
		newClaimEvaluator(claimInf, classInf, corelisters.NewPodLister(podInf.GetIndexer()), c.clock),
	}
	for gr, alias := range legacyCountNames {
		evals = append(evals, generic.NewObjectCountEvaluator(gr, c.listServed(gr), alias))
	}
	return generic.NewRegistry(evals)
}
