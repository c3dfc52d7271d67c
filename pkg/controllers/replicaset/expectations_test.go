package replicaset

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/internal/expectations"
	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// TestNoSecondRoundWhileTheInformerLags: the cache has not seen the pods the first sync
// created, and the second sync must not create them again.
func TestNoSecondRoundWhileTheInformerLags(t *testing.T) {
	rs := newRS("rs", 3)
	f := newFixture(t, rs)
	f.MustSync("ns/rs")
	f.MustSync("ns/rs")
	if n := controllertest.Count(f.Client, "create", "pods"); n != 3 {
		t.Fatalf("creates after two syncs = %d, want 3", n)
	}
	// Two of the three pods reach the cache and the handlers.
	for _, p := range f.apiPods()[:2] {
		f.Cache(p)
		f.ctrl.addPod(klog.Background(), p)
	}
	f.MustSync("ns/rs")
	if n := controllertest.Count(f.Client, "create", "pods"); n != 3 {
		t.Fatalf("creates with one pod unobserved = %d, want 3", n)
	}
	// Five minutes later a lost event no longer holds the ReplicaSet back.
	f.clock.Step(expectations.Timeout + time.Second)
	f.MustSync("ns/rs")
	if n := controllertest.Count(f.Client, "create", "pods"); n != 4 {
		t.Fatalf("creates after the expectations expired = %d, want 4", n)
	}
}

func TestNoSecondRoundOfDeletes(t *testing.T) {
	rs := newRS("rs", 1)
	a, b, c := newPodOf("a", rs), newPodOf("b", rs), newPodOf("c", rs)
	f := newFixture(t, objs(rs, a, b, c)...)
	f.MustSync("ns/rs")
	f.MustSync("ns/rs") // the cache still shows all three
	if n := controllertest.Count(f.Client, "delete", "pods"); n != 2 {
		t.Fatalf("deletes after two syncs = %d, want 2", n)
	}
	// The kubelet begins graceful termination of one: an update with a deletionTimestamp.
	var victims []*corev1.Pod
	for _, p := range []*corev1.Pod{a, b, c} {
		if _, err := f.Client.Tracker().Get(podsGVR, "ns", p.Name); err != nil {
			victims = append(victims, p)
		}
	}
	if len(victims) != 2 {
		t.Fatalf("deleted pods = %d, want 2", len(victims))
	}
	terminating := victims[0].DeepCopy()
	terminating.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	terminating.ResourceVersion = "2"
	f.Cache(terminating)
	f.ctrl.updatePod(klog.Background(), victims[0], terminating)
	f.MustSync("ns/rs")
	if n := controllertest.Count(f.Client, "delete", "pods"); n != 2 {
		t.Fatalf("deletes with one deletion unobserved = %d, want 2", n)
	}
	// The other deletion's event was lost (say, in a cache handoff), but the cache no
	// longer has the pod: that counts as observed, and the ReplicaSet is managed again.
	f.Uncache(victims[1])
	f.MustSync("ns/rs")
	if adds, dels := f.ctrl.expectations.Pending("ns/rs"); adds != 0 || dels != 0 {
		t.Fatalf("pending = %d adds, %d deletes; want none", adds, dels)
	}
	if n := controllertest.Count(f.Client, "delete", "pods"); n != 2 {
		t.Fatalf("deletes = %d, want still 2 (the count is right)", n)
	}
}

// TestExpectationsDroppedWithTheReplicaSet: a namespace handed to another shard leaves
// the cache with delete events; expectations must not outlive it into a later
// re-acquisition.
func TestExpectationsDroppedWithTheReplicaSet(t *testing.T) {
	tests := []struct {
		name   string
		remove func(f *fixture, rs any)
	}{
		{name: "delete event", remove: func(f *fixture, rs any) { f.ctrl.deleteRS(klog.Background(), rs) }},
		{name: "tombstone", remove: func(f *fixture, rs any) {
			f.ctrl.deleteRS(klog.Background(), toolscache.DeletedFinalStateUnknown{Key: "ns/rs", Obj: rs})
		}},
		{name: "sync finds it gone", remove: func(f *fixture, rs any) { f.MustSync("ns/rs") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := newRS("rs", 3)
			f := newFixture(t, rs)
			f.MustSync("ns/rs")
			if f.ctrl.expectations.Satisfied("ns/rs") {
				t.Fatal("expectations satisfied right after creating")
			}
			f.Uncache(rs)
			tc.remove(f, rs)
			if !f.ctrl.expectations.Satisfied("ns/rs") {
				t.Fatal("expectations still pending after the ReplicaSet left the cache")
			}
			if got := f.Queue.Keys(); tc.name != "sync finds it gone" && (len(got) != 1 || got[0] != "ns/rs") {
				t.Errorf("queue = %v, want ns/rs", got)
			}
		})
	}
}

func TestReplacedReplicaSetDropsExpectations(t *testing.T) {
	rs := newRS("rs", 3)
	f := newFixture(t, rs)
	f.MustSync("ns/rs")
	again := rs.DeepCopy()
	again.UID = "uid-rs-2"
	f.ctrl.updateRS(rs, again)
	if !f.ctrl.expectations.Satisfied("ns/rs") {
		t.Fatal("the new ReplicaSet inherited the old one's expectations")
	}
}
