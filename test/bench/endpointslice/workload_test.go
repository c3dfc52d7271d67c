package endpointslice

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

const (
	// label marks the benchmark's namespaces (value: the benchmark's run), so that they
	// are deleted together.
	label = "kshard.io/bench-endpointslice"
	// nodeLabel marks the benchmark's nodes (value: the run).
	nodeLabel = "kshard.io/bench-endpointslice-node"
	// createWorkers bounds the benchmark's own parallel creates and patches.
	createWorkers = 32
	// flipWorkers send the flips; the token bucket paces them.
	flipWorkers = 32
	svcPort     = "http"
)

// zones the nodes are spread over (topology labels, as a real cluster's).
var zones = []string{"zone-a", "zone-b", "zone-c", "zone-d"}

// workload is the benchmark's objects: every pod by key, and what the benchmark last set
// its readiness to.
type workload struct {
	namespaces []string
	services   int // per namespace
	pods       []podRef
	mu         sync.Mutex
	ready      map[string]bool // pod key -> readiness last set
}

type podRef struct{ namespace, name string }

func (p podRef) key() string { return p.namespace + "/" + p.name }

func svcName(i int) string              { return fmt.Sprintf("svc-%02d", i) }
func podName(svc, j int) string         { return fmt.Sprintf("svc-%02d-pod-%03d", svc, j) }
func nodeName(run string, i int) string { return fmt.Sprintf("%s-node-%03d", run, i) }

// podIP is the i-th pod's address: 10.64.0.0/10 holds 4 million.
func podIP(i int) string { return fmt.Sprintf("10.%d.%d.%d", 64+i>>16, (i>>8)&255, i&255) }

// createNodes deletes the nodes an interrupted benchmark left, creates n plain nodes
// (no kwok annotation: nothing else writes their pods) over the zones, and deletes them
// when the benchmark ends. The cluster's own kube-controller-manager runs the node
// lifecycle controller: a node that never reports would be NotReady after its grace
// period (50 s), its pods marked not Ready and, once tainted, evicted, behind the
// benchmark's back. So the benchmark reports for its nodes as a kubelet does: a Ready
// condition once, then a renewal of each node's Lease every leaseRenewPeriod until it ends
// (nodes/20 s writes per second: 25 for the default 500, the same in every
// configuration).
func createNodes(b *testing.B, client kubernetes.Interface, run string, n int) []string {
	b.Helper()
	ctx := context.Background()
	deleteNodes(b, client, nodeLabel)
	b.Cleanup(func() { deleteNodes(b, client, nodeLabel+"="+run) })
	names := make([]string, n)
	for i := range names {
		names[i] = nodeName(run, i)
	}
	leases := make([]*coordinationv1.Lease, n)
	err := framework.Parallel(n, createWorkers, func(i int) error {
		node, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: names[i],
			Labels: map[string]string{"kubernetes.io/hostname": names[i], corev1.LabelTopologyZone: zones[i%len(zones)],
				nodeLabel: run},
		}, Spec: corev1.NodeSpec{Unschedulable: true}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		// A patch: the node lifecycle controller taints a new node at once (a conflict for
		// an update).
		now := metav1.Now()
		ready, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}}})
		if err != nil {
			return err
		}
		if _, err := client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, ready, metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("node %s's Ready condition: %w", node.Name, err)
		}
		leases[i], err = client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: node.Name, Labels: map[string]string{nodeLabel: run},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node.Name), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatalf("creating %d nodes: %v", n, err)
	}
	hbCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		heartbeat(hbCtx, b, client, leases)
	}()
	// Registered after the nodes' deletion, so it runs first (Cleanup is LIFO).
	b.Cleanup(func() { stop(); <-done })
	return names
}

// leaseRenewPeriod is how often the benchmark renews its nodes' Leases: well inside the
// node lifecycle controller's grace period (50 s), as a kubelet's 10 s is.
const leaseRenewPeriod = 20 * time.Second

// heartbeat renews every Lease each leaseRenewPeriod until ctx ends, as the nodes'
// kubelets would (one update each; a conflict reads the Lease again). A renewal that fails
// is logged and tried again at the next period: the node lifecycle controller's grace
// period allows two misses.
func heartbeat(ctx context.Context, b *testing.B, client kubernetes.Interface, leases []*coordinationv1.Lease) {
	api := client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	t := time.NewTicker(leaseRenewPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := framework.Parallel(len(leases), createWorkers, func(i int) error {
			l := leases[i].DeepCopy()
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
			got, err := api.Update(ctx, l, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				got, err = api.Get(ctx, l.Name, metav1.GetOptions{})
			}
			if err != nil {
				return err
			}
			leases[i] = got
			return nil
		}); err != nil && ctx.Err() == nil {
			b.Logf("renewing the nodes' Leases: %v", err)
		}
	}
}

func deleteNodes(b *testing.B, client kubernetes.Interface, selector string) {
	b.Helper()
	ctx := context.Background()
	l, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		b.Errorf("listing nodes %s: %v", selector, err)
		return
	}
	// No garbage collector runs in the cluster's kube-controller-manager (kshard's
	// replaces it): the nodes' Leases go with them here.
	if err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: selector}); err != nil {
		b.Errorf("deleting the Leases of nodes %s: %v", selector, err)
	}
	if err := framework.Parallel(len(l.Items), createWorkers, func(i int) error {
		err := client.CoreV1().Nodes().Delete(ctx, l.Items[i].Name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}); err != nil {
		b.Errorf("deleting nodes %s: %v", selector, err)
	}
}

// createWorkload creates the namespaces (each with its default ServiceAccount: no
// serviceaccount controller runs in the measured processes), their headless Services
// and pods, and sets every pod's status Running and Ready with an address of its own.
func createWorkload(b *testing.B, client kubernetes.Interface, run string, s sizes, nodes []string) *workload {
	b.Helper()
	ctx := context.Background()
	w := &workload{services: s.services, ready: map[string]bool{}}
	for i := range s.namespaces {
		w.namespaces = append(w.namespaces, fmt.Sprintf("%s-%03d", run, i))
	}
	start := time.Now()
	if err := framework.Parallel(len(w.namespaces), createWorkers, func(i int) error {
		return createNamespace(ctx, client, w.namespaces[i], run)
	}); err != nil {
		b.Fatalf("creating namespaces: %v", err)
	}
	type svcRef struct {
		ns  string
		svc int
	}
	var svcs []svcRef
	for _, ns := range w.namespaces {
		for i := range s.services {
			svcs = append(svcs, svcRef{ns, i})
			for j := range s.pods {
				w.pods = append(w.pods, podRef{ns, podName(i, j)})
			}
		}
	}
	if err := framework.Parallel(len(svcs), createWorkers, func(i int) error {
		_, err := client.CoreV1().Services(svcs[i].ns).Create(ctx, newService(svcs[i].svc), metav1.CreateOptions{})
		return err
	}); err != nil {
		b.Fatalf("creating Services: %v", err)
	}
	if err := framework.Parallel(len(w.pods), createWorkers, func(i int) error {
		p := w.pods[i]
		var svc, j int
		if _, err := fmt.Sscanf(p.name, "svc-%d-pod-%d", &svc, &j); err != nil {
			return err
		}
		pod, err := client.CoreV1().Pods(p.namespace).Create(ctx, newPod(p.name, svc, nodes[i%len(nodes)]), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podIP(i), PodIPs: []corev1.PodIP{{IP: podIP(i)}},
			StartTime: &now, Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			}}
		_, err = client.CoreV1().Pods(p.namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	}); err != nil {
		b.Fatalf("creating pods: %v", err)
	}
	for _, p := range w.pods {
		w.ready[p.key()] = true
	}
	b.Logf("%d namespaces, %d Services, %d Running and Ready pods created in %s", len(w.namespaces), len(svcs), len(w.pods),
		time.Since(start).Round(time.Second))
	return w
}

// forceDeletePods deletes the workload's pods with no grace period: their nodes have no
// kubelet to finish a graceful deletion, so their namespaces would stay Terminating.
func (w *workload) forceDeletePods(b *testing.B, client kubernetes.Interface) {
	b.Helper()
	ctx := context.Background()
	if err := framework.Parallel(len(w.namespaces), createWorkers, func(i int) error {
		return client.CoreV1().Pods(w.namespaces[i]).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
	}); err != nil {
		b.Errorf("deleting the pods: %v", err)
	}
}

func createNamespace(ctx context.Context, client kubernetes.Interface, name, run string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: run, framework.RunLabel: "bench"}}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := client.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// newService is a headless Service (the cluster's Service range is small) selecting the
// pods of Service i by a named target port.
func newService(i int) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svcName(i)}, Spec: corev1.ServiceSpec{
		ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"svc": svcName(i)},
		Ports: []corev1.ServicePort{{Name: svcPort, Port: 80, TargetPort: intstr.FromString(svcPort)}},
	}}
}

func newPod(name string, svc int, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"svc": svcName(svc)}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
			Ports: []corev1.ContainerPort{{Name: svcPort, ContainerPort: 8080}}}}}}
}

// readinessPatch is a strategic merge patch of a pod's Ready condition (merged by type).
func readinessPatch(ready bool) []byte {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{
		{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.Now()}}}})
	return p
}

// flip is one readiness change the benchmark made.
type flip struct {
	at    time.Time
	ready bool
}

// flipper flips random pods' readiness at a rate, never a pod whose last flip the watch
// has not seen yet.
type flipper struct {
	w       *workload
	watch   *sliceWatch
	client  kubernetes.Interface
	sent    int
	errs    int
	errLast error
}

// run flips at perSecond for d, and returns when the last flip was sent. The phase's
// deadline ends the pacing, not a request under way: a request cut off may still have
// been applied, and the benchmark would then expect the state it had before.
func (f *flipper) run(ctx context.Context, perSecond int, d time.Duration) {
	lim := rate.NewLimiter(rate.Limit(perSecond), 1)
	paced, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range flipWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lim.Wait(paced) == nil {
				p, ready, ok := f.pick()
				if !ok {
					continue
				}
				f.watch.expect(p.key(), flip{at: time.Now(), ready: ready})
				_, err := f.client.CoreV1().Pods(p.namespace).Patch(ctx, p.name, types.StrategicMergePatchType,
					readinessPatch(ready), metav1.PatchOptions{}, "status")
				mu.Lock()
				f.sent++
				if err != nil {
					f.errs++
					f.errLast = err
				}
				mu.Unlock()
				if err != nil {
					// Whether it was applied is unknown: expect what the pod now says.
					f.watch.cancel(p.key())
					f.w.set(p.key(), f.readyNow(ctx, p, !ready))
				}
			}
		}()
	}
	wg.Wait()
}

// readyNow reads p's Ready condition from the API server; def when it cannot.
func (f *flipper) readyNow(ctx context.Context, p podRef, def bool) bool {
	pod, err := f.client.CoreV1().Pods(p.namespace).Get(ctx, p.name, metav1.GetOptions{})
	if err != nil {
		return def
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return def
}

// pick returns a random pod whose last flip was seen and its new readiness, recording it.
func (f *flipper) pick() (podRef, bool, bool) {
	for range 20 {
		p := f.w.pods[rand.IntN(len(f.w.pods))]
		if f.watch.pending(p.key()) {
			continue
		}
		f.w.mu.Lock()
		ready := !f.w.ready[p.key()]
		f.w.ready[p.key()] = ready
		f.w.mu.Unlock()
		return p, ready, true
	}
	return podRef{}, false, false
}

func (w *workload) set(key string, ready bool) {
	w.mu.Lock()
	w.ready[key] = ready
	w.mu.Unlock()
}

// want returns a copy of the readiness last set of every pod.
func (w *workload) want() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]bool, len(w.ready))
	for k, v := range w.ready {
		out[k] = v
	}
	return out
}
