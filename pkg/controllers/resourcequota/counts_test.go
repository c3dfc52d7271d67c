package resourcequota

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	quota "k8s.io/apiserver/pkg/quota/v1"

	"github.com/kshard/kshard/pkg/controllers"
)

// servedSpec is a served resource the test hands the controller.
type servedSpec struct {
	res    controllers.ServedResource
	synced bool
	objs   []runtime.Object
}

var (
	widgets    = served("example.com", "widgets")
	configmaps = served("", "configmaps")
	secrets    = served("", "secrets")
	rcs        = served("", "replicationcontrollers")
	rqs        = served("", "resourcequotas")
)

func widget(ns, name string) *metav1.PartialObjectMetadata {
	return partial("example.com/v1", "Widget", ns, name)
}

func configMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
}

func TestCounts(t *testing.T) {
	for _, tc := range []struct {
		name       string
		served     []servedSpec
		removed    []controllers.ServedResource
		quota      *corev1.ResourceQuota
		pods       []runtime.Object
		want       corev1.ResourceList // nil: unchanged
		wantErr    bool
		wantWrites []string
	}{
		{name: "a served resource's objects of the namespace, metadata only",
			served: []servedSpec{{res: widgets, synced: true, objs: []runtime.Object{widget("ns", "a"), widget("ns", "b"), widget("other", "c")}}},
			quota:  newQuota("q", list("count/widgets.example.com", "10")),
			want:   list("count/widgets.example.com", "2"), wantWrites: []string{"update resourcequotas/status"}},
		{name: "the legacy names and count/ of typed objects",
			served: []servedSpec{{res: configmaps, synced: true, objs: []runtime.Object{configMap("a"), configMap("b")}},
				{res: secrets, synced: true, objs: []runtime.Object{partial("v1", "Secret", "ns", "s")}},
				{res: rcs, synced: true},
				{res: rqs, synced: true, objs: []runtime.Object{partial("v1", "ResourceQuota", "ns", "q"), partial("v1", "ResourceQuota", "ns", "r")}}},
			quota: newQuota("q", list("configmaps", "10", "count/configmaps", "10", "secrets", "10", "count/secrets", "10",
				"replicationcontrollers", "10", "resourcequotas", "10")),
			want: list("configmaps", "2", "count/configmaps", "2", "secrets", "1", "count/secrets", "1",
				"replicationcontrollers", "0", "resourcequotas", "2"),
			wantWrites: []string{"update resourcequotas/status"}},
		{name: "a count of the core group",
			served: []servedSpec{{res: served("", "endpoints"), synced: true, objs: []runtime.Object{partial("v1", "Endpoints", "ns", "e")}}},
			quota:  newQuota("q", list("count/endpoints", "10")),
			want:   list("count/endpoints", "1"), wantWrites: []string{"update resourcequotas/status"}},
		{name: "not synced: an error, the old usage, no write",
			served:  []servedSpec{{res: widgets, objs: []runtime.Object{widget("ns", "a")}}},
			quota:   newQuota("q", list("count/widgets.example.com", "10"), synced(list("count/widgets.example.com", "5"))),
			wantErr: true},
		{name: "not synced, something else changed: written with the old usage of the unsynced one, and an error",
			served:  []servedSpec{{res: widgets, objs: []runtime.Object{widget("ns", "a")}}},
			quota:   newQuota("q", list("count/widgets.example.com", "10", "pods", "10"), synced(list("count/widgets.example.com", "5", "pods", "0"))),
			pods:    []runtime.Object{newPod("p")},
			want:    list("count/widgets.example.com", "5", "pods", "1"),
			wantErr: true, wantWrites: []string{"update resourcequotas/status"}},
		{name: "a legacy-named resource not yet served: an error, no write",
			quota:   newQuota("q", list("configmaps", "10"), synced(list("configmaps", "3"))),
			wantErr: true},
		{name: "a resource never served has no evaluator: no usage, no error",
			quota: newQuota("q", list("count/gadgets.example.com", "10"), synced(list())),
		},
		{name: "removed: no longer counted, the last usage stays",
			served:  []servedSpec{{res: widgets, synced: true}},
			removed: []controllers.ServedResource{widgets},
			quota:   newQuota("q", list("count/widgets.example.com", "10"), synced(list("count/widgets.example.com", "5")))},
		{name: "a removed legacy resource fails again",
			served:  []servedSpec{{res: configmaps, synced: true}},
			removed: []controllers.ServedResource{configmaps},
			quota:   newQuota("q", list("configmaps", "10"), synced(list("configmaps", "3"))),
			wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, []runtime.Object{tc.quota}, append([]runtime.Object{tc.quota}, tc.pods...)...)
			for _, s := range tc.served {
				f.served.Add(s.res, newFakeInformer(s.synced, s.objs...))
			}
			for _, r := range tc.removed {
				f.served.Remove(r)
			}
			f.queued()
			err := f.Sync("ns/q")
			if (err != nil) != tc.wantErr {
				t.Fatalf("sync error %v, want error %v", err, tc.wantErr)
			}
			if got := f.writes(); !slices.Equal(got, tc.wantWrites) {
				t.Errorf("writes %v, want %v", got, tc.wantWrites)
			}
			want := tc.want
			if want == nil {
				want = tc.quota.Status.Used
			}
			if got := f.status("q").Used; !quota.Equals(got, want) {
				t.Errorf("used %v, want %v", got, want)
			}
		})
	}
}
