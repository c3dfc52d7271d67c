package loadmeter

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/kshard/kshard/pkg/sharding/gate"
)

// TestClientGoAttribution: through a real client-go clientset against an HTTP server, a
// request counts for the partition its URL names, and its wait in the client's rate
// limiter for the partition of the reconcile it was made from: client-go passes the
// request's context to the limiter, and Queue.KeyContext marks it. A request made
// outside any reconcile (an event sent by the broadcaster) waits as the shard's.
func TestClientGoAttribution(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns5"}}`))
	}))
	defer srv.Close()

	m, _ := newTestMeter(t, DefaultOptions())
	// One token at a time, 20 a second: every request after the first waits ~50 ms.
	const qps = 20
	cfg := &rest.Config{Host: srv.URL, RateLimiter: Limiter(m, "deployment", flowcontrol.NewTokenBucketRateLimiter(qps, 1))}
	cfg.Wrap(Transport(m, nsPartition, 1))
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	g := gate.New(gate.ObjectKeys(nsPartition))
	g.Acquire(3)
	q := g.NewQueue(gate.QueueConfig{Name: "deployment"})
	defer q.ShutDown()
	q.Add("ns3/d")
	key, _ := q.Get()
	ctx, cancel := q.KeyContext(context.Background(), key)
	defer cancel()

	tests := []struct {
		name string
		ctx  context.Context
	}{
		{name: "takes the burst token", ctx: ctx},
		{name: "from the reconcile of ns3/d", ctx: ctx},
		{name: "again", ctx: ctx},
		{name: "outside any reconcile", ctx: context.Background()},
	}
	for _, tc := range tests {
		if _, err := client.CoreV1().ConfigMaps("ns5").Get(tc.ctx, "c", metav1.GetOptions{}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	q.Done(key)

	if got := m.CountsOf(5).Requests; got != 4 {
		t.Errorf("ns5's partition counts %v requests, want the 4 made to its URLs", got)
	}
	if got := m.CountsOf(3).Requests; got != 0 {
		t.Errorf("the reconcile's partition counts %v requests, want 0: requests count where their URL points", got)
	}
	// Each request after the first waited about 1/qps; the rate limiter's clock is the
	// real one, so bound it below only.
	minWait := time.Second / qps / 2
	wait3, other := m.CountsOf(3).LimiterWait, m.Totals().LimiterWait-m.CountsOf(3).LimiterWait
	if wait3 < 2*minWait {
		t.Errorf("the reconcile's partition waited %v, want at least %v (two throttled requests)", wait3, 2*minWait)
	}
	if other < minWait {
		t.Errorf("the shard waited %v outside any reconcile, want at least %v", other, minWait)
	}
	if w := m.CountsOf(5).LimiterWait; w != 0 {
		t.Errorf("ns5's partition waited %v, want 0: no request waited in its reconcile", w)
	}
	if got, want := m.ControllerWait("deployment"), m.Totals().LimiterWait; got != want {
		t.Errorf("the controller waited %v, the partitions and the shard %v: want equal", got, want)
	}
	if rl := client.CoreV1().RESTClient().GetRateLimiter(); rl.QPS() != qps {
		t.Errorf("the wrapped limiter says %v QPS, want the bucket's %d", rl.QPS(), qps)
	}
}
