package resourcequota

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// claimCountName is the object count of ResourceClaims.
var claimCountName = generic.ObjectCountQuotaResourceNameFor(claims.GroupResource())

// claimOwnerIndex indexes the extended-resource claims the scheduler made for a pod by
// "<namespace>/<pod UID>".
const claimOwnerIndex = "kshard.io/resourcequota-extended-resource-claim-pod"

// addClaimOwnerIndex adds claimOwnerIndex to the ResourceClaim informer, once.
func addClaimOwnerIndex(inf toolscache.SharedIndexInformer) error {
	if _, ok := inf.GetIndexer().GetIndexers()[claimOwnerIndex]; ok {
		return nil
	}
	return inf.AddIndexers(toolscache.Indexers{claimOwnerIndex: func(obj any) ([]string, error) {
		claim, ok := obj.(*resourceapi.ResourceClaim)
		if !ok {
			return nil, nil
		}
		if ref := extendedResourceClaimOwner(claim); ref != nil {
			return []string{claim.Namespace + "/" + string(ref.UID)}, nil
		}
		return nil, nil
	}})
}

// extendedResourceClaimOwner is the pod that controls a claim the scheduler made for the
// pod's extended resources backed by a device class, or nil for any other claim.
func extendedResourceClaimOwner(claim *resourceapi.ResourceClaim) *metav1.OwnerReference {
	if claim.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" {
		return nil
	}
	ref := metav1.GetControllerOfNoCopy(claim)
	if ref == nil || ref.Kind != "Pod" || ref.APIVersion != "v1" {
		return nil
	}
	return ref
}

// deviceClassMapping answers which extended resources device classes provide, from the
// DeviceClass cache (cluster-scoped: every shard has all of them).
type deviceClassMapping struct {
	lister resourcelisters.DeviceClassLister
}

// extendedResource is the extended resource name a device class provides, "" if none.
func (m deviceClassMapping) extendedResource(class string) string {
	dc, err := m.lister.Get(class)
	if err != nil {
		return ""
	}
	return ptr.Deref(dc.Spec.ExtendedResourceName, "")
}

// provided reports whether some device class provides an extended resource: its implicit
// name ("deviceclass.resource.kubernetes.io/<class>") or the one it names.
func (m deviceClassMapping) provided(name corev1.ResourceName) bool {
	if class, ok := strings.CutPrefix(string(name), resourceapi.ResourceDeviceClassPrefix); ok {
		if _, err := m.lister.Get(class); err == nil {
			return true
		}
	}
	dcs, err := m.lister.List(labels.Everything())
	if err != nil {
		return false
	}
	for _, dc := range dcs {
		if ptr.Deref(dc.Spec.ExtendedResourceName, "") == string(name) {
			return true
		}
	}
	return false
}

// claimEvaluator computes ResourceClaims' usage: their count, the devices they request per
// device class, and (DRAExtendedResource, GA in 1.37) the extended resources those devices
// provide, less what the pod a claim was made for already counts of them.
type claimEvaluator struct {
	classes deviceClassMapping
	pods    corelisters.PodLister
	claims  toolscache.Indexer
	clock   clock.PassiveClock
}

func newClaimEvaluator(claimInf, classInf toolscache.SharedIndexInformer, podLister corelisters.PodLister, clk clock.PassiveClock) *evaluator {
	ce := &claimEvaluator{
		classes: deviceClassMapping{lister: resourcelisters.NewDeviceClassLister(classInf.GetIndexer())},
		pods:    podLister,
		claims:  claimInf.GetIndexer(),
		clock:   clk,
	}
	return &evaluator{
		gr:       claims.GroupResource(),
		list:     listIndexer(claimInf.GetIndexer()),
		scope:    generic.MatchesNoScopeFunc,
		matching: ce.matching,
		usage:    ce.usage,
	}
}

// matching returns the claims' resource names of input: the count, devices per class, and
// the requests of extended resources a device class provides.
func (ce *claimEvaluator) matching(input []corev1.ResourceName) []corev1.ResourceName {
	out := []corev1.ResourceName{}
	for _, name := range input {
		if name == claimCountName || strings.HasSuffix(string(name), corev1.ResourceClaimsPerClass) {
			out = append(out, name)
			continue
		}
		if class, ok := strings.CutPrefix(string(name), corev1.ResourceImplicitExtendedClaimsPerClass); ok &&
			ce.classes.extendedResource(class) != "" {
			out = append(out, name)
			continue
		}
		if isExtendedQuotaName(name) &&
			ce.classes.provided(corev1.ResourceName(strings.TrimPrefix(string(name), corev1.DefaultResourceRequestsPrefix))) {
			out = append(out, name)
		}
	}
	return out
}

// devicesOf is the per-class quota name of a claim's devices.
func devicesOf(class string) corev1.ResourceName {
	return corev1.ResourceName(class + corev1.ResourceClaimsPerClass)
}

// requestedDevices is how many devices a request of mode and count asks for (all: the
// most an allocation can hold).
func requestedDevices(mode resourceapi.DeviceAllocationMode, count int64) int64 {
	switch mode {
	case resourceapi.DeviceAllocationModeExactCount:
		return count
	case resourceapi.DeviceAllocationModeAll:
		return resourceapi.AllocationResultsMaxSize
	}
	return 0
}

// usage is a claim's usage: one claim; per device class the devices it requests (of a
// request with alternatives, the most any alternative of that class asks for); and the
// extended resources those classes provide.
func (ce *claimEvaluator) usage(obj runtime.Object) (corev1.ResourceList, error) {
	claim, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return corev1.ResourceList{}, fmt.Errorf("expect *v1.ResourceClaim, got %T", obj)
	}
	out := corev1.ResourceList{claimCountName: *resource.NewQuantity(1, resource.DecimalSI)}
	add := func(name corev1.ResourceName, n int64) {
		q := out[name]
		q.Add(*resource.NewQuantity(n, resource.DecimalSI))
		out[name] = q
	}
	for _, req := range claim.Spec.Devices.Requests {
		switch {
		case len(req.FirstAvailable) > 0:
			most := map[corev1.ResourceName]int64{}
			for _, sub := range req.FirstAvailable {
				name := devicesOf(sub.DeviceClassName)
				if n := requestedDevices(sub.AllocationMode, sub.Count); n > most[name] {
					most[name] = n
				}
			}
			for name, n := range most {
				add(name, n)
			}
		case req.Exactly != nil:
			add(devicesOf(req.Exactly.DeviceClassName), requestedDevices(req.Exactly.AllocationMode, req.Exactly.Count))
		}
	}
	ce.addExtendedResources(out, ce.podUsage(claim))
	return out, nil
}

// addExtendedResources adds, for every device class the claim uses devices of, the
// class's implicit extended resource and the one it names, as many as the devices, less
// what the pod the claim was made for counts of them itself (podUsage; nil for a claim not
// made for a pod's extended resources). Only positive amounts are added.
func (ce *claimEvaluator) addExtendedResources(usage, podUsage corev1.ResourceList) {
	ext := map[corev1.ResourceName]resource.Quantity{}
	for name, q := range usage {
		class, ok := strings.CutSuffix(string(name), corev1.ResourceClaimsPerClass)
		if !ok || class == "" {
			continue
		}
		ext[corev1.ResourceName(corev1.ResourceImplicitExtendedClaimsPerClass+class)] = q
		if er := ce.classes.extendedResource(class); er != "" {
			ext[corev1.ResourceName(corev1.DefaultResourceRequestsPrefix+er)] = q
		}
	}
	for name, q := range ext {
		q = q.DeepCopy()
		if p, ok := podUsage[name]; ok {
			q.Sub(p)
		}
		if q.Sign() > 0 {
			usage[name] = q
		}
	}
}

// podUsage is the usage of the pod a claim was made for by the scheduler (for the pod's
// extended resources backed by devices), so that the claim does not count them twice; nil
// when the claim is not such a claim, its pod is gone or another pod of that name, or the
// claim is not the pod's (the pod names another; or, before it names one, an older claim
// of the pod is).
func (ce *claimEvaluator) podUsage(claim *resourceapi.ResourceClaim) corev1.ResourceList {
	ref := extendedResourceClaimOwner(claim)
	if ref == nil {
		return nil
	}
	pod, err := ce.pods.Pods(claim.Namespace).Get(ref.Name)
	if err != nil || pod.UID != ref.UID {
		return nil
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		if st.ResourceClaimName != claim.Name {
			return nil
		}
	} else if ce.olderClaimOf(claim, pod.UID) {
		return nil
	}
	usage, err := podUsage(pod, ce.clock)
	if err != nil {
		return nil
	}
	return usage
}

// olderClaimOf reports whether the pod has an extended-resource claim created before this
// one (or at the same time, with a smaller name), or whether its claims cannot be told.
func (ce *claimEvaluator) olderClaimOf(claim *resourceapi.ResourceClaim, pod types.UID) bool {
	objs, err := ce.claims.ByIndex(claimOwnerIndex, claim.Namespace+"/"+string(pod))
	if err != nil {
		return true
	}
	for _, o := range objs {
		other, ok := o.(*resourceapi.ResourceClaim)
		if !ok {
			return true
		}
		switch other.CreationTimestamp.Time.Compare(claim.CreationTimestamp.Time) {
		case -1:
			return true
		case 0:
			if other.Name < claim.Name {
				return true
			}
		}
	}
	return false
}
