package serviceaccount

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

func TestHandlers(t *testing.T) {
	log := controllertest.Logger(t)
	for _, tc := range []struct {
		name   string
		handle func(c *Controller)
		want   []string
	}{
		{name: "namespace added", handle: func(c *Controller) { c.namespaceChanged(log, active("ns")) }, want: []string{"ns"}},
		{name: "terminating namespace updated: queued, the sync skips it",
			handle: func(c *Controller) { c.namespaceChanged(log, namespace("ns", corev1.NamespaceTerminating)) },
			want:   []string{"ns"}},
		{name: "default ServiceAccount deleted: its namespace",
			handle: func(c *Controller) { c.serviceAccountDeleted(log, serviceAccount("ns", "default")) }, want: []string{"ns"}},
		{name: "a deletion seen by a relist (tombstone)",
			handle: func(c *Controller) {
				c.serviceAccountDeleted(log, toolscache.DeletedFinalStateUnknown{Key: "ns/default", Obj: serviceAccount("ns", "default")})
			}, want: []string{"ns"}},
		{name: "a tombstone of something else: nothing",
			handle: func(c *Controller) {
				c.serviceAccountDeleted(log, toolscache.DeletedFinalStateUnknown{Key: "ns/x", Obj: active("x")})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			tc.handle(f.ctrl)
			if got := f.Queue.Keys(); !slices.Equal(got, tc.want) {
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
