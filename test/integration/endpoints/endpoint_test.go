package endpoints

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

// The Endpoints controller's labels and annotations (upstream's values).
const (
	epManagedBy     = "endpoints.kubernetes.io/managed-by"
	epControllerVal = "endpoint-controller"
	epLeaderAnno    = "control-plane.alpha.kubernetes.io/leader"
)

// epTimeout bounds every wait for the Endpoints controller.
const epTimeout = 60 * time.Second

// epEnv is one Endpoints test's client and namespace.
type epEnv struct {
	t  *testing.T
	cs kubernetes.Interface
	ns string
}

// newEPEnv gives the test its own namespace; a failed test logs the namespace's Services,
// Endpoints, pods and events first.
func newEPEnv(t *testing.T) *epEnv {
	t.Helper()
	f := framework.Get(t)
	// The API server warns that v1 Endpoints is deprecated on every request.
	cfg := rest.CopyConfig(f.Config)
	cfg.WarningHandler = rest.NoWarnings{}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &epEnv{t: t, cs: cs, ns: f.Namespace(t, nil).Name}
	t.Cleanup(func() {
		if t.Failed() {
			e.dump()
		}
	})
	f.WaitDefaultServiceAccount(t, e.ns)
	return e
}

func (e *epEnv) dump() {
	ctx := context.Background()
	var b strings.Builder
	fmt.Fprintf(&b, "namespace %s at %s; %s\n", e.ns, time.Now().Format(time.RFC3339Nano), framework.RunningControllers(e.t))
	if l, err := e.cs.CoreV1().Endpoints(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, ep := range l.Items {
			fmt.Fprintf(&b, "endpoints %s rv=%s labels=%v annotations=%v %d addresses: %v\n", ep.Name, ep.ResourceVersion, ep.Labels,
				ep.Annotations, len(epFlatten(&ep)), epHead(epFlatten(&ep), 20))
		}
	}
	if l, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for i, p := range l.Items {
			if i < 30 {
				fmt.Fprintf(&b, "pod %s ip=%s phase=%s ready=%v node=%s deleting=%v\n", p.Name, p.Status.PodIP, p.Status.Phase,
					epPodReady(&p), p.Spec.NodeName, p.DeletionTimestamp != nil)
			}
		}
	}
	if l, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, ev := range l.Items {
			fmt.Fprintf(&b, "event %s/%s %s %s x%d from %s: %s\n", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Type,
				ev.Reason, ev.Count, ev.Source.Component, ev.Message)
		}
	}
	e.t.Log(b.String())
}

func epHead(s []string, n int) []string { return s[:min(n, len(s))] }

func epPodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// service creates a Service selecting app=<selector> (nil selector when selector is "").
func (e *epEnv) service(name, selector string, opts ...func(*corev1.Service)) *corev1.Service {
	e.t.Helper()
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"tier": "front"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}}
	if selector != "" {
		s.Spec.Selector = map[string]string{"app": selector}
	}
	for _, o := range opts {
		o(s)
	}
	s, err := e.cs.CoreV1().Services(e.ns).Create(context.Background(), s, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating service %s: %v", name, err)
	}
	return s
}

// epPodSpec is a pod bound to kwok node n (kwok runs it: an IP, Running, Ready) with a
// container port named http.
func epPodSpec(node int, httpPort int32) corev1.PodSpec {
	return corev1.PodSpec{
		NodeName:                      fmt.Sprintf("kwok-node-%d", node%10),
		TerminationGracePeriodSeconds: ptr.To[int64](0),
		Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: httpPort}}}},
	}
}

// pod creates pod name labelled app=<app>, its http port httpPort.
func (e *epEnv) pod(name, app string, httpPort int32, opts ...func(*corev1.Pod)) {
	e.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}}, Spec: epPodSpec(len(name), httpPort)}
	for _, o := range opts {
		o(p)
	}
	if _, err := e.cs.CoreV1().Pods(e.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating pod %s: %v", name, err)
	}
}

// waitPodIPs waits until kwok runs every named pod Ready with an IP, and returns their IPs.
func (e *epEnv) waitPodIPs(names ...string) map[string]string {
	e.t.Helper()
	ips := map[string]string{}
	framework.Eventually(e.t, epTimeout, fmt.Sprintf("pods %v Ready with an IP", names), func(ctx context.Context) (bool, error) {
		l, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range l.Items {
			if p.Status.PodIP != "" && epPodReady(&p) {
				ips[p.Name] = p.Status.PodIP
			}
		}
		for _, n := range names {
			if ips[n] == "" {
				return false, fmt.Errorf("pod %s not Ready with an IP yet", n)
			}
		}
		return true, nil
	})
	return ips
}

// setReady writes the pod's Ready condition.
func (e *epEnv) setReady(name string, ready bool) {
	e.t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodReady {
				p.Status.Conditions[i].Status, p.Status.Conditions[i].LastTransitionTime = status, metav1.Now()
			}
		}
		_, err = e.cs.CoreV1().Pods(e.ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("setting pod %s ready=%v: %v", name, ready, err)
	}
}

// epFlatten lists an Endpoints' (address, port) pairs as "ip pod port/name ready|notready
// [host]", sorted; an address without ports has port 0.
func epFlatten(ep *corev1.Endpoints) []string {
	var out []string
	for _, s := range ep.Subsets {
		ports := s.Ports
		if len(ports) == 0 {
			ports = []corev1.EndpointPort{{}}
		}
		for _, p := range ports {
			add := func(a corev1.EndpointAddress, state string) {
				pod := ""
				if a.TargetRef != nil {
					pod = a.TargetRef.Name
				}
				out = append(out, epAddr(a.IP, pod, p.Port, p.Name, state == "ready", a.Hostname))
			}
			for _, a := range s.Addresses {
				add(a, "ready")
			}
			for _, a := range s.NotReadyAddresses {
				add(a, "notready")
			}
		}
	}
	slices.Sort(out)
	return out
}

func epAddr(ip, pod string, port int32, portName string, ready bool, host string) string {
	state := "notready"
	if ready {
		state = "ready"
	}
	s := fmt.Sprintf("%s %s %d/%s %s", ip, pod, port, portName, state)
	if host != "" {
		s += " host=" + host
	}
	return s
}

// epWant builds a sorted expectation of epFlatten's form.
func epWant(entries ...string) []string {
	slices.Sort(entries)
	return entries
}

// waitEndpoints waits until the Endpoints name exists and holds exactly wantAddrs, and
// returns it.
func (e *epEnv) waitEndpoints(name string, wantAddrs []string) *corev1.Endpoints {
	e.t.Helper()
	var got *corev1.Endpoints
	framework.Eventually(e.t, epTimeout, fmt.Sprintf("endpoints %s/%s holding %v", e.ns, name, wantAddrs), func(ctx context.Context) (bool, error) {
		ep, err := e.cs.CoreV1().Endpoints(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = ep
		if have := epFlatten(ep); !slices.Equal(have, wantAddrs) {
			return false, fmt.Errorf("holds %v", epHead(have, 20))
		}
		return true, nil
	})
	return got
}

// waitEndpointsGone waits until no Endpoints name exists.
func (e *epEnv) waitEndpointsGone(name string) {
	e.t.Helper()
	framework.Eventually(e.t, epTimeout, fmt.Sprintf("endpoints %s/%s gone", e.ns, name), func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().Endpoints(e.ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// wantLabels fails the test unless ep carries the Service's label, the managed-by label,
// and the headless label exactly when headless.
func (e *epEnv) wantLabels(ep *corev1.Endpoints, headless bool) {
	e.t.Helper()
	wantL := map[string]string{"tier": "front", epManagedBy: epControllerVal}
	if headless {
		wantL[corev1.IsHeadlessService] = ""
	}
	if !epMapsEqual(ep.Labels, wantL) {
		e.t.Errorf("endpoints %s labels %v, want %v", ep.Name, ep.Labels, wantL)
	}
}

func epMapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// touchService adds an annotation to the Service: an update event, nothing the
// Endpoints depends on.
func (e *epEnv) touchService(name, value string) {
	e.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"kshard.io/touched":%q}}}`, value)
	if _, err := e.cs.CoreV1().Services(e.ns).Patch(context.Background(), name, "application/merge-patch+json",
		[]byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatalf("touching service %s: %v", name, err)
	}
}

// TestEndpointsFollowPods: a Service's Endpoints lists its Ready pods' addresses on a named
// target port (resolved per pod: a pod serving it on another number is a subset of its
// own) and a numbered one, with the Service's labels and managed-by; a readiness flip moves an address to notReadyAddresses and back; a deleted
// pod, a relabelled pod and a pod of another label are not listed.
func TestEndpointsFollowPods(t *testing.T) {
	t.Parallel()
	e := newEPEnv(t)
	e.service("web", "web", func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9090)})
	})
	e.pod("web-0", "web", 8080)
	e.pod("web-1", "web", 8080)
	e.pod("web-2", "web", 8081)
	e.pod("db-0", "db", 8080)
	ips := e.waitPodIPs("web-0", "web-1", "web-2", "db-0")
	entries := func(pod string, httpPort int32, ready bool) []string {
		return []string{epAddr(ips[pod], pod, httpPort, "http", ready, ""), epAddr(ips[pod], pod, 9090, "metrics", ready, "")}
	}
	all := func(ready1 bool, pods ...string) []string {
		var out []string
		for _, p := range pods {
			port := int32(8080)
			if p == "web-2" {
				port = 8081
			}
			out = append(out, entries(p, port, p != "web-1" || ready1)...)
		}
		return epWant(out...)
	}
	ep := e.waitEndpoints("web", all(true, "web-0", "web-1", "web-2"))
	e.wantLabels(ep, false)
	if _, ok := ep.Annotations[corev1.EndpointsOverCapacity]; ok {
		t.Errorf("annotations %v: over-capacity on a small Endpoints", ep.Annotations)
	}
	// Repacked: http:8080 on web-0 and web-1, http:8081 on web-2, metrics on all three.
	if len(ep.Subsets) != 3 {
		t.Errorf("%d subsets, want 3 (web-2 serves http on another port): %+v", len(ep.Subsets), ep.Subsets)
	}

	e.setReady("web-1", false)
	e.waitEndpoints("web", all(false, "web-0", "web-1", "web-2"))
	e.setReady("web-1", true)
	e.waitEndpoints("web", all(true, "web-0", "web-1", "web-2"))

	if err := e.cs.CoreV1().Pods(e.ns).Delete(context.Background(), "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitEndpoints("web", all(true, "web-1", "web-2"))
	if _, err := e.cs.CoreV1().Pods(e.ns).Patch(context.Background(), "web-2", "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"app":"other"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitEndpoints("web", all(true, "web-1"))
}

// TestEndpointsPublishNotReadyHeadless: a headless Service without ports that publishes
// not-ready addresses lists every pod with an IP as ready, without ports, a pod's hostname
// when its subdomain is the Service; its Endpoints has the headless label. A Service
// without a selector gets no Endpoints from the controller.
func TestEndpointsPublishNotReadyHeadless(t *testing.T) {
	t.Parallel()
	e := newEPEnv(t)
	e.service("db", "db", func(s *corev1.Service) {
		s.Spec.ClusterIP, s.Spec.Ports, s.Spec.PublishNotReadyAddresses = corev1.ClusterIPNone, nil, true
	})
	e.service("manual", "")
	e.pod("db-0", "db", 8080, func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "db-0", "db" })
	e.pod("db-1", "db", 8080, func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "db-1", "elsewhere" })
	ips := e.waitPodIPs("db-0", "db-1")
	e.setReady("db-1", false)
	ep := e.waitEndpoints("db", epWant(epAddr(ips["db-0"], "db-0", 0, "", true, "db-0"), epAddr(ips["db-1"], "db-1", 0, "", true, "")))
	e.wantLabels(ep, true)
	// The selector-less Service's Endpoints is nobody's to write: the one of the Service
	// with a selector, written after it was created, shows the controller got that far.
	if _, err := e.cs.CoreV1().Endpoints(e.ns).Get(context.Background(), "manual", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("endpoints of the Service without a selector: %v, want none", err)
	}
}

// TestEndpointsEditedByHand: an Endpoints whose addresses and managed-by label a user
// changed is written back on the Service's next change (as upstream, which does not watch
// Endpoints updates); a deleted Endpoints is created again at once.
func TestEndpointsEditedByHand(t *testing.T) {
	t.Parallel()
	e := newEPEnv(t)
	e.service("web", "web")
	e.pod("web-0", "web", 8080)
	ips := e.waitPodIPs("web-0")
	wantAddrs := epWant(epAddr(ips["web-0"], "web-0", 8080, "http", true, ""))
	ep := e.waitEndpoints("web", wantAddrs)

	ep.Subsets = []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "10.99.99.99"}},
		Ports: []corev1.EndpointPort{{Name: "http", Port: 1}}}}
	delete(ep.Labels, epManagedBy)
	if _, err := e.cs.CoreV1().Endpoints(e.ns).Update(context.Background(), ep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The Service's next change: touched again at every poll, since a sync that runs
	// before the controller's cache has the edit finds nothing to do (as upstream's).
	touches := 0
	framework.Eventually(t, epTimeout, "endpoints web written back after the Service's change", func(ctx context.Context) (bool, error) {
		touches++
		e.touchService("web", fmt.Sprint(touches))
		got, err := e.cs.CoreV1().Endpoints(e.ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ep = got
		return slices.Equal(epFlatten(got), wantAddrs) && got.Labels[epManagedBy] == epControllerVal, nil
	})
	e.wantLabels(ep, false)

	if err := e.cs.CoreV1().Endpoints(e.ns).Delete(context.Background(), "web", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &ep.UID}}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, epTimeout, "endpoints web created again", func(ctx context.Context) (bool, error) {
		got, err := e.cs.CoreV1().Endpoints(e.ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return got.UID != ep.UID && slices.Equal(epFlatten(got), wantAddrs), nil
	})
}

// TestEndpointsOverCapacity: a Service of 1,001 Ready kwok pods gets an Endpoints of the
// 1,000 addresses that come first in upstream's order (by IP, bytewise) and the
// over-capacity annotation; one pod fewer and the annotation goes, every address listed.
func TestEndpointsOverCapacity(t *testing.T) {
	t.Parallel()
	const n = 1001
	e := newEPEnv(t)
	e.service("big", "big", func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(8080) })
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("big-%04d", i)
	}
	var wg sync.WaitGroup
	work := make(chan string)
	for range 16 {
		wg.Go(func() {
			for name := range work {
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "big"}}, Spec: epPodSpec(len(name)+int(name[7]), 8080)}
				if _, err := e.cs.CoreV1().Pods(e.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
					t.Errorf("creating pod %s: %v", name, err)
				}
			}
		})
	}
	for _, name := range names {
		work <- name
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	ips := e.waitPodIPs(names...)
	type a struct{ ip, pod string }
	var all []a
	for pod, ip := range ips {
		if strings.HasPrefix(pod, "big-") {
			all = append(all, a{ip, pod})
		}
	}
	// Upstream's order: IP bytewise, then pod UID (IPs are kwok's, distinct).
	slices.SortFunc(all, func(x, y a) int { return strings.Compare(x.ip, y.ip) })
	entries := func(as []a) []string {
		var out []string
		for _, x := range as {
			out = append(out, epAddr(x.ip, x.pod, 8080, "http", true, ""))
		}
		return epWant(out...)
	}
	ep := e.waitEndpoints("big", entries(all[:1000]))
	if got := ep.Annotations[corev1.EndpointsOverCapacity]; got != "truncated" {
		t.Errorf("over-capacity annotation %q, want truncated", got)
	}
	// Delete the last one of the order: the same 1,000, now all of them, no annotation.
	last := all[len(all)-1].pod
	if err := e.cs.CoreV1().Pods(e.ns).Delete(context.Background(), last, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, epTimeout, "the over-capacity annotation removed", func(ctx context.Context) (bool, error) {
		ep, err := e.cs.CoreV1().Endpoints(e.ns).Get(ctx, "big", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, over := ep.Annotations[corev1.EndpointsOverCapacity]
		return !over && slices.Equal(epFlatten(ep), entries(all[:1000])), nil
	})
}

// TestEndpointsAcrossHandoff: a namespace moves to another shard (a spare joins, the
// owner gets SIGTERM and hands its partitions over) while a pod's readiness flips and a
// Service is deleted. After the move the new owner has: the Endpoints of the remaining
// Service equal to its pods (the flip included), the deleted Service's Endpoints gone, an
// Endpoints without a Service that no event ever queued (as one left when its Service was
// deleted while no shard worked the namespace) deleted on acquire, and a leader-election
// lock Endpoints kept. Not parallel: it stops one of the package's shards.
func TestEndpointsAcrossHandoff(t *testing.T) {
	c := framework.RunningControllers(t)
	if c.KShard == nil {
		t.Skip("the cluster's kube-controller-manager runs the Endpoints controller: no shards to move a namespace between")
	}
	k := c.KShard
	k.JoinSpare(t)
	e := newEPEnv(t)
	e.service("web", "web")
	e.service("gone", "web")
	e.pod("web-0", "web", 8080)
	e.pod("web-1", "web", 8080)
	ips := e.waitPodIPs("web-0", "web-1")
	both := func(ready1 bool) []string {
		return epWant(epAddr(ips["web-0"], "web-0", 8080, "http", true, ""), epAddr(ips["web-1"], "web-1", 8080, "http", ready1, ""))
	}
	e.waitEndpoints("web", both(true))
	e.waitEndpoints("gone", both(true))
	// Endpoints without a Service: creating one queues nothing (the controller handles
	// only deletes of Endpoints), so only an acquire's leftover check finds it.
	for _, ep := range []*corev1.Endpoints{
		{ObjectMeta: metav1.ObjectMeta{Name: "orphan", Labels: map[string]string{epManagedBy: epControllerVal}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "lock", Annotations: map[string]string{epLeaderAnno: `{"holderIdentity":"x"}`}}},
	} {
		if _, err := e.cs.CoreV1().Endpoints(e.ns).Create(context.Background(), ep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	owner := k.StableOwner(t, e.ns)
	at := time.Now()
	if err := owner.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	e.setReady("web-1", false)
	if err := e.cs.CoreV1().Services(e.ns).Delete(context.Background(), "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	to, seen := k.WaitMoved(t, e.ns, owner, 90*time.Second)
	if exited, err := owner.Wait(90 * time.Second); !exited || err != nil {
		t.Errorf("%s after SIGTERM: exited %v, %v; want a clean exit", owner.Name, exited, err)
	}
	t.Logf("namespace %s handed over %s → %s, seen %s after SIGTERM", e.ns, owner.Name, to.Name, seen.Sub(at).Round(time.Millisecond))

	e.waitEndpoints("web", both(false))
	e.waitEndpointsGone("gone")
	e.waitEndpointsGone("orphan")
	// The new owner works the namespace: a change after the move is reflected.
	e.setReady("web-1", true)
	ep := e.waitEndpoints("web", both(true))
	e.wantLabels(ep, false)
	if _, err := e.cs.CoreV1().Endpoints(e.ns).Get(context.Background(), "lock", metav1.GetOptions{}); err != nil {
		t.Errorf("the leader-election Endpoints after the move: %v, want it kept", err)
	}
}
