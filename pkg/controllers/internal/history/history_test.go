package history

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// The want values were computed by upstream's own helpers (k8s.io/kubernetes v1.37.1
// pkg/controller/history.HashControllerRevision and NewControllerRevision) in a
// throwaway program of the tools module, not by this package.
func TestHashMatchesUpstream(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		object runtime.Object
		probe  *int32
		want   string
	}{
		{name: "raw, no probe", raw: "abc", want: "557874f5f9"},
		{name: "raw, probe 0", raw: "abc", probe: ptr.To[int32](0), want: "755d7b7869"},
		{name: "raw, probe 3", raw: "abc", probe: ptr.To[int32](3), want: "755d7b786b"},
		{name: "empty", want: "65bb57b6b5"},
		{name: "patch, probe 12", raw: `{"spec":{"template":{"$patch":"replace"}}}`, probe: ptr.To[int32](12), want: "7f56c4fd77"},
		{name: "object replaces raw", raw: "ignored",
			object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Data: map[string]string{"b": "2", "a": "1"}},
			want:   "686587cf9"},
		{name: "object, probe 1", raw: "ignored",
			object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Data: map[string]string{"b": "2", "a": "1"}},
			probe:  ptr.To[int32](1), want: "7f9474bf7b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rev := &appsv1.ControllerRevision{Data: runtime.RawExtension{Raw: []byte(tt.raw), Object: tt.object}}
			if got := Hash(rev, tt.probe); got != tt.want {
				t.Errorf("Hash = %q, upstream computed %q", got, tt.want)
			}
		})
	}
}

func TestNew(t *testing.T) {
	parent := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-web"}}
	kind := appsv1.SchemeGroupVersion.WithKind("StatefulSet")
	tmplLabels := map[string]string{"app": "web"}
	rev := New(parent, kind, tmplLabels, runtime.RawExtension{Raw: []byte("abc")}, 4, ptr.To[int32](0))
	if rev.Name != "web-755d7b7869" || rev.Labels[HashLabel] != "755d7b7869" || rev.Labels["app"] != "web" {
		t.Errorf("name %q labels %v", rev.Name, rev.Labels)
	}
	if rev.Revision != 4 || !metav1.IsControlledBy(rev, parent) {
		t.Errorf("revision %d owners %v", rev.Revision, rev.OwnerReferences)
	}
	if _, ok := tmplLabels[HashLabel]; ok {
		t.Error("the template's labels were modified")
	}
}

func TestName(t *testing.T) {
	long := strings.Repeat("a", 300)
	tests := []struct{ name, prefix, want string }{
		{name: "short", prefix: "web", want: "web-h"},
		{name: "223 kept", prefix: long[:223], want: long[:223] + "-h"},
		{name: "truncated", prefix: long, want: long[:223] + "-h"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Name(tt.prefix, "h"); got != tt.want {
				t.Errorf("Name = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSortAndNext(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	rev := func(name string, n int64, created time.Time) *appsv1.ControllerRevision {
		return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)}, Revision: n}
	}
	revs := []*appsv1.ControllerRevision{rev("c", 3, t0), rev("b", 1, t0.Add(time.Second)), rev("z", 1, t0), rev("a", 1, t0)}
	Sort(revs)
	var got []string
	for _, r := range revs {
		got = append(got, r.Name)
	}
	if strings.Join(got, ",") != "a,z,b,c" {
		t.Errorf("sorted %v, want a,z,b,c", got)
	}
	if n := Next(revs); n != 4 {
		t.Errorf("Next = %d, want 4", n)
	}
	if n := Next(nil); n != 1 {
		t.Errorf("Next(nil) = %d, want 1", n)
	}
}

func TestEqual(t *testing.T) {
	a := &appsv1.ControllerRevision{Data: runtime.RawExtension{Raw: []byte("x")}}
	b := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Data: runtime.RawExtension{Raw: []byte("x")}}
	c := &appsv1.ControllerRevision{Data: runtime.RawExtension{Raw: []byte("y")}}
	tests := []struct {
		name string
		a, b *appsv1.ControllerRevision
		want bool
	}{
		{name: "both nil", want: true},
		{name: "one nil", a: a},
		{name: "same data, other name", a: a, b: b, want: true},
		{name: "other data", a: a, b: c},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Equal(tt.a, tt.b); got != tt.want {
				t.Errorf("Equal = %v, want %v", got, tt.want)
			}
		})
	}
	if got := FindEqual([]*appsv1.ControllerRevision{a, c, b}, a); len(got) != 2 || got[0] != a || got[1] != b {
		t.Errorf("FindEqual = %v", got)
	}
}
