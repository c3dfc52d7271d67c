package replicaset

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// TestRun wires the controller to running informers of a fake API server: a new
// ReplicaSet gets its pods and status, and a scale-down removes pods, with no more
// creates than replicas however many events arrive.
func TestRun(t *testing.T) {
	log, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset()
	controllertest.GenerateNames(client, "pods")
	// A status update from a sync that read the ReplicaSet before the scale-down below
	// must not put the old replicas back, as it cannot on a real API server.
	controllertest.StatusSubresource(client, appsv1.SchemeGroupVersion.WithResource("replicasets"))
	watches := controllertest.TrackWatches(client)
	factory := informers.NewSharedInformerFactory(client, 0)
	c := controllertest.Context(Descriptor(), factory, workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: Name}))
	c.Client, c.Recorder, c.Logger = client, record.NewFakeRecorder(100), log
	metrics, err := controllers.NewReconcileMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c.Metrics = metrics
	ctrl, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	controllertest.Run(t, ctx, ctrl, 2, c.Queue, factory, watches, "pods", "replicasets")

	rs := newRS("rs", 3)
	if _, err := client.AppsV1().ReplicaSets("ns").Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	status := func() (int32, int64) {
		got, err := client.AppsV1().ReplicaSets("ns").Get(ctx, "rs", metav1.GetOptions{})
		if err != nil {
			return -1, -1
		}
		return got.Status.Replicas, got.Status.ObservedGeneration
	}
	controllertest.WaitFor(t, ctx, "3 pods and status.replicas 3", func() bool {
		r, _ := status()
		return len(controllertest.Stored[*corev1.Pod](t, client, "ns")) == 3 && r == 3
	})
	scaled, _ := client.AppsV1().ReplicaSets("ns").Get(ctx, "rs", metav1.GetOptions{})
	scaled.Spec.Replicas = ptr.To[int32](1)
	scaled.Generation = 2
	if _, err := client.AppsV1().ReplicaSets("ns").Update(ctx, scaled, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	controllertest.WaitFor(t, ctx, "1 pod and status.replicas 1 at generation 2", func() bool {
		r, g := status()
		return len(controllertest.Stored[*corev1.Pod](t, client, "ns")) == 1 && r == 1 && g == 2
	})
	if n := controllertest.Count(client, "create", "pods"); n != 3 {
		t.Errorf("pod creates = %d, want 3", n)
	}
}
