package resourcequota

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	volumehelpers "k8s.io/component-helpers/storage/volume"
)

// pvcCountName is the object count of PVCs.
var pvcCountName = generic.ObjectCountQuotaResourceNameFor(pvcs.GroupResource())

// pvcResourceNames are a PVC's usage names that may also be per storage class.
var pvcResourceNames = []corev1.ResourceName{corev1.ResourcePersistentVolumeClaims, corev1.ResourceRequestsStorage}

// storageClassSuffix joins a storage class name and a resource name into a per-class
// quota name ("gold.storageclass.storage.k8s.io/requests.storage").
const storageClassSuffix = ".storageclass.storage.k8s.io/"

func newPVCEvaluator(list generic.ListFuncByNamespace) *evaluator {
	return &evaluator{
		gr:    pvcs.GroupResource(),
		list:  list,
		scope: pvcMatchesScope,
		matching: func(input []corev1.ResourceName) []corev1.ResourceName {
			out := []corev1.ResourceName{}
			for _, name := range input {
				if name == pvcCountName || quota.Contains(pvcResourceNames, name) {
					out = append(out, name)
					continue
				}
				for _, r := range pvcResourceNames {
					if strings.HasSuffix(string(name), storageClassSuffix+string(r)) {
						out = append(out, name)
						break
					}
				}
			}
			return out
		},
		usage: pvcUsage,
	}
}

// byStorageClass is the per-class quota name of a PVC resource.
func byStorageClass(class string, name corev1.ResourceName) corev1.ResourceName {
	return corev1.ResourceName(class + storageClassSuffix + string(name))
}

// pvcUsage is a PVC's usage: it counts as a claim, of its storage class too, and uses the
// storage it requests (or was allocated, if more), rounded up to a whole byte.
func pvcUsage(obj runtime.Object) (corev1.ResourceList, error) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return corev1.ResourceList{}, fmt.Errorf("expect *v1.PersistentVolumeClaim, got %T", obj)
	}
	one := *resource.NewQuantity(1, resource.DecimalSI)
	out := corev1.ResourceList{corev1.ResourcePersistentVolumeClaims: one, pvcCountName: one}
	class := volumehelpers.GetPersistentVolumeClaimClass(pvc)
	if class != "" {
		out[byStorageClass(class, corev1.ResourcePersistentVolumeClaims)] = one
	}
	if storage := pvcStorage(pvc); storage != nil {
		out[corev1.ResourceRequestsStorage] = *storage
		if class != "" {
			out[byStorageClass(class, corev1.ResourceRequestsStorage)] = *storage
		}
	}
	return out, nil
}

// pvcStorage is the storage a PVC uses: its request, or its allocation where that is
// larger (a failed expansion being recovered), rounded up; nil without a request.
func pvcStorage(pvc *corev1.PersistentVolumeClaim) *resource.Quantity {
	req, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return nil
	}
	out := roundUp(req)
	if alloc, ok := pvc.Status.AllocatedResources[corev1.ResourceStorage]; ok && alloc.Cmp(out) > 0 {
		out = roundUp(alloc)
	}
	return &out
}

// roundUp rounds q up to a whole unit (byte).
func roundUp(q resource.Quantity) resource.Quantity {
	r := q.DeepCopy()
	r.RoundUp(0)
	return r
}

// pvcUpdateReplenishes reports whether a PVC's update may change what quotas count: the
// storage it uses changed (a resize, or its allocation), or the VolumeAttributesClasses it
// refers to.
func pvcUpdateReplenishes(old, cur *corev1.PersistentVolumeClaim) bool {
	o, c := pvcStorage(old), pvcStorage(cur)
	if (o == nil) != (c == nil) || o != nil && o.Cmp(*c) != 0 {
		return true
	}
	if !storageQuantityEqual(old.Status.AllocatedResources, cur.Status.AllocatedResources) {
		return true
	}
	return !volumeAttributesClasses(old).Equal(volumeAttributesClasses(cur))
}

// storageQuantityEqual reports whether two resource lists have the same storage.
func storageQuantityEqual(a, b corev1.ResourceList) bool {
	qa, oka := a[corev1.ResourceStorage]
	qb, okb := b[corev1.ResourceStorage]
	return oka == okb && qa.Cmp(qb) == 0
}
