package resourcequota

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

type pvcOpt func(*corev1.PersistentVolumeClaim)

// newPVC is a claim of namespace ns requesting storage (none if "").
func newPVC(name, storage string, opts ...pvcOpt) *corev1.PersistentVolumeClaim {
	p := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	if storage != "" {
		p.Spec.Resources.Requests = list("storage", storage)
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func class(c string) pvcOpt {
	return func(p *corev1.PersistentVolumeClaim) { p.Spec.StorageClassName = ptr.To(c) }
}

func betaClass(c string) pvcOpt {
	return func(p *corev1.PersistentVolumeClaim) {
		p.Annotations = map[string]string{"volume.beta.kubernetes.io/storage-class": c}
	}
}

func allocated(storage string) pvcOpt {
	return func(p *corev1.PersistentVolumeClaim) { p.Status.AllocatedResources = list("storage", storage) }
}

func vac(spec, current, target string) pvcOpt {
	return func(p *corev1.PersistentVolumeClaim) {
		if spec != "" {
			p.Spec.VolumeAttributesClassName = ptr.To(spec)
		}
		if current != "" {
			p.Status.CurrentVolumeAttributesClassName = ptr.To(current)
		}
		if target != "" {
			p.Status.ModifyVolumeStatus = &corev1.ModifyVolumeStatus{TargetVolumeAttributesClassName: target}
		}
	}
}

func TestPVCUsage(t *testing.T) {
	gold := "gold.storageclass.storage.k8s.io/"
	hard := list("persistentvolumeclaims", "10", "count/persistentvolumeclaims", "10", "requests.storage", "100Gi",
		gold+"persistentvolumeclaims", "10", gold+"requests.storage", "100Gi")
	for _, tc := range []usageCase{
		{name: "none", hard: hard, want: list("persistentvolumeclaims", "0", "count/persistentvolumeclaims", "0",
			"requests.storage", "0", gold+"persistentvolumeclaims", "0", gold+"requests.storage", "0")},
		{name: "claims and storage, of the class too", hard: hard,
			objs: []runtime.Object{newPVC("a", "1Gi", class("gold")), newPVC("b", "2Gi", class("silver")), newPVC("c", "")},
			want: list("persistentvolumeclaims", "3", "count/persistentvolumeclaims", "3", "requests.storage", "3Gi",
				gold+"persistentvolumeclaims", "1", gold+"requests.storage", "1Gi")},
		{name: "the beta annotation names the class first", hard: hard,
			objs: []runtime.Object{newPVC("a", "1Gi", class("silver"), betaClass("gold"))},
			want: list("persistentvolumeclaims", "1", "count/persistentvolumeclaims", "1", "requests.storage", "1Gi",
				gold+"persistentvolumeclaims", "1", gold+"requests.storage", "1Gi")},
		{name: "an allocation larger than the request counts", hard: list("requests.storage", "100Gi"),
			objs: []runtime.Object{newPVC("a", "1Gi", allocated("5Gi")), newPVC("b", "2Gi", allocated("1Gi"))},
			want: list("requests.storage", "7Gi")},
		{name: "storage is rounded up to a byte", hard: list("requests.storage", "100Gi"),
			objs: []runtime.Object{newPVC("a", "1500m")},
			want: list("requests.storage", "2")},
		{name: "VolumeAttributesClass scope: any class referred to", hard: list("persistentvolumeclaims", "10"),
			opts: []quotaOpt{selector(corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopeVolumeAttributesClass,
				Operator: corev1.ScopeSelectorOpIn, Values: []string{"fast"}})},
			objs: []runtime.Object{newPVC("spec", "1Gi", vac("fast", "", "")), newPVC("status", "1Gi", vac("slow", "fast", "")),
				newPVC("target", "1Gi", vac("slow", "slow", "fast")), newPVC("slow", "1Gi", vac("slow", "", "")), newPVC("none", "1Gi")},
			want: list("persistentvolumeclaims", "3")},
		{name: "VolumeAttributesClass Exists", hard: list("persistentvolumeclaims", "10"),
			opts: []quotaOpt{selector(corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopeVolumeAttributesClass,
				Operator: corev1.ScopeSelectorOpExists})},
			objs: []runtime.Object{newPVC("a", "1Gi", vac("fast", "", "")), newPVC("none", "1Gi")},
			want: list("persistentvolumeclaims", "1")},
		{name: "VolumeAttributesClass NotIn matches claims without a class", hard: list("persistentvolumeclaims", "10"),
			opts: []quotaOpt{selector(corev1.ScopedResourceSelectorRequirement{ScopeName: corev1.ResourceQuotaScopeVolumeAttributesClass,
				Operator: corev1.ScopeSelectorOpNotIn, Values: []string{"fast"}})},
			objs: []runtime.Object{newPVC("a", "1Gi", vac("fast", "", "")), newPVC("none", "1Gi"), newPVC("slow", "1Gi", vac("slow", "", ""))},
			want: list("persistentvolumeclaims", "2")},
		{name: "pod scopes select no claims", hard: list("persistentvolumeclaims", "10"),
			opts: []quotaOpt{scopes(corev1.ResourceQuotaScopeNotTerminating)},
			objs: []runtime.Object{newPVC("a", "1Gi")},
			want: list("persistentvolumeclaims", "0")},
	} {
		t.Run(tc.name, func(t *testing.T) { runUsage(t, tc) })
	}
}

func TestPVCUpdateReplenishes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, cur *corev1.PersistentVolumeClaim
		want     bool
	}{
		{name: "nothing quota sees changed", old: newPVC("a", "1Gi"), cur: newPVC("a", "1Gi", func(p *corev1.PersistentVolumeClaim) { p.Labels = map[string]string{"x": "y"} })},
		{name: "resized", old: newPVC("a", "1Gi"), cur: newPVC("a", "2Gi"), want: true},
		{name: "allocation changed", old: newPVC("a", "1Gi", allocated("1Gi")), cur: newPVC("a", "1Gi", allocated("2Gi")), want: true},
		{name: "allocation set, equal to the request", old: newPVC("a", "1Gi"), cur: newPVC("a", "1Gi", allocated("1Gi")), want: true},
		{name: "VolumeAttributesClass changed", old: newPVC("a", "1Gi", vac("a", "", "")), cur: newPVC("a", "1Gi", vac("a", "", "b")), want: true},
		{name: "same VolumeAttributesClasses", old: newPVC("a", "1Gi", vac("a", "", "")), cur: newPVC("a", "1Gi", vac("a", "a", ""))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			if got := f.ctrl.updateReplenishes(tc.old, tc.cur); got != tc.want {
				t.Errorf("replenishes %v, want %v", got, tc.want)
			}
		})
	}
}
