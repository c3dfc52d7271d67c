package history

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

var (
	kind   = appsv1.SchemeGroupVersion.WithKind("StatefulSet")
	parent = &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-web"}}
)

func revision(name string, owner metav1.Object, data string, lbls map[string]string) *appsv1.ControllerRevision {
	r := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
		Labels: lbls}, Data: runtime.RawExtension{Raw: []byte(`{"d":"` + data + `"}`)}}
	if owner != nil {
		r.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, kind)}
	}
	return r
}

func newHistory(t *testing.T, objs ...runtime.Object) (*History, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objs...)
	inf := informers.NewSharedInformerFactory(client, 0).Apps().V1().ControllerRevisions().Informer()
	if err := AddControllerIndex(inf); err != nil {
		t.Fatal(err)
	}
	if err := AddControllerIndex(inf); err != nil {
		t.Fatalf("a second AddControllerIndex: %v", err)
	}
	for _, o := range objs {
		if err := inf.GetIndexer().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return &History{Client: client, Indexer: inf.GetIndexer()}, client
}

func TestList(t *testing.T) {
	other := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "uid-db"}}
	web := map[string]string{"app": "web"}
	h, _ := newHistory(t,
		revision("web-1", parent, "a", web),
		revision("orphan", nil, "b", web),
		revision("orphan-unselected", nil, "c", map[string]string{"app": "db"}),
		revision("db-1", other, "d", web),
	)
	got, err := h.List(parent, kind, labels.SelectorFromSet(web))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, r := range got {
		names[r.Name] = true
	}
	if len(got) != 2 || !names["web-1"] || !names["orphan"] {
		t.Errorf("List = %v, want web-1 and orphan", names)
	}
}

func TestCreateCollision(t *testing.T) {
	// The fake API server stores only JSON data.
	rev := New(parent, kind, nil, runtime.RawExtension{Raw: []byte(`{"d":"abc"}`)}, 1, ptr.To[int32](0))
	taken := rev.DeepCopy()
	taken.Namespace = "ns"
	taken.Data.Raw = []byte(`{"d":"other"}`)
	name0, name1 := Name("web", Hash(rev, ptr.To[int32](0))), Name("web", Hash(rev, ptr.To[int32](1)))
	tests := []struct {
		name          string
		existing      []runtime.Object
		wantName      string
		wantCollision int32
		wantRaw       string
	}{
		{name: "free name", wantName: name0, wantRaw: `{"d":"abc"}`},
		{name: "same data exists", existing: []runtime.Object{func() runtime.Object { r := rev.DeepCopy(); r.Namespace = "ns"; return r }()},
			wantName: name0, wantRaw: `{"d":"abc"}`},
		{name: "name taken by other data", existing: []runtime.Object{taken}, wantName: name1, wantCollision: 1, wantRaw: `{"d":"abc"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := newHistory(t, tt.existing...)
			cc := int32(0)
			got, err := h.Create(context.Background(), parent, rev, &cc)
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != tt.wantName || cc != tt.wantCollision || string(got.Data.Raw) != tt.wantRaw || got.Namespace != "ns" {
				t.Errorf("created %s/%s (%q), collision count %d; want %s, %d", got.Namespace, got.Name, got.Data.Raw, cc, tt.wantName, tt.wantCollision)
			}
		})
	}
	h, _ := newHistory(t)
	if _, err := h.Create(context.Background(), parent, rev, nil); err == nil {
		t.Error("Create with a nil collision count succeeded")
	}
}

func TestUpdateAdoptReleaseDelete(t *testing.T) {
	ctx := context.Background()
	orphan := revision("orphan", nil, "b", nil)
	owned := revision("web-1", parent, "a", nil)
	h, client := newHistory(t, orphan, owned)

	updated, err := h.UpdateRevision(ctx, owned, 7)
	if err != nil || updated.Revision != 7 {
		t.Fatalf("UpdateRevision = %v, %v", updated, err)
	}
	stored, _ := client.AppsV1().ControllerRevisions("ns").Get(ctx, "web-1", metav1.GetOptions{})
	if stored.Revision != 7 {
		t.Errorf("stored revision %d, want 7", stored.Revision)
	}

	if _, err := h.Adopt(ctx, parent, kind, owned); err == nil {
		t.Error("adopting a controlled revision succeeded")
	}
	adopted, err := h.Adopt(ctx, parent, kind, orphan)
	if err != nil || !metav1.IsControlledBy(adopted, parent) {
		t.Fatalf("Adopt = %v, %v", adopted, err)
	}
	released, err := h.Release(ctx, parent, adopted)
	if err != nil || len(released.OwnerReferences) != 0 {
		t.Fatalf("Release = %v, %v", released, err)
	}
	gone := revision("gone", parent, "x", nil)
	if r, err := h.Release(ctx, parent, gone); r != nil || err != nil {
		t.Errorf("Release of a missing revision = %v, %v; want nil, nil", r, err)
	}
	if err := h.Delete(ctx, owned); err != nil {
		t.Fatal(err)
	}
	if _, err := client.AppsV1().ControllerRevisions("ns").Get(ctx, "web-1", metav1.GetOptions{}); err == nil {
		t.Error("web-1 still exists")
	}
}
