package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/job"
	"github.com/kshard/kshard/pkg/metrics/queuemetrics"
	"github.com/kshard/kshard/pkg/sharding/gate"
	"github.com/kshard/kshard/pkg/sharding/loadmeter"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/shardcache"
)

// TestPrimaries: what the gate learns of a controller's primary resources, to map its
// queue's keys (gate.KeysFor, tested with the gate).
func TestPrimaries(t *testing.T) {
	c, err := shardcache.New(fake.NewClientset(), func(string) partition.ID { return 0 }, shardcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		configMaps = controllers.Typed(corev1.SchemeGroupVersion.WithResource("configmaps"))
		namespaces = controllers.Typed(corev1.SchemeGroupVersion.WithResource("namespaces"))
		nodes      = controllers.Typed(corev1.SchemeGroupVersion.WithResource("nodes"))
	)
	keys, kinds, err := primaries([]controllers.Resource{configMaps, namespaces, nodes}, c)
	if err != nil {
		t.Fatal(err)
	}
	if want := []shardcache.Key{cacheKey(configMaps), cacheKey(namespaces), cacheKey(nodes)}; !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
	want := []gate.Primary{
		{Name: configMaps.String()},
		{Name: namespaces.String(), Namespaces: true, ClusterScoped: true},
		{Name: nodes.String(), ClusterScoped: true},
	}
	if !slices.Equal(kinds, want) {
		t.Errorf("primaries %+v, want %+v", kinds, want)
	}
	_, _, err = primaries([]controllers.Resource{controllers.Typed(corev1.SchemeGroupVersion.WithResource("widgets"))}, c)
	if err == nil || !strings.Contains(err.Error(), "not a built-in type") {
		t.Errorf("primaries of a type the cache cannot serve: %v, want an error", err)
	}
}

// TestBuildControllersQueues: a controller's further queues (the job controller's
// orphan-pod queue) are built behind the gate beside its first one, and handed to the
// runtime with their own primary resources, which it fills them with on acquire.
func TestBuildControllersQueues(t *testing.T) {
	tests := []struct {
		name      string
		queueName string
		wantMain  string
	}{
		{name: "queue named as the controller", wantMain: "job"},
		{name: "queue named as upstream's (QueueName)", queueName: "job_upstream", wantMain: "job_upstream"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := job.Descriptor()
			d.QueueName = tc.queueName
			testBuildControllersQueues(t, d, tc.wantMain)
		})
	}
}

func testBuildControllersQueues(t *testing.T, d controllers.Descriptor, wantMain string) {
	partitionOf := func(string) partition.ID { return 0 }
	c, err := shardcache.New(fake.NewClientset(), partitionOf, shardcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := gate.New(gate.ObjectKeys(partitionOf))
	queues, err := queuemetrics.NewProvider(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctrls, err := buildControllers([]controllers.Descriptor{d}, func(string) int { return 1 }, controllerDeps{
		config: &rest.Config{Host: "http://127.0.0.1:1"}, cache: c, gate: g, partitionOf: partitionOf, queues: queues,
		recorder: func(string, typedcorev1.EventInterface) record.EventRecorder { return record.NewFakeRecorder(1) },
		log:      logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	type queue struct {
		name    string
		primary []shardcache.Key
	}
	var got []queue
	for _, q := range ctrls[0].Queues {
		got = append(got, queue{q.Name, q.Primary})
		if _, ok := q.Queue.(*gate.Queue); !ok {
			t.Errorf("queue %s is a %T, not behind the gate", q.Name, q.Queue)
		}
	}
	want := []queue{
		{wantMain, []shardcache.Key{cacheKey(controllers.Typed(batchv1.SchemeGroupVersion.WithResource("jobs")))}},
		{job.OrphanQueue, []shardcache.Key{cacheKey(controllers.Typed(corev1.SchemeGroupVersion.WithResource("pods")))}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("queues %+v, want %+v", got, want)
	}
	var names []string
	for _, q := range g.Stats().Queues {
		names = append(names, q.Name)
	}
	wantNames := []string{wantMain, job.OrphanQueue}
	slices.Sort(names)
	slices.Sort(wantNames)
	if !slices.Equal(names, wantNames) {
		t.Errorf("the gate's queues %v, want %v", names, wantNames)
	}
}

// TestControllerClients checks that a controller's events share its rate limiter (as a
// kube-controller-manager controller's do) and are not fenced, while its writes are.
func TestControllerClients(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Event","metadata":{"name":"e","namespace":"ns"}}`))
	}))
	defer srv.Close()
	refused := errors.New("fenced")
	fence := func(http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(*http.Request) (*http.Response, error) { return nil, refused })
	}
	cs, err := controllerClients(&rest.Config{Host: srv.URL, QPS: 20, Burst: 30}, controllers.Descriptor{Name: "deployment"}, fence, nil)
	if err != nil {
		t.Fatal(err)
	}
	client, events := cs.client, cs.events
	limiter := client.CoreV1().RESTClient().GetRateLimiter()
	if limiter == nil || limiter != events.CoreV1().RESTClient().GetRateLimiter() || limiter != client.AppsV1().RESTClient().GetRateLimiter() {
		t.Errorf("the controller's clients and its events client do not share one rate limiter")
	}
	if qps := limiter.QPS(); qps != 20 {
		t.Errorf("rate limit %v QPS, want the configured 20", qps)
	}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "ns"}}
	if _, err := events.CoreV1().Events("ns").Create(context.Background(), ev, metav1.CreateOptions{}); err != nil {
		t.Errorf("event write: %v, want it to pass unfenced", err)
	}
	if _, err := client.CoreV1().Events("ns").Create(context.Background(), ev, metav1.CreateOptions{}); !errors.Is(err, refused) {
		t.Errorf("controller write: %v, want the fence's refusal", err)
	}
}

// TestControllerClientsScaled: a descriptor's client scales multiply the shard's QPS and
// burst for all of its clients (kube-controller-manager's namespace controller runs at
// ×20 QPS and ×100 burst), and the metadata client is fenced like the clientset.
func TestControllerClientsScaled(t *testing.T) {
	refused := errors.New("fenced")
	fence := func(http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(*http.Request) (*http.Response, error) { return nil, refused })
	}
	tests := []struct {
		name      string
		qpsScale  float32
		burstScal int
		wantQPS   float32
	}{
		{name: "unscaled", wantQPS: 20},
		{name: "namespace controller", qpsScale: 20, burstScal: 100, wantQPS: 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := controllers.Descriptor{Name: "namespace", ClientQPSScale: tc.qpsScale, ClientBurstScale: tc.burstScal}
			cs, err := controllerClients(&rest.Config{Host: "http://127.0.0.1:1", QPS: 20, Burst: 30}, d, fence, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := cs.client.CoreV1().RESTClient().GetRateLimiter().QPS(); got != tc.wantQPS {
				t.Errorf("client QPS %v, want %v", got, tc.wantQPS)
			}
			if got := cs.events.CoreV1().RESTClient().GetRateLimiter().QPS(); got != tc.wantQPS {
				t.Errorf("events QPS %v, want %v", got, tc.wantQPS)
			}
			gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
			if err := cs.metadata.Resource(gvr).Namespace("ns").Delete(context.Background(), "w", metav1.DeleteOptions{}); !errors.Is(err, refused) {
				t.Errorf("metadata delete: %v, want the fence's refusal", err)
			}
			// Context.RESTConfig: the same scaled budget and fence, and no rate limiter,
			// so that each client built from it gets a bucket of its own; a new copy on
			// every call.
			rc := cs.restConfig()
			if rc.RateLimiter != nil || rc.QPS != tc.wantQPS {
				t.Errorf("RESTConfig: rate limiter %v, QPS %v; want none and %v", rc.RateLimiter, rc.QPS, tc.wantQPS)
			}
			if !strings.HasSuffix(rc.UserAgent, " namespace-controller") {
				t.Errorf("RESTConfig user agent %q, want the controller's", rc.UserAgent)
			}
			if rc2 := cs.restConfig(); rc2 == rc {
				t.Error("RESTConfig returned the same config twice; a caller's change would leak into the next")
			}
			mc, err := metadata.NewForConfig(rc)
			if err != nil {
				t.Fatal(err)
			}
			if err := mc.Resource(gvr).Namespace("ns").Delete(context.Background(), "w", metav1.DeleteOptions{}); !errors.Is(err, refused) {
				t.Errorf("delete with a client of RESTConfig: %v, want the fence's refusal", err)
			}
		})
	}
}

// TestControllerClientsMetered: with the shard's load meter, all three clients of a
// controller (its clientset, its events client and its metadata client), and the clients
// built from Context.RESTConfig, count each request as load of the partition its URL
// names, weighted 1/ClientQPSScale, and both rate limiters count their wait as the
// controller's and as the partition of the reconcile that waited.
func TestControllerClientsMetered(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		apiVersion, kind := "v1", "Event"
		switch {
		case strings.Contains(r.URL.Path, "/pods/"):
			kind = "Pod"
		case strings.Contains(r.URL.Path, "/configmaps/"):
			kind = "ConfigMap"
		case strings.Contains(r.URL.Path, "/widgets/"):
			apiVersion, kind = "example.com/v1", "Widget"
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"apiVersion":%q,"kind":%q,"metadata":{"name":"x","namespace":"ns"}}`, apiVersion, kind)
	}))
	defer srv.Close()
	partitionOf := func(ns string) partition.ID {
		n, err := strconv.Atoi(strings.TrimPrefix(ns, "ns"))
		if err != nil {
			return 0
		}
		return partition.ID(n)
	}
	passThrough := func(rt http.RoundTripper) http.RoundTripper { return rt }
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	tests := []struct {
		name       string
		d          controllers.Descriptor
		wantWeight float64
	}{
		{name: "unscaled", d: controllers.Descriptor{Name: "deployment"}, wantWeight: 1},
		{name: "the namespace controller's ×20 client", d: controllers.Descriptor{Name: "namespace", ClientQPSScale: 20}, wantWeight: 1.0 / 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := loadmeter.New(16, loadmeter.DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			// Burst 1: every request but the first of a bucket waits for a token.
			cs, err := controllerClients(&rest.Config{Host: srv.URL, QPS: 20, Burst: 1}, tc.d, passThrough,
				&metering{meter: m, partitionOf: partitionOf})
			if err != nil {
				t.Fatal(err)
			}
			inReconcile := func(p partition.ID) context.Context { return gate.WithPartition(context.Background(), p) }
			for range 2 { // the second request waits on the clientset's bucket
				if _, err := cs.client.CoreV1().Pods("ns1").Get(inReconcile(5), "p", metav1.GetOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "ns2"}}
			if _, err := cs.events.CoreV1().Events("ns2").Create(inReconcile(5), ev, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			for range 2 { // the metadata client's bucket of its own: the second waits
				if _, err := cs.metadata.Resource(gvr).Namespace("ns3").Get(inReconcile(6), "w", metav1.GetOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			restClient, err := kubernetes.NewForConfig(cs.restConfig())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := restClient.CoreV1().ConfigMaps("ns4").Get(context.Background(), "c", metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
			for _, w := range []struct {
				p        partition.ID
				requests float64
			}{{1, 2}, {2, 1}, {3, 2}, {4, 1}, {5, 0}, {6, 0}} {
				want := w.requests * tc.wantWeight
				if got := m.CountsOf(w.p).Requests; got-want > 1e-4 || want-got > 1e-4 {
					t.Errorf("partition %d counts %v requests, want %v", w.p, got, want)
				}
			}
			for _, p := range []partition.ID{5, 6} {
				if m.CountsOf(p).LimiterWait <= 0 {
					t.Errorf("partition %d, whose reconcile's requests waited for a token, counts no wait", p)
				}
			}
			if got, total := m.ControllerWait(tc.d.Name), m.Totals().LimiterWait; got <= 0 || got != total {
				t.Errorf("controller %s waited %v, the meter counts %v: want equal and above 0", tc.d.Name, got, total)
			}
		})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The CA handed to controllers (Context.APIServerCA) is the client configuration's:
// inline data first, else the file's content (a kubeconfig's certificate-authority, the
// in-cluster ca.crt), else none; an unreadable file is a startup error.
func TestAPIServerCA(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(file, []byte("from the file"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		tls     rest.TLSClientConfig
		want    string
		wantErr bool
	}{
		{name: "inline data", tls: rest.TLSClientConfig{CAData: []byte("inline"), CAFile: file}, want: "inline"},
		{name: "a file", tls: rest.TLSClientConfig{CAFile: file}, want: "from the file"},
		{name: "none", tls: rest.TLSClientConfig{}},
		{name: "a file that is not there", tls: rest.TLSClientConfig{CAFile: file + ".missing"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := apiServerCA(&rest.Config{TLSClientConfig: tc.tls})
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %t", err, tc.wantErr)
			}
			if string(got) != tc.want {
				t.Errorf("CA %q, want %q", got, tc.want)
			}
		})
	}
}

// Each controller a shard runs is kube-controller-manager's, known by its canonical name
// and alias (controllers.NamesOf), and kshard names it by the alias, or by the canonical
// name where there is no alias; --list-controllers shows both, the canonical name first.
func TestControllerNames(t *testing.T) {
	names := upstreamControllers(Descriptors())
	for _, name := range names {
		n, ok := controllers.NamesOf(name)
		if !ok {
			t.Errorf("controller %q is none of kube-controller-manager's (controllers.NamesOf): mark a test-only controller TestOnly", name)
			continue
		}
		if kshard := cmp.Or(n.Alias, n.Canonical); name != kshard {
			t.Errorf("controller %q: kshard names kube-controller-manager's %s %q", name, n, kshard)
		}
	}
	lines := strings.Split(strings.TrimSuffix(controllerList(Descriptors()), "\n"), "\n")
	if len(lines) != len(names) {
		t.Fatalf("--list-controllers has %d lines, want one per controller of %v:\n%s", len(lines), names, strings.Join(lines, "\n"))
	}
	for i, line := range lines {
		f := strings.Fields(line)
		n, _ := controllers.NamesOf(names[i])
		if want := strings.Fields(n.Canonical + " " + n.Alias); !slices.Equal(f, want) {
			t.Errorf("--list-controllers line %q, want %q", line, strings.Join(want, " "))
		}
	}
	reg, err := controllers.NewRegistry(Descriptors()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, sel := range []controllers.Selection{{"replicaset-controller"}, {"replicaset"}} {
		var got []string
		for _, d := range reg.Enabled(sel) {
			got = append(got, d.Name)
		}
		if !slices.Equal(got, []string{"replicaset"}) {
			t.Errorf("--controllers=%s runs %v, want [replicaset]", strings.Join(sel, ","), got)
		}
	}
}

// servedController is a controller of served resources for TestBuildControllersServed.
type servedController struct {
	ctx     controllers.Context
	resyncs []controllers.Scope
}

func (c *servedController) Run(context.Context, int) {}

type resyncingController struct{ *servedController }

func (c resyncingController) Resync(s controllers.Scope) { c.resyncs = append(c.resyncs, s) }

// TestBuildControllersServed: a controller of served resources gets Context.Served, a
// consumer of the shard's discovery with its Spec, queues that hold object keys of any
// resource, and its Resync called by the runtime; one that cannot refill its queues
// itself is refused.
func TestBuildControllersServed(t *testing.T) {
	partitionOf := func(ns string) partition.ID {
		if ns == "" {
			return 0
		}
		return 1
	}
	c, err := shardcache.New(fake.NewClientset(), partitionOf, shardcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	queues, err := queuemetrics.NewProvider(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		resyncer bool
		wantErr  bool
	}{
		{name: "resyncer", resyncer: true},
		{name: "no resyncer", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			built := &servedController{}
			d := controllers.Descriptor{
				Name: "served", FixedWorkers: 1,
				Served: &controllers.ServedResources{Verbs: []string{"list", "watch", "delete"}, NamespacedOnly: true},
				Queues: []controllers.QueueSpec{{Name: "served_more"}},
				New: func(ctx controllers.Context) (controllers.Controller, error) {
					built.ctx = ctx
					if tc.resyncer {
						return resyncingController{built}, nil
					}
					return built, nil
				},
			}
			hub := &servedHub{}
			g := gate.New(gate.ObjectKeys(partitionOf))
			ctrls, err := buildControllers([]controllers.Descriptor{d}, func(string) int { return 1 }, controllerDeps{
				config: &rest.Config{Host: "http://127.0.0.1:1"}, cache: c, gate: g, partitionOf: partitionOf, queues: queues,
				recorder: func(string, typedcorev1.EventInterface) record.EventRecorder { return record.NewFakeRecorder(1) },
				served:   hub, log: logr.Discard(),
			})
			if tc.wantErr {
				if err == nil {
					t.Fatal("a controller whose queues no Primary fills, and which is no Resyncer, was built")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if built.ctx.Served == nil || len(hub.consumers) != 1 || !hub.consumers[0].Spec.NamespacedOnly {
				t.Fatalf("Context.Served %v, consumers %+v: want one consumer with the descriptor's Spec", built.ctx.Served, hub.consumers)
			}
			if ctrls[0].Resync == nil {
				t.Fatal("the runtime does not call the controller's Resync")
			}
			if built.ctx.Queue != nil || len(ctrls[0].Queues) != 1 || ctrls[0].Queues[0].Name != "served_more" {
				t.Errorf("queues: Context.Queue %v, runtime queues %+v; want no queue named after the controller, only served_more", built.ctx.Queue, ctrls[0].Queues)
			}
			ctrls[0].Resync([]string{"a"}, true)
			if want := []controllers.Scope{{Namespaces: []string{"a"}, Cluster: true}}; !reflect.DeepEqual(built.resyncs, want) {
				t.Errorf("resyncs %+v, want %+v", built.resyncs, want)
			}
			// Object keys of any resource: "<namespace>/<uid>" in the namespace's partition,
			// "<uid>" in the cluster partition.
			g.Acquire(1)
			q := built.ctx.Queues["served_more"]
			q.Add("ns/3f2a")
			q.Add("9c1b")
			if got := q.Len(); got != 1 {
				t.Errorf("queue holds %d keys with only the namespace's partition acquired, want 1 (the cluster-scoped key dropped)", got)
			}
		})
	}
}

// TestFieldSelectedInformer: a controllers.Resource with a field selector reaches the
// cache as a key of its own, served by a separate informer (cached whole) from the one of
// the same type without it.
func TestFieldSelectedInformer(t *testing.T) {
	c, err := shardcache.New(fake.NewClientset(), func(string) partition.ID { return 0 }, shardcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pods := controllers.Typed(corev1.SchemeGroupVersion.WithResource("pods"))
	terminated := controllers.Resource{GroupVersionResource: pods.GroupVersionResource,
		FieldSelector: "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"}
	if got := cacheKey(terminated); got.FieldSelector != terminated.FieldSelector || got.Resource != pods.GroupVersionResource {
		t.Errorf("cacheKey(%s) = %+v", terminated, got)
	}
	all, err := cacheInformers{c}.InformerFor(pods)
	if err != nil {
		t.Fatal(err)
	}
	selected, err := cacheInformers{c}.InformerFor(terminated)
	if err != nil {
		t.Fatal(err)
	}
	if all == selected {
		t.Error("the field-selected resource is served the informer of the whole type")
	}
	if !slices.Contains(c.Resources(), cacheKey(terminated).String()) {
		t.Errorf("the cache's resources %v lack %s", c.Resources(), cacheKey(terminated))
	}
}
