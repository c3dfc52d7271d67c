package statefulset

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// TestClaimOwnerRefs: for each policy and for a pod in and out of range, the references
// setClaimOwnerRefs writes, and that claimOwnerUpToDate accepts exactly them.
func TestClaimOwnerRefs(t *testing.T) {
	log, _ := ktesting.NewTestContext(t)
	tests := []struct {
		name                    string
		whenDeleted, whenScaled appsv1.PersistentVolumeClaimRetentionPolicyType
		scaledDown              bool
		want                    string // "", "set", "pod"
	}{
		{name: "retain/retain", whenDeleted: retain, whenScaled: retain, want: ""},
		{name: "retain/retain scaled down", whenDeleted: retain, whenScaled: retain, scaledDown: true, want: ""},
		{name: "whenDeleted Delete", whenDeleted: del, whenScaled: retain, want: "set"},
		{name: "whenDeleted Delete scaled down", whenDeleted: del, whenScaled: retain, scaledDown: true, want: "set"},
		{name: "whenScaled Delete", whenDeleted: retain, whenScaled: del, want: ""},
		{name: "whenScaled Delete scaled down", whenDeleted: retain, whenScaled: del, scaledDown: true, want: "pod"},
		{name: "both Delete", whenDeleted: del, whenScaled: del, want: "set"},
		{name: "both Delete scaled down", whenDeleted: del, whenScaled: del, scaledDown: true, want: "pod"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := newSet("web", 2, withClaims("data"), retention(tt.whenDeleted, tt.whenScaled))
			ordinal := 1
			if tt.scaledDown {
				ordinal = 3
			}
			pod := podAt(set, ordinal, "r")
			claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-web-1", Namespace: "ns",
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "keep", UID: "uid-keep"}}}}
			for _, start := range []string{"", "set", "pod"} {
				c := claim.DeepCopy()
				switch start {
				case "set":
					c.OwnerReferences = append(c.OwnerReferences, *metav1.NewControllerRef(set, controllerKind))
				case "pod":
					c.OwnerReferences = append(c.OwnerReferences, *metav1.NewControllerRef(pod, podKind))
				}
				if got := claimOwnerUpToDate(log, c, set, pod); got != (start == tt.want) {
					t.Errorf("from %q: up to date = %v", start, got)
				}
				setClaimOwnerRefs(log, c, set, pod)
				var got string
				for _, r := range c.OwnerReferences {
					switch r.UID {
					case set.UID:
						got = "set"
					case pod.UID:
						got = "pod"
					}
				}
				if got != tt.want || c.OwnerReferences[0].Name != "keep" {
					t.Errorf("from %q: refs %v, want %q and the foreign reference kept", start, c.OwnerReferences, tt.want)
				}
				if !claimOwnerUpToDate(log, c, set, pod) {
					t.Errorf("from %q: not up to date after setClaimOwnerRefs", start)
				}
			}
		})
	}
}

func TestClaimsLeftAlone(t *testing.T) {
	log, _ := ktesting.NewTestContext(t)
	set := newSet("web", 2, withClaims("data"), retention(del, del))
	pod := podAt(set, 1, "r")
	tests := []struct {
		name           string
		refs           []metav1.OwnerReference
		wantUpToDate   bool
		wantUnexpected bool
	}{
		{name: "an earlier set of the name", refs: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "old", Controller: ptr.To(true)}},
			wantUpToDate: true, wantUnexpected: true},
		{name: "another controller", refs: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Thing", Name: "x", UID: "x", Controller: ptr.To(true)}},
			wantUpToDate: true, wantUnexpected: true},
		{name: "another controller and ours", refs: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Thing", Name: "x", UID: "x", Controller: ptr.To(true)},
			*metav1.NewControllerRef(set, controllerKind)}, wantUnexpected: true},
		{name: "ours but not as controller", refs: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: set.UID}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-web-1", Namespace: "ns", OwnerReferences: tt.refs}}
			if got := claimOwnerUpToDate(log, c, set, pod); got != tt.wantUpToDate {
				t.Errorf("up to date = %v, want %v", got, tt.wantUpToDate)
			}
			if got := hasUnexpectedController(c, set, pod); got != tt.wantUnexpected {
				t.Errorf("unexpected controller = %v, want %v", got, tt.wantUnexpected)
			}
		})
	}
}
