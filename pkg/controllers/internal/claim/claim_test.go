package claim

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

var rsKind = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}

func owner(deleting bool) *metav1.ObjectMeta {
	m := &metav1.ObjectMeta{Namespace: "ns", Name: "rs", UID: "rs-uid"}
	if deleting {
		now := metav1.Now()
		m.DeletionTimestamp = &now
	}
	return m
}

func pod(name string, lbls map[string]string, controller types.UID, deleting bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name + "-uid"), Labels: lbls}}
	if controller != "" {
		isTrue := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "x", UID: controller, Controller: &isTrue}}
	}
	if deleting {
		now := metav1.Now()
		p.DeletionTimestamp = &now
	}
	return p
}

func TestClaim(t *testing.T) {
	match := map[string]string{"app": "a"}
	other := map[string]string{"app": "b"}
	tests := []struct {
		name        string
		owner       *metav1.ObjectMeta
		fresh       *metav1.ObjectMeta
		pods        []*corev1.Pod
		patchErr    error
		filter      func(*corev1.Pod) bool
		wantOwned   []string
		wantPatches map[string]string // pod name → "adopt" | "release"
		wantErr     bool
	}{
		{name: "owned and matching is kept", owner: owner(false), pods: []*corev1.Pod{pod("p", match, "rs-uid", false)}, wantOwned: []string{"p"}},
		{name: "orphan matching is adopted", owner: owner(false), pods: []*corev1.Pod{pod("p", match, "", false)},
			wantOwned: []string{"p"}, wantPatches: map[string]string{"p": "adopt"}},
		{name: "orphan not matching is ignored", owner: owner(false), pods: []*corev1.Pod{pod("p", other, "", false)}},
		{name: "someone else's is never touched", owner: owner(false), pods: []*corev1.Pod{pod("p", match, "other-uid", false)}},
		{name: "owned but not matching is released", owner: owner(false), pods: []*corev1.Pod{pod("p", other, "rs-uid", false)},
			wantPatches: map[string]string{"p": "release"}},
		{name: "owner being deleted neither adopts nor releases", owner: owner(true),
			pods: []*corev1.Pod{pod("a", match, "", false), pod("b", other, "rs-uid", false), pod("c", match, "rs-uid", false)}, wantOwned: []string{"c"}},
		{name: "orphan being deleted is not adopted", owner: owner(false), pods: []*corev1.Pod{pod("p", match, "", true)}},
		{name: "fresh owner with another UID adopts nothing", owner: owner(false), fresh: &metav1.ObjectMeta{Namespace: "ns", Name: "rs", UID: "new"},
			pods: []*corev1.Pod{pod("p", match, "", false)}, wantErr: true},
		{name: "fresh owner being deleted adopts nothing", owner: owner(false), fresh: owner(true),
			pods: []*corev1.Pod{pod("p", match, "", false)}, wantErr: true},
		{name: "adopting a vanished pod is not an error", owner: owner(false), pods: []*corev1.Pod{pod("p", match, "", false)},
			patchErr: apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p"), wantPatches: map[string]string{"p": "adopt"}},
		{name: "a failed adoption is an error and the pod is not owned", owner: owner(false), pods: []*corev1.Pod{pod("p", match, "", false), pod("q", match, "rs-uid", false)},
			patchErr: errors.New("boom"), wantOwned: []string{"q"}, wantPatches: map[string]string{"p": "adopt"}, wantErr: true},
		{name: "release of a replaced pod is not an error", owner: owner(false), pods: []*corev1.Pod{pod("p", other, "rs-uid", false)},
			patchErr: apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", nil), wantPatches: map[string]string{"p": "release"}},
		{name: "an orphan the filter refuses is not adopted", owner: owner(false), filter: func(p *corev1.Pod) bool { return p.Name != "p" },
			pods: []*corev1.Pod{pod("p", match, "", false), pod("q", match, "", false)}, wantOwned: []string{"q"}, wantPatches: map[string]string{"q": "adopt"}},
		{name: "an owned pod the filter refuses is released", owner: owner(false), filter: func(p *corev1.Pod) bool { return p.Name != "p" },
			pods: []*corev1.Pod{pod("p", match, "rs-uid", false)}, wantPatches: map[string]string{"p": "release"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			patches := map[string]string{}
			fresh := tt.fresh
			if fresh == nil {
				fresh = tt.owner
			}
			m := &Manager[*corev1.Pod]{
				Controller: tt.owner, Kind: rsKind, Selector: labels.SelectorFromSet(match), Filter: tt.filter,
				Fresh: func(context.Context) (metav1.Object, error) { return fresh, nil },
				Patch: func(_ context.Context, name string, patch []byte) error {
					var p struct {
						Metadata struct {
							OwnerReferences []map[string]any `json:"ownerReferences"`
							UID             string           `json:"uid"`
						} `json:"metadata"`
					}
					if err := json.Unmarshal(patch, &p); err != nil {
						t.Fatal(err)
					}
					if p.Metadata.UID != name+"-uid" {
						t.Errorf("patch of %s has uid precondition %q", name, p.Metadata.UID)
					}
					ref := p.Metadata.OwnerReferences[0]
					if ref["uid"] != "rs-uid" {
						t.Errorf("patch of %s names owner %v", name, ref["uid"])
					}
					if ref["$patch"] == "delete" {
						patches[name] = "release"
					} else {
						if ref["controller"] != true || ref["blockOwnerDeletion"] != true || ref["kind"] != "ReplicaSet" || ref["apiVersion"] != "apps/v1" {
							t.Errorf("adoption ref %v", ref)
						}
						patches[name] = "adopt"
					}
					return tt.patchErr
				},
			}
			owned, err := m.Claim(context.Background(), tt.pods)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			var names []string
			for _, p := range owned {
				names = append(names, p.Name)
			}
			if len(names) != len(tt.wantOwned) {
				t.Fatalf("owned %v, want %v", names, tt.wantOwned)
			}
			for i := range names {
				if names[i] != tt.wantOwned[i] {
					t.Fatalf("owned %v, want %v", names, tt.wantOwned)
				}
			}
			if len(patches) != len(tt.wantPatches) {
				t.Fatalf("patches %v, want %v", patches, tt.wantPatches)
			}
			for k, v := range tt.wantPatches {
				if patches[k] != v {
					t.Fatalf("patches %v, want %v", patches, tt.wantPatches)
				}
			}
		})
	}
}

// TestClaimFinalizers: an owner with Finalizers adds them with the adoption and removes
// them with the release (the Job controller's tracking finalizer).
func TestClaimFinalizers(t *testing.T) {
	match := map[string]string{"app": "a"}
	got := map[string]map[string]any{}
	m := &Manager[*corev1.Pod]{
		Controller: owner(false), Kind: rsKind, Selector: labels.SelectorFromSet(match),
		Finalizers: []string{"batch.kubernetes.io/job-tracking"},
		Fresh:      func(context.Context) (metav1.Object, error) { return owner(false), nil },
		Patch: func(_ context.Context, name string, patch []byte) error {
			var p map[string]map[string]any
			if err := json.Unmarshal(patch, &p); err != nil {
				return err
			}
			got[name] = p["metadata"]
			return nil
		},
	}
	if _, err := m.Claim(context.Background(), []*corev1.Pod{pod("adopt", match, "", false), pod("release", map[string]string{"app": "b"}, "rs-uid", false)}); err != nil {
		t.Fatal(err)
	}
	if f, ok := got["adopt"]["finalizers"].([]any); !ok || len(f) != 1 || f[0] != "batch.kubernetes.io/job-tracking" {
		t.Errorf("adoption patch %v", got["adopt"])
	}
	if f, ok := got["release"]["$deleteFromPrimitiveList/finalizers"].([]any); !ok || len(f) != 1 || f[0] != "batch.kubernetes.io/job-tracking" {
		t.Errorf("release patch %v", got["release"])
	}
}
