package serviceaccount

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kshard/kshard/pkg/controllers"
)

func TestHandlers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		handle func(c *Controller)
		want   []string
	}{
		{name: "namespace added", handle: func(c *Controller) { c.namespaceChanged(logger(t), active("ns")) }, want: []string{"ns"}},
		{name: "terminating namespace updated: queued, the sync skips it",
			handle: func(c *Controller) { c.namespaceChanged(logger(t), namespace("ns", corev1.NamespaceTerminating)) },
			want:   []string{"ns"}},
		{name: "default ServiceAccount deleted: its namespace",
			handle: func(c *Controller) { c.serviceAccountDeleted(logger(t), serviceAccount("ns", "default")) }, want: []string{"ns"}},
		{name: "a deletion seen by a relist (tombstone)",
			handle: func(c *Controller) {
				c.serviceAccountDeleted(logger(t), toolscache.DeletedFinalStateUnknown{Key: "ns/default", Obj: serviceAccount("ns", "default")})
			}, want: []string{"ns"}},
		{name: "a tombstone of something else: nothing",
			handle: func(c *Controller) {
				c.serviceAccountDeleted(logger(t), toolscache.DeletedFinalStateUnknown{Key: "ns/x", Obj: active("x")})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			tc.handle(f.ctrl)
			if got := f.queue.Keys(); !slices.Equal(got, tc.want) {
				t.Errorf("queued %v, want %v", got, tc.want)
			}
		})
	}
}

// The descriptor is kube-controller-manager's: the name, on by default, one fixed worker
// (kube-controller-manager starts it with one and has no flag), keys of namespaces.
func TestDescriptor(t *testing.T) {
	d := Descriptor()
	if d.Name != "serviceaccount" || !d.OnByDefault || d.FixedWorkers != 1 || d.WorkersFlag != "" {
		t.Errorf("descriptor %+v", d)
	}
	if !slices.Equal(d.Primary, []controllers.Resource{namespaces}) {
		t.Errorf("primary %v, want namespaces", d.Primary)
	}
	if _, err := controllers.NewRegistry(d); err != nil {
		t.Error(err)
	}
}

func logger(t *testing.T) klog.Logger { l, _ := ktesting.NewTestContext(t); return l }
