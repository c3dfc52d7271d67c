package namespacelife

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// measured are the controllers the benchmark compares, as kube-controller-manager names them.
var measured = []string{"serviceaccount", "root-ca-cert-publisher", "namespace"}

const (
	label = "kshard.io/bench-nslife"
	// rootCAConfigMap and defaultSA are what every active namespace gets.
	rootCAConfigMap = "kube-root-ca.crt"
	defaultSA       = "default"
	image           = "registry.k8s.io/pause:3.10"
	// cleanupTimeout bounds the deletion of a run's namespaces between configurations.
	cleanupTimeout = 30 * time.Minute
)

// widgets is the benchmark's own custom resource, so that namespace deletion has a CRD's
// objects to discover and delete.
var widgets = schema.GroupVersionResource{Group: "nslife.kshard.io", Version: "v1", Resource: "widgets"}

// sizes are the benchmark's knobs (doc.go).
type sizes struct {
	namespaces, delete, perKind int
	qps, burst                  string
	timeout                     time.Duration
}

func readSizes(b *testing.B) sizes {
	s := sizes{
		namespaces: framework.EnvInt("KSHARD_BENCH_NSLIFE_NAMESPACES", 1000),
		delete:     framework.EnvInt("KSHARD_BENCH_NSLIFE_DELETE", 500),
		perKind:    framework.EnvInt("KSHARD_BENCH_NSLIFE_PER_KIND", 3),
		qps:        fmt.Sprint(framework.EnvInt("KSHARD_BENCH_NSLIFE_QPS", 20)),
		burst:      fmt.Sprint(framework.EnvInt("KSHARD_BENCH_NSLIFE_BURST", 30)),
		timeout:    time.Duration(framework.EnvInt("KSHARD_BENCH_NSLIFE_TIMEOUT_SECONDS", 1800)) * time.Second,
	}
	if s.delete > s.namespaces {
		b.Fatalf("KSHARD_BENCH_NSLIFE_DELETE=%d: more than the %d namespaces created", s.delete, s.namespaces)
	}
	return s
}

// config is one column of the comparison: upstream (shards == 0) or kshard with shards.
type config struct {
	name   string
	shards int
}

// usage is one process's figures over a run.
type usage struct {
	name    string
	peakRSS float64 // bytes
	cpu     float64 // seconds
}

// phase is one timed phase: the time until the last namespace was done, and the
// per-namespace latencies (from its create or delete request to its SA and ConfigMap
// both seen, or to its disappearance).
type phase struct {
	took           time.Duration
	p50, p99, pmax time.Duration
}

func (p phase) String() string {
	return fmt.Sprintf("%s (per namespace p50 %s, p99 %s, max %s)", p.took.Round(100*time.Millisecond),
		p.p50.Round(10*time.Millisecond), p.p99.Round(10*time.Millisecond), p.pmax.Round(10*time.Millisecond))
}

// result is one configuration's figures.
type result struct {
	config
	ready, gone phase
	controllers []usage // the processes running the measured controllers
	coordinator []usage
	others      []usage          // the cluster's kube-controller-manager (every other controller)
	plane       map[string]usage // kube-apiserver, etcd
}

func (r result) cpu() float64 {
	s := 0.0
	for _, u := range r.controllers {
		s += u.cpu
	}
	return s
}

func (r result) peakRSS() (sum, most float64) {
	for _, u := range r.controllers {
		sum += u.peakRSS
		most = max(most, u.peakRSS)
	}
	return sum, most
}

// BenchmarkNamespaceLife compares namespace creation (ServiceAccount and root CA
// ConfigMap) and deletion between upstream kube-controller-manager and kshard; see doc.go.
func BenchmarkNamespaceLife(b *testing.B) {
	f := framework.Get(b)
	for _, bin := range []string{"coordinator", "shard"} {
		framework.Binary(b, bin)
	}
	f.RequireKCMWithout(b, measured...)
	s := readSizes(b)
	ensureCRD(b, f)
	var configs []config
	if os.Getenv("KSHARD_BENCH_NSLIFE_UPSTREAM") != "0" {
		configs = append(configs, config{name: "upstream"})
	}
	for _, n := range framework.EnvInts("KSHARD_BENCH_NSLIFE_SHARDS", "1,3") {
		configs = append(configs, config{name: fmt.Sprintf("kshard-%d", n), shards: n})
	}
	b.Logf("%d namespaces created, %d of them filled with %d objects each (%d of each of 6 kinds, a Deployment's as 1+1+%d) and deleted; every controller process: --kube-api-qps %s --kube-api-burst %s per controller",
		s.namespaces, s.delete, objectsPerNamespace(s.perKind), s.perKind, s.perKind, s.qps, s.burst)

	var results []result
	for _, c := range configs {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				r := runConfig(b, f, s, c, strings.ToLower(fmt.Sprintf("nsl-%s-%s-%d", f.RunID, c.name, i)))
				results = append(results, r)
				report(b, r, results)
			}
		})
	}
	summary(b, s, results)
}

// objectsPerNamespace is what fill creates in one namespace: perKind ConfigMaps, Secrets,
// Services, bare pods and widgets, and a Deployment with a ReplicaSet and perKind pods.
func objectsPerNamespace(perKind int) int { return 5*perKind + 2 + perKind }

// runConfig runs both phases with c's controllers and deletes the run's namespaces after.
func runConfig(b *testing.B, f *framework.Framework, s sizes, c config, run string) result {
	b.StopTimer()
	ctx := context.Background()
	client := f.LoadClient(b)
	// Deferred first, so it runs last: after the run's controllers are stopped.
	defer cleanup(b, f, client, run)

	r := result{config: c, plane: map[string]usage{}}
	var procs []framework.Metered
	for _, name := range []string{"kube-apiserver", "etcd"} {
		pid, err := f.ComponentPid(name)
		if err != nil {
			b.Fatal(err)
		}
		procs = append(procs, framework.Metered{Name: name, Role: "plane", Pid: pid})
	}
	kcmPid, err := f.ComponentPid("kube-controller-manager")
	if err != nil {
		b.Fatal(err)
	}
	procs = append(procs, framework.Metered{Name: "kube-controller-manager (others)", Role: "other", Pid: kcmPid, ResetPeak: true})
	limits := []string{"--kube-api-qps=" + s.qps, "--kube-api-burst=" + s.burst}
	if c.shards == 0 {
		kcm := f.StartKCM(b, "kcm-"+run, framework.KCMOptions{Controllers: measured, Args: limits})
		defer kcm.Kill()
		procs = append(procs, framework.Metered{Name: "kube-controller-manager (" + strings.Join(measured, ", ") + ")",
			Role: "controller", Pid: kcm.Pid(), ResetPeak: true})
	} else {
		args := append([]string{"--controllers", strings.Join(shardControllers(b), ",")}, limits...)
		if shardHasFlag(b, "root-ca-file") {
			args = append(args, "--root-ca-file="+filepath.Join(f.ClusterDir(), "pki", "ca.crt"))
		}
		k := f.NewKShard(b, framework.KShardOptions{ShardArgs: args})
		shards := k.StartSet(b, c.shards)
		defer k.KillAll()
		for _, sh := range shards {
			procs = append(procs, framework.Metered{Name: sh.Name, Role: "controller", Pid: sh.Pid(), ResetPeak: true})
		}
		procs = append(procs, framework.Metered{Name: "coordinator", Role: "coordinator", Pid: k.Coordinators[0].Pid(), ResetPeak: true})
	}
	// The controllers work before the timer starts: a probe namespace gets both objects.
	w := startWatch(ctx, b, client, run)
	defer w.stop()
	probe := run + "-probe"
	createNamespaces(b, client, w, run, []string{probe})
	if err := w.waitReady(ctx, []string{probe}, 2*time.Minute); err != nil {
		b.Fatalf("%s: the controllers did not serve a probe namespace within 2m: %v", c.name, err)
	}

	meter := framework.StartMeter(b, procs...)
	nss := make([]string, s.namespaces)
	for i := range nss {
		nss[i] = fmt.Sprintf("%s-%04d", run, i)
	}
	b.StartTimer()
	start := time.Now()
	createNamespaces(b, client, w, run, nss)
	b.Logf("%s: %d namespaces created in %s", c.name, len(nss), time.Since(start).Round(time.Millisecond))
	if err := w.waitReady(ctx, nss, s.timeout); err != nil {
		b.Fatalf("%s: %v", c.name, err)
	}
	b.StopTimer()
	r.ready = w.readyPhase(nss, start)
	b.Logf("%s: every namespace has its ServiceAccount %q and ConfigMap %q after %s", c.name, defaultSA, rootCAConfigMap, r.ready)

	doomed := nss[:s.delete]
	fillStart := time.Now()
	fill(b, f, client, doomed, s.perKind)
	b.Logf("%s: %d namespaces filled with %d objects each in %s", c.name, len(doomed), objectsPerNamespace(s.perKind), time.Since(fillStart).Round(time.Millisecond))

	b.StartTimer()
	start = time.Now()
	deleteNamespaces(b, client, w, doomed)
	if err := w.waitGone(ctx, doomed, s.timeout); err != nil {
		b.Fatalf("%s: %v", c.name, err)
	}
	b.StopTimer()
	r.gone = w.gonePhase(doomed, start)
	b.Logf("%s: the %d deleted namespaces are gone after %s", c.name, len(doomed), r.gone)

	for _, u := range meter.Stop(b) {
		pu := usage{name: u.Name, peakRSS: u.PeakRSSBytes, cpu: u.CPUSeconds}
		switch u.Role {
		case "controller":
			r.controllers = append(r.controllers, pu)
		case "coordinator":
			r.coordinator = append(r.coordinator, pu)
		case "other":
			r.others = append(r.others, pu)
		default:
			r.plane[u.Name] = pu
		}
	}
	return r
}

// shardControllers returns the measured controllers the shard binary implements
// (shard --list-controllers). A missing one fails the configuration, naming it, unless
// KSHARD_BENCH_NSLIFE_PARTIAL=1, which runs those it knows (and then times out).
func shardControllers(b *testing.B) []string {
	b.Helper()
	out, err := exec.Command(framework.Binary(b, "shard"), "--list-controllers").Output()
	if err != nil {
		b.Fatalf("shard --list-controllers: %v", err)
	}
	known := strings.Fields(string(out))
	var have, missing []string
	for _, c := range measured {
		if slices.Contains(known, c) {
			have = append(have, c)
		} else {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return have
	}
	msg := fmt.Sprintf("the shard binary does not implement %v (shard --list-controllers: %v): kshard cannot be measured against upstream", missing, known)
	if os.Getenv("KSHARD_BENCH_NSLIFE_PARTIAL") != "1" || len(have) == 0 {
		b.Fatal(msg + " (KSHARD_BENCH_NSLIFE_PARTIAL=1 runs it with the others)")
	}
	b.Logf("%s; KSHARD_BENCH_NSLIFE_PARTIAL=1: running %v only, the phases needing the others will time out", msg, have)
	return have
}

// shardHasFlag reports whether the shard binary takes --name (the root CA bundle flag
// comes with the root-ca-cert-publisher controller).
func shardHasFlag(b *testing.B, name string) bool {
	b.Helper()
	out, _ := exec.Command(framework.Binary(b, "shard"), "--help").CombinedOutput()
	return strings.Contains(string(out), "--"+name+" ") || strings.Contains(string(out), "--"+name+"=")
}

// --- the watch ----------------------------------------------------------------------------

// watch records when each namespace's ServiceAccount and root CA ConfigMap were first
// seen, and when each namespace of the run disappeared, from informers started before the
// namespaces are created or deleted.
type watch struct {
	mu      sync.Mutex
	sa, cm  map[string]time.Time // by namespace
	gone    map[string]time.Time
	sent    map[string]time.Time // when the namespace's create or delete was sent
	stopCh  chan struct{}
	factory []informers.SharedInformerFactory
}

func startWatch(ctx context.Context, b *testing.B, client kubernetes.Interface, run string) *watch {
	b.Helper()
	w := &watch{sa: map[string]time.Time{}, cm: map[string]time.Time{}, gone: map[string]time.Time{},
		sent: map[string]time.Time{}, stopCh: make(chan struct{})}
	byName := func(name string) informers.SharedInformerOption {
		return informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		})
	}
	record := func(m map[string]time.Time) func(obj any) {
		return func(obj any) {
			if o, ok := obj.(metav1.Object); ok && strings.HasPrefix(o.GetNamespace(), run) {
				w.mu.Lock()
				if _, seen := m[o.GetNamespace()]; !seen {
					m[o.GetNamespace()] = time.Now()
				}
				w.mu.Unlock()
			}
		}
	}
	saF := informers.NewSharedInformerFactoryWithOptions(client, 0, byName(defaultSA))
	cmF := informers.NewSharedInformerFactoryWithOptions(client, 0, byName(rootCAConfigMap))
	nsF := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = label + "=" + run
	}))
	w.factory = []informers.SharedInformerFactory{saF, cmF, nsF}
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandlerFuncs
	}{
		{saF.Core().V1().ServiceAccounts().Informer(), cache.ResourceEventHandlerFuncs{AddFunc: record(w.sa)}},
		{cmF.Core().V1().ConfigMaps().Informer(), cache.ResourceEventHandlerFuncs{AddFunc: record(w.cm)}},
		{nsF.Core().V1().Namespaces().Informer(), cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if ns, ok := obj.(*corev1.Namespace); ok {
				w.mu.Lock()
				w.gone[ns.Name] = time.Now()
				w.mu.Unlock()
			}
		}}},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			b.Fatal(err)
		}
	}
	for _, fa := range w.factory {
		fa.Start(w.stopCh)
		for typ, ok := range fa.WaitForCacheSync(ctx.Done()) {
			if !ok {
				b.Fatalf("watch of %v did not sync", typ)
			}
		}
	}
	return w
}

func (w *watch) stop() {
	close(w.stopCh)
	for _, f := range w.factory {
		f.Shutdown()
	}
}

func (w *watch) markSent(ns string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sent[ns] = at
}

// waitFor polls until done holds for every namespace of nss, or fails after timeout
// with how many are not done and a few of their names.
func (w *watch) waitFor(ctx context.Context, what string, nss []string, timeout time.Duration, done func(ns string) bool) error {
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		var left []string
		for _, ns := range nss {
			if !done(ns) {
				left = append(left, ns)
			}
		}
		w.mu.Unlock()
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%d of %d namespaces not %s after %s, e.g. %v", len(left), len(nss), what, timeout, left[:min(5, len(left))])
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (w *watch) waitReady(ctx context.Context, nss []string, timeout time.Duration) error {
	return w.waitFor(ctx, "served (ServiceAccount "+defaultSA+" and ConfigMap "+rootCAConfigMap+")", nss, timeout, func(ns string) bool {
		_, sa := w.sa[ns]
		_, cm := w.cm[ns]
		return sa && cm
	})
}

func (w *watch) waitGone(ctx context.Context, nss []string, timeout time.Duration) error {
	return w.waitFor(ctx, "gone", nss, timeout, func(ns string) bool {
		_, ok := w.gone[ns]
		return ok
	})
}

// readyPhase is phase 1's figures: each namespace is done when both objects were seen.
func (w *watch) readyPhase(nss []string, start time.Time) phase {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.phase(nss, start, func(ns string) time.Time {
		a, c := w.sa[ns], w.cm[ns]
		if a.After(c) {
			return a
		}
		return c
	})
}

func (w *watch) gonePhase(nss []string, start time.Time) phase {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.phase(nss, start, func(ns string) time.Time { return w.gone[ns] })
}

func (w *watch) phase(nss []string, start time.Time, doneAt func(ns string) time.Time) phase {
	var p phase
	lat := make([]time.Duration, 0, len(nss))
	for _, ns := range nss {
		at := doneAt(ns)
		p.took = max(p.took, at.Sub(start))
		lat = append(lat, max(0, at.Sub(w.sent[ns])))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(f*float64(len(lat))))] }
		p.p50, p.p99, p.pmax = q(0.50), q(0.99), lat[len(lat)-1]
	}
	return p
}

// --- the load -----------------------------------------------------------------------------

// createNamespaces creates nss, labelled as the run's, recording in w when each was sent.
func createNamespaces(b *testing.B, client kubernetes.Interface, w *watch, run string, nss []string) {
	b.Helper()
	err := framework.Parallel(len(nss), 32, func(i int) error {
		w.markSent(nss[i], time.Now())
		_, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: nss[i], Labels: map[string]string{label: run, framework.RunLabel: "bench"}}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

func deleteNamespaces(b *testing.B, client kubernetes.Interface, w *watch, nss []string) {
	b.Helper()
	err := framework.Parallel(len(nss), 32, func(i int) error {
		w.markSent(nss[i], time.Now())
		return client.CoreV1().Namespaces().Delete(context.Background(), nss[i], metav1.DeleteOptions{})
	})
	if err != nil {
		b.Fatal(err)
	}
}

// fill creates the objects of every namespace of nss (objectsPerNamespace(perKind) each).
func fill(b *testing.B, f *framework.Framework, client kubernetes.Interface, nss []string, perKind int) {
	b.Helper()
	dyn, err := dynamic.NewForConfig(f.Config)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	err = framework.Parallel(len(nss), 32, func(i int) error {
		ns := nss[i]
		for j := range perKind {
			name := fmt.Sprintf("obj-%d", j)
			if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
				Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
				return err
			}
			if _, err := client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
				StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
				return err
			}
			// Headless: the local control plane's service range has 254 addresses.
			if _, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": name},
					Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
				return err
			}
			if _, err := client.CoreV1().Pods(ns).Create(ctx, pod(name, nil), metav1.CreateOptions{}); err != nil {
				return err
			}
			w := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": widgets.GroupVersion().String(), "kind": "Widget",
				"metadata": map[string]any{"name": name}, "spec": map[string]any{"size": int64(j)}}}
			if _, err := dyn.Resource(widgets).Namespace(ns).Create(ctx, w, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return createDeploymentObjects(ctx, client, ns, perKind)
	})
	if err != nil {
		b.Fatalf("filling namespaces: %v", err)
	}
}

// createDeploymentObjects writes a Deployment, a ReplicaSet it controls and pods that
// ReplicaSet controls, with the owner references the controllers would write.
func createDeploymentObjects(ctx context.Context, client kubernetes.Interface, ns string, pods int) error {
	labels := map[string]string{"app": "web"}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod("", nil).Spec}
	d, err := client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(pods)), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}},
		metav1.CreateOptions{})
	if err != nil {
		return err
	}
	rs, err := client.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-1",
		Labels: labels, OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(pods)), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}},
		metav1.CreateOptions{})
	if err != nil {
		return err
	}
	for j := range pods {
		p := pod(fmt.Sprintf("web-1-%d", j), labels)
		p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}
		if _, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

func pod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}, TerminationGracePeriodSeconds: ptr.To[int64](0)}}
}

// ensureCRD creates the widgets CustomResourceDefinition (once per cluster) and waits until
// it is served.
func ensureCRD(b *testing.B, f *framework.Framework) {
	b.Helper()
	dyn, err := dynamic.NewForConfig(f.Config)
	if err != nil {
		b.Fatal(err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": widgets.Resource + "." + widgets.Group},
		"spec": map[string]any{
			"group": widgets.Group, "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	ctx := context.Background()
	if _, err := dyn.Resource(crds).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatalf("creating the widgets CRD: %v", err)
	}
	framework.Eventually(b, time.Minute, "the widgets CRD served", func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(widgets).Namespace("default").List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
}

// cleanup deletes every namespace of the run with a kube-controller-manager of its own
// running the namespace controller (the run's controllers are stopped, and may not have
// had one), and waits until they are gone.
func cleanup(b *testing.B, f *framework.Framework, client kubernetes.Interface, run string) {
	b.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: label + "=" + run}
	list, err := client.CoreV1().Namespaces().List(ctx, sel)
	if err != nil {
		b.Errorf("cleanup: listing namespaces: %v", err)
		return
	}
	if len(list.Items) == 0 {
		return
	}
	kcm := f.StartKCM(b, "kcm-cleanup-"+run, framework.KCMOptions{Controllers: []string{"namespace"},
		Args: []string{"--kube-api-qps=500", "--kube-api-burst=1000", "--concurrent-namespace-syncs=20"}})
	defer kcm.Kill()
	start := time.Now()
	if err := framework.Parallel(len(list.Items), 32, func(i int) error {
		err := client.CoreV1().Namespaces().Delete(ctx, list.Items[i].Name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}); err != nil {
		b.Errorf("cleanup: deleting namespaces: %v", err)
		return
	}
	for time.Since(start) < cleanupTimeout {
		left, err := client.CoreV1().Namespaces().List(ctx, sel)
		if err == nil && len(left.Items) == 0 {
			b.Logf("cleanup: the run's %d namespaces deleted in %s", len(list.Items), time.Since(start).Round(time.Second))
			return
		}
		time.Sleep(2 * time.Second)
	}
	b.Errorf("cleanup: namespaces of %s not gone after %s", run, cleanupTimeout)
}

// --- reporting ----------------------------------------------------------------------------

func report(b *testing.B, r result, results []result) {
	sum, most := r.peakRSS()
	b.ReportMetric(r.ready.took.Seconds(), "s-to-served")
	b.ReportMetric(r.ready.p99.Seconds(), "served-p99-s")
	b.ReportMetric(r.gone.took.Seconds(), "s-to-gone")
	b.ReportMetric(r.cpu(), "controller-cpu-s")
	b.ReportMetric(sum/(1<<20), "controller-peak-RSS-MiB")
	b.ReportMetric(most/(1<<20), "max-process-peak-RSS-MiB")
	b.ReportMetric(r.plane["kube-apiserver"].cpu, "apiserver-cpu-s")
	if up, ok := upstreamOf(results); ok && r.name != up.name {
		b.ReportMetric(r.ready.took.Seconds()/up.ready.took.Seconds(), "served-vs-upstream")
		b.ReportMetric(r.gone.took.Seconds()/up.gone.took.Seconds(), "gone-vs-upstream")
	}
}

func upstreamOf(results []result) (result, bool) {
	for _, r := range results {
		if r.shards == 0 {
			return r, true
		}
	}
	return result{}, false
}

// summary logs a table of every configuration and writes it to the artifacts folder.
func summary(b *testing.B, s sizes, results []result) {
	if len(results) == 0 {
		return
	}
	up, haveUp := upstreamOf(results)
	ratio := func(x, y time.Duration) string {
		if !haveUp || y == 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f", x.Seconds()/y.Seconds())
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d namespaces created, %d filled (%d objects each) and deleted; --kube-api-qps %s --kube-api-burst %s per controller\n",
		s.namespaces, s.delete, objectsPerNamespace(s.perKind), s.qps, s.burst)
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\tSA+root CA in every new namespace\tvs upstream\tdeleted namespaces gone\tvs upstream\tcontroller CPU-s\tpeak RSS (sum)\tkube-apiserver CPU-s\tetcd CPU-s\tprocesses")
	for _, r := range results {
		sum, _ := r.peakRSS()
		var procs []string
		for _, u := range slices.Concat(r.controllers, r.coordinator, r.others) {
			procs = append(procs, fmt.Sprintf("%s %.0f MiB %.1f CPU-s", u.name, u.peakRSS/(1<<20), u.cpu))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.1f\t%.0f MiB\t%.1f\t%.1f\t%s\n", r.name, r.ready, ratio(r.ready.took, up.ready.took),
			r.gone, ratio(r.gone.took, up.gone.took), r.cpu(), sum/(1<<20), r.plane["kube-apiserver"].cpu, r.plane["etcd"].cpu,
			strings.Join(procs, "; "))
	}
	_ = tw.Flush()
	b.Logf("summary:\n%s", sb.String())
	path := filepath.Join(framework.ArtifactsDir(b), "summary.txt")
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.Error(err)
	}
	b.Logf("summary written to %s", path)
}
