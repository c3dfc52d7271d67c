package statefulset

import (
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
)

func TestPodHandlers(t *testing.T) {
	set := newSet("web", 2, minReady(7))
	other := newSet("db", 1)
	other.Spec.Selector.MatchLabels = map[string]string{"app": "db"}
	owned := podAt(set, 0, "r")
	orphan := podAt(set, 1, "r")
	orphan.OwnerReferences = nil
	unselected := podAt(set, 1, "r")
	unselected.OwnerReferences = nil
	unselected.Labels = map[string]string{"app": "none"}
	log, _ := ktesting.NewTestContext(t)

	tests := []struct {
		name      string
		run       func(c *Controller)
		wantKeys  []string
		wantAfter time.Duration
	}{
		{name: "a controlled pod's add queues its set", run: func(c *Controller) { c.onPodAdd(log, owned) }, wantKeys: []string{"ns/web"}},
		{name: "an orphan's add queues the sets selecting it", run: func(c *Controller) { c.onPodAdd(log, orphan) }, wantKeys: []string{"ns/web"}},
		{name: "an unselected orphan queues nothing", run: func(c *Controller) { c.onPodAdd(log, unselected) }},
		{name: "a deletion queues the owner", run: func(c *Controller) {
			c.onPodDelete(log, cache.DeletedFinalStateUnknown{Key: "ns/web-0", Obj: owned})
		}, wantKeys: []string{"ns/web"}},
		{name: "a pod turning ready queues after minReadySeconds", run: func(c *Controller) {
			before := owned.DeepCopy()
			before.Status.Conditions = nil
			before.ResourceVersion = "1"
			after := owned.DeepCopy()
			after.ResourceVersion = "2"
			c.onPodUpdate(log, before, after)
		}, wantKeys: []string{"ns/web"}, wantAfter: 7 * time.Second},
		{name: "a resync changes nothing", run: func(c *Controller) { c.onPodUpdate(log, owned, owned) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, set, other)
			tt.run(f.ctrl)
			if got := f.Queue.Keys(); !slices.Equal(got, tt.wantKeys) {
				t.Errorf("queued %v, want %v", got, tt.wantKeys)
			}
			if d, _ := f.Queue.After("ns/web"); d != tt.wantAfter {
				t.Errorf("queued after %v, want %v", d, tt.wantAfter)
			}
		})
	}
}

func TestSetHandlers(t *testing.T) {
	set := newSet("web", 1)
	f := newFixture(t, set)
	f.ctrl.onSetDelete(cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: set})
	if got := f.Queue.Keys(); !slices.Equal(got, []string{"ns/web"}) {
		t.Errorf("queued %v", got)
	}
}
