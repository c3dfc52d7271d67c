package garbagecollector

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/metadata/metadatainformer"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

func TestDescriptor(t *testing.T) {
	d := Descriptor()
	if _, err := controllers.NewRegistry(d); err != nil {
		t.Fatalf("the descriptor does not register: %v", err)
	}
	if d.Name != "garbagecollector" || !controllers.SameController(d.Name, "garbage-collector-controller") {
		t.Errorf("name %q is not kube-controller-manager's garbage-collector-controller alias", d.Name)
	}
	if d.WorkersFlag != "concurrent-gc-syncs" || d.DefaultWorkers != 20 || !d.OnByDefault {
		t.Errorf("workers flag %q default %d, on by default %v; want upstream's concurrent-gc-syncs, 20, on", d.WorkersFlag, d.DefaultWorkers, d.OnByDefault)
	}
	if d.EventComponent() != "garbage-collector-controller" {
		t.Errorf("events come from %q; want upstream's garbage-collector-controller", d.EventComponent())
	}
	if !slices.Contains(d.Served.Ignore, schema.GroupResource{Resource: "events"}) ||
		!slices.Contains(d.Served.Ignore, schema.GroupResource{Group: "events.k8s.io", Resource: "events"}) {
		t.Errorf("ignored %v; want both events resources", d.Served.Ignore)
	}
	var all controllers.Permission
	for _, p := range d.AllPermissions() {
		if p.Group == "*" && p.Resource == "*" {
			all = p
		}
	}
	want := []string{"list", "watch", "get", "patch", "delete"}
	if !slices.Equal(all.Verbs, want) {
		t.Errorf("verbs on */* = %v; want %v (upstream's update is never used)", all.Verbs, want)
	}
	var queues []string
	for _, q := range d.Queues {
		queues = append(queues, q.Name)
	}
	equal(t, "queues", queues, []string{"garbage_collector_attempt_to_delete", "garbage_collector_attempt_to_orphan"})
}

func TestNewNeedsItsQueues(t *testing.T) {
	if _, err := New(controllers.Context{Metadata: metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme()), Served: &controllertest.Served{}}); err == nil {
		t.Error("New without its queues succeeded")
	}
}

// TestRun runs the controller on real informers over the fake metadata client: a pod
// whose owner never existed is deleted, a pod whose owner exists is kept.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	rs := object(replicaSets, "ns", "rs", "rs-1")
	kept := object(pods, "ns", "kept", "kept-1", ownedBy(rs, true))
	orphan := object(pods, "ns", "orphan", "orphan-1", ref("apps/v1", "ReplicaSet", "gone", "gone-1"))
	for _, o := range []*metav1.PartialObjectMetadata{rs, kept} {
		if err := client.Tracker().Create(resourceOf(o).GroupVersionResource, o, o.Namespace); err != nil {
			t.Fatal(err)
		}
	}
	served := &controllertest.Served{}
	queues := map[string]workqueue.TypedRateLimitingInterface[string]{}
	for _, q := range Descriptor().Queues {
		queues[q.Name] = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	}
	ctrl, err := New(controllers.Context{
		Metadata: client, Queues: queues, Served: served, Recorder: record.NewFakeRecorder(10),
		Logger: controllertest.Logger(t), Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []controllers.ServedResource{pods, replicaSets} {
		inf := metadatainformer.NewFilteredMetadataInformer(client, r.GroupVersionResource, "", 0,
			toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc}, nil).Informer()
		go inf.RunWithContext(ctx)
		toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
		served.Add(r, inf)
	}
	done := make(chan struct{})
	go func() { defer close(done); ctrl.Run(ctx, 2) }()
	if err := client.Tracker().Create(pods.GroupVersionResource, orphan, "ns"); err != nil {
		t.Fatal(err)
	}
	stored := func(o *metav1.PartialObjectMetadata) bool {
		_, err := client.Tracker().Get(pods.GroupVersionResource, o.Namespace, o.Name)
		return err == nil
	}
	controllertest.WaitFor(t, ctx, "the pod whose owner never existed to be deleted", func() bool { return !stored(orphan) })
	if !stored(kept) {
		t.Error("the pod whose owner exists was deleted")
	}
	cancel()
	<-done
}

// TestProcessNext: the garbage collector's errors under the shared worker loop's retry
// policy (controllers.ProcessNext).
func TestProcessNext(t *testing.T) {
	tests := []struct {
		name            string
		err             error
		wantRateLimited bool
		wantAfter       bool
	}{
		{name: "success forgets the key"},
		{name: "a failure retries with backoff", err: errors.New("boom"), wantRateLimited: true},
		{name: "a quiet retry (owner kind not served yet, virtual not observed) retries with backoff", err: errNotObserved, wantRateLimited: true},
		{name: "a wait requeues after its delay", err: &controllers.RequeueAfterError{After: time.Minute}, wantAfter: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := controllertest.NewQueue()
			defer q.ShutDown()
			q.Add("ns/u-1")
			controllers.ProcessNext(klog.NewContext(context.Background(), controllertest.Logger(t)), "q", q,
				func(context.Context, string) error { return tt.err }, nil)
			if got := len(q.RateLimited()) == 1; got != tt.wantRateLimited {
				t.Errorf("rate-limited %v; want %v", q.RateLimited(), tt.wantRateLimited)
			}
			if _, got := q.After("ns/u-1"); got != tt.wantAfter {
				t.Errorf("requeued after a delay %v; want %v", got, tt.wantAfter)
			}
		})
	}
}
