//lint:file-ignore SA1019 the Endpoints and mirroring controllers' tests read and write core/v1 Endpoints, deprecated in favour of EndpointSlices.

package endpoints

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

// The helpers of the package's tests: first what the three controllers' tests share (a
// namespace, what a failed test logs, a pod's readiness), then each controller's own
// builders and waits (esEnv: EndpointSlice, epEnv: Endpoints, mirrorEnv: mirroring). The
// three build different Services and pods on purpose: the EndpointSlice tests' pods are
// scheduled and serve a port named "web", the Endpoints tests' are bound to a kwok node
// and serve "http" on a number of the test's choosing, the mirroring tests' Services have
// no selector.

const (
	// waitTimeout bounds every wait for a controller to show a change.
	waitTimeout = 60 * time.Second
	// pauseImage is the image of the tests' pods (kwok runs none).
	pauseImage = "registry.k8s.io/pause:3.10"
)

// env is one test's client and namespace.
type env struct {
	t  *testing.T
	cs kubernetes.Interface
	ns string
}

// newEnv gives the test its own namespace, once the namespace has its default
// ServiceAccount (the API server refuses pods without it), and a client that does not log
// the deprecation warning the API server gives on every v1 Endpoints request. A failed
// test logs the namespace's Endpoints, EndpointSlices, pods and events first.
func newEnv(t *testing.T) *env {
	t.Helper()
	f := framework.Get(t)
	cfg := rest.CopyConfig(f.Config)
	cfg.WarningHandler = rest.NoWarnings{}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, cs: cs, ns: f.Namespace(t, nil).Name}
	t.Cleanup(func() {
		if t.Failed() {
			e.dump()
		}
	})
	f.WaitDefaultServiceAccount(t, e.ns)
	return e
}

// dump logs the namespace's Endpoints, EndpointSlices, first 30 pods and events.
func (e *env) dump() {
	ctx := context.Background()
	var b strings.Builder
	fmt.Fprintf(&b, "namespace %s at %s; %s\n", e.ns, time.Now().Format(time.RFC3339Nano), framework.RunningControllers(e.t))
	if l, err := e.cs.CoreV1().Endpoints(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, ep := range l.Items {
			fmt.Fprintf(&b, "endpoints %s uid=%s rv=%s labels=%v annotations=%v %d addresses: %v\n", ep.Name, ep.UID, ep.ResourceVersion,
				ep.Labels, ep.Annotations, len(epFlatten(&ep)), epHead(epFlatten(&ep), 20))
		}
	}
	if l, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, s := range l.Items {
			fmt.Fprintf(&b, "slice %s gen=%d rv=%s labels=%v owners=%v: %s; endpoints %s\n", s.Name, s.Generation, s.ResourceVersion,
				s.Labels, s.OwnerReferences, describeMirrored(s), strings.Join(endpointsOf(&s), ", "))
		}
	}
	if l, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for i, p := range l.Items {
			if i < 30 {
				fmt.Fprintf(&b, "pod %s ip=%s phase=%s ready=%v node=%s deleting=%v labels=%v\n", p.Name, p.Status.PodIP, p.Status.Phase,
					podReady(&p), p.Spec.NodeName, p.DeletionTimestamp != nil, p.Labels)
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

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// setReady writes the pod's Ready condition through the status subresource, as the
// kubelet would (kwok does not set it again).
func (e *env) setReady(pod string, ready bool) {
	e.t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(context.Background(), pod, metav1.GetOptions{})
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
		e.t.Fatalf("setting pod %s ready=%v: %v", pod, ready, err)
	}
}

// --- EndpointSlice (esEnv) ---

const (
	// esManagedBy is the managed-by label value of the controller's slices.
	esManagedBy = "endpointslice-controller.k8s.io"
	// esHold is a finalizer that keeps a deleted pod terminating (kwok deletes a pod being
	// deleted at once).
	esHold = "kshard.io/e2e-hold"
	// shardMaxEndpointsPerSlice is TestMain's --max-endpoints-per-slice for kshard.
	shardMaxEndpointsPerSlice = 3
)

// esEnv is one EndpointSlice test's namespace, with the EndpointSlice tests' pods,
// Service and waits.
type esEnv struct{ *env }

func newESEnv(t *testing.T) *esEnv { return &esEnv{newEnv(t)} }

// maxEndpointsPerSlice is the limit of whoever runs the controller.
func maxEndpointsPerSlice(t *testing.T) int {
	if framework.RunningControllers(t).KShard != nil {
		return shardMaxEndpointsPerSlice
	}
	return 100 // upstream's default
}

// pod creates a bare pod labelled app=app with a container port named "web" (8080),
// scheduled to a kwok node, which makes it Running and Ready with a pod IP.
func (e *esEnv) pod(name, app string, opts ...func(*corev1.Pod)) {
	e.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: pauseImage,
			Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}},
			TerminationGracePeriodSeconds: ptr.To[int64](0)},
	}
	for _, o := range opts {
		o(p)
	}
	if _, err := e.cs.CoreV1().Pods(e.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating pod %s: %v", name, err)
	}
}

func held(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, esHold) }

// waitReady waits until n pods of app are Ready with an IP.
func (e *esEnv) waitReady(app string, n int) {
	e.t.Helper()
	framework.Eventually(e.t, waitTimeout, fmt.Sprintf("%d ready pods of %s", n, app), func(ctx context.Context) (bool, error) {
		l, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, p := range l.Items {
			if podReady(&p) && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
				ready++
			}
		}
		if ready != n {
			return false, fmt.Errorf("%d ready", ready)
		}
		return true, nil
	})
}

// service creates a Service selecting app=app with a port "http" to the pods' named port
// "web" and a port "metrics" to 9090.
func (e *esEnv) service(name, app string, opts ...func(*corev1.Service)) {
	e.t.Helper()
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": app},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromString("web"), Protocol: corev1.ProtocolTCP},
				{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP},
			},
		},
	}
	for _, o := range opts {
		o(s)
	}
	if _, err := e.cs.CoreV1().Services(e.ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating service %s: %v", name, err)
	}
}

// release removes the test's finalizer from a pod.
func (e *esEnv) release(pod string) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(context.Background(), pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var keep []string
		for _, f := range p.Finalizers {
			if f != esHold {
				keep = append(keep, f)
			}
		}
		p.Finalizers = keep
		_, err = e.cs.CoreV1().Pods(e.ns).Update(context.Background(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("releasing pod %s: %v", pod, err)
	}
}

// slices returns the controller's slices of svc, sorted by name.
func (e *esEnv) slices(ctx context.Context, svc string) ([]discoveryv1.EndpointSlice, error) {
	l, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + svc + "," + discoveryv1.LabelManagedBy + "=" + esManagedBy})
	if err != nil {
		return nil, err
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
	return l.Items, nil
}

// cond is an endpoint's conditions as "ready/serving/terminating".
func cond(ready, serving, terminating bool) string {
	return fmt.Sprintf("%v/%v/%v", ready, serving, terminating)
}

// want is what a Service's slices must hold: its endpoints by pod name, and the ports.
type want struct {
	endpoints map[string]string // pod → cond(...)
	ports     string            // portsOf
}

// defaultPorts are the ports of service(): http resolved to the pods' "web" port.
const defaultPorts = "http/TCP/8080 metrics/TCP/9090"

// check compares a Service's slices with w, and checks what every slice of the
// controller must be: its owner, IPv4, within the per-slice limit, each pod in one slice
// only; a Service always has at least one (the placeholder when it has no endpoints).
func (e *esEnv) check(svc string, slices []discoveryv1.EndpointSlice, w want, max int) error {
	if len(slices) == 0 {
		return fmt.Errorf("no slices")
	}
	got := map[string]string{}
	for _, s := range slices {
		if s.DeletionTimestamp != nil {
			return fmt.Errorf("slice %s is being deleted", s.Name)
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Service" || s.OwnerReferences[0].Name != svc ||
			!ptr.Deref(s.OwnerReferences[0].Controller, false) {
			return fmt.Errorf("slice %s owners %v", s.Name, s.OwnerReferences)
		}
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			return fmt.Errorf("slice %s address type %s", s.Name, s.AddressType)
		}
		if len(s.Endpoints) > max {
			return fmt.Errorf("slice %s has %d endpoints, more than %d", s.Name, len(s.Endpoints), max)
		}
		if len(s.Endpoints) > 0 && portsOf(&s) != w.ports {
			return fmt.Errorf("slice %s ports %q, want %q", s.Name, portsOf(&s), w.ports)
		}
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil {
				return fmt.Errorf("slice %s: endpoint %v without a pod", s.Name, ep.Addresses)
			}
			if _, dup := got[ep.TargetRef.Name]; dup {
				return fmt.Errorf("pod %s in two endpoints", ep.TargetRef.Name)
			}
			got[ep.TargetRef.Name] = cond(ptr.Deref(ep.Conditions.Ready, false), ptr.Deref(ep.Conditions.Serving, false),
				ptr.Deref(ep.Conditions.Terminating, false))
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(w.endpoints) {
		return fmt.Errorf("endpoints %v, want %v", got, w.endpoints)
	}
	return nil
}

// waitSlices waits until svc's slices pass check with w, and returns them.
func (e *esEnv) waitSlices(svc string, w want) []discoveryv1.EndpointSlice {
	e.t.Helper()
	max := maxEndpointsPerSlice(e.t)
	var out []discoveryv1.EndpointSlice
	framework.Eventually(e.t, waitTimeout, "slices of "+svc, func(ctx context.Context) (bool, error) {
		s, err := e.slices(ctx, svc)
		if err != nil {
			return false, err
		}
		if err := e.check(svc, s, w, max); err != nil {
			return false, err
		}
		out = s
		return true, nil
	})
	return out
}

func portsOf(s *discoveryv1.EndpointSlice) string {
	var out []string
	for _, p := range s.Ports {
		out = append(out, fmt.Sprintf("%s/%s/%d", ptr.Deref(p.Name, ""), ptr.Deref(p.Protocol, ""), ptr.Deref(p.Port, 0)))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func endpointsOf(s *discoveryv1.EndpointSlice) []string {
	var out []string
	for _, ep := range s.Endpoints {
		name := "?"
		if ep.TargetRef != nil {
			name = ep.TargetRef.Name
		}
		out = append(out, fmt.Sprintf("%s %v %s", name, ep.Addresses, cond(ptr.Deref(ep.Conditions.Ready, false),
			ptr.Deref(ep.Conditions.Serving, false), ptr.Deref(ep.Conditions.Terminating, false))))
	}
	return out
}

// readyAll is want's endpoints for pods all ready.
func readyAll(pods ...string) map[string]string {
	out := map[string]string{}
	for _, p := range pods {
		out[p] = cond(true, true, false)
	}
	return out
}

// generations sums the slices' generations and lists their UIDs: a write of a slice's
// endpoints raises its generation by one.
func generations(slices []discoveryv1.EndpointSlice) (int64, []string) {
	var sum int64
	var uids []string
	for _, s := range slices {
		sum += s.Generation
		uids = append(uids, string(s.UID))
	}
	sort.Strings(uids)
	return sum, uids
}

// --- Endpoints (epEnv) ---

// The Endpoints controller's labels and annotations (upstream's values).
const (
	epManagedBy     = "endpoints.kubernetes.io/managed-by"
	epControllerVal = "endpoint-controller"
	epLeaderAnno    = "control-plane.alpha.kubernetes.io/leader"
)

// epEnv is one Endpoints test's namespace, with the Endpoints tests' pods, Service and
// waits.
type epEnv struct{ *env }

func newEPEnv(t *testing.T) *epEnv { return &epEnv{newEnv(t)} }

func epHead(s []string, n int) []string { return s[:min(n, len(s))] }

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
		Containers: []corev1.Container{{Name: "main", Image: pauseImage,
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
	framework.Eventually(e.t, waitTimeout, fmt.Sprintf("pods %v Ready with an IP", names), func(ctx context.Context) (bool, error) {
		l, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range l.Items {
			if p.Status.PodIP != "" && podReady(&p) {
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
	framework.Eventually(e.t, waitTimeout, fmt.Sprintf("endpoints %s/%s holding %v", e.ns, name, wantAddrs), func(ctx context.Context) (bool, error) {
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
	framework.Eventually(e.t, waitTimeout, fmt.Sprintf("endpoints %s/%s gone", e.ns, name), func(ctx context.Context) (bool, error) {
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
	if !maps.Equal(ep.Labels, wantL) {
		e.t.Errorf("endpoints %s labels %v, want %v", ep.Name, ep.Labels, wantL)
	}
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

// --- mirroring (mirrorEnv) ---

// mirrorManagedBy is the managed-by label value of the mirroring controller's slices.
const mirrorManagedBy = "endpointslicemirroring-controller.k8s.io"

// mirrorEnv is one mirroring test's namespace, with the mirroring tests' Services,
// Endpoints and waits.
type mirrorEnv struct{ *env }

func newMirrorEnv(t *testing.T) *mirrorEnv { return &mirrorEnv{newEnv(t)} }

// service creates a Service with port http/80, without a selector when selector is nil.
func (e *mirrorEnv) service(name string, selector map[string]string) *corev1.Service {
	e.t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	out, err := e.cs.CoreV1().Services(e.ns).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// endpoints creates an Endpoints, as a user or another controller writes one for a
// Service without a selector.
func (e *mirrorEnv) endpoints(ep *corev1.Endpoints) *corev1.Endpoints {
	e.t.Helper()
	out, err := e.cs.CoreV1().Endpoints(e.ns).Create(context.Background(), ep, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// updateEndpoints changes the Endpoints name with change, retrying conflicts.
func (e *mirrorEnv) updateEndpoints(name string, change func(*corev1.Endpoints)) *corev1.Endpoints {
	e.t.Helper()
	var out *corev1.Endpoints
	framework.Eventually(e.t, waitTimeout, "Endpoints "+name+" updated", func(ctx context.Context) (bool, error) {
		ep, err := e.cs.CoreV1().Endpoints(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		change(ep)
		out, err = e.cs.CoreV1().Endpoints(e.ns).Update(ctx, ep, metav1.UpdateOptions{})
		return err == nil, err
	})
	return out
}

// mirrored returns the mirroring controller's slices of name.
func (e *mirrorEnv) mirrored(ctx context.Context, name string) ([]discoveryv1.EndpointSlice, error) {
	l, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + name + "," + discoveryv1.LabelManagedBy + "=" + mirrorManagedBy})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// waitMirrored waits until the mirrored slices of name are exactly want (describeMirrored
// of each, in any order) and returns them.
func (e *mirrorEnv) waitMirrored(name, what string, want ...string) []discoveryv1.EndpointSlice {
	e.t.Helper()
	if want == nil {
		want = []string{}
	}
	sort.Strings(want)
	var out []discoveryv1.EndpointSlice
	framework.Eventually(e.t, waitTimeout, "slices of "+name+": "+what, func(ctx context.Context) (bool, error) {
		ss, err := e.mirrored(ctx, name)
		if err != nil {
			return false, err
		}
		got := []string{}
		for _, s := range ss {
			got = append(got, describeMirrored(s))
		}
		sort.Strings(got)
		if !reflect.DeepEqual(got, want) {
			return false, fmt.Errorf("slices %q, want %q", got, want)
		}
		out = ss
		return true, nil
	})
	return out
}

// describeMirrored summarises a slice as "addressType [name/port/protocol ...] ip:ready[@target][/node][#hostname] ...",
// ports and endpoints sorted (the order of the ports is upstream's hash order, which the
// unit tests check).
func describeMirrored(s discoveryv1.EndpointSlice) string {
	var ports []string
	for _, p := range s.Ports {
		ports = append(ports, fmt.Sprintf("%s/%d/%s", ptr.Deref(p.Name, ""), ptr.Deref(p.Port, 0), ptr.Deref(p.Protocol, "")))
	}
	sort.Strings(ports)
	var eps []string
	for _, ep := range s.Endpoints {
		d := fmt.Sprintf("%s:%v", strings.Join(ep.Addresses, ","), ptr.Deref(ep.Conditions.Ready, false))
		if ep.TargetRef != nil {
			d += "@" + ep.TargetRef.Name
		}
		if ep.NodeName != nil {
			d += "/" + *ep.NodeName
		}
		if ep.Hostname != nil {
			d += "#" + *ep.Hostname
		}
		eps = append(eps, d)
	}
	sort.Strings(eps)
	return fmt.Sprintf("%s [%s] %s", s.AddressType, strings.Join(ports, " "), strings.Join(eps, " "))
}

func mirrorAddr(ip string) corev1.EndpointAddress { return corev1.EndpointAddress{IP: ip} }

// simpleEndpoints is an Endpoints of one subset with port http/80.
func simpleEndpoints(name string, ready []string, notReady []string) *corev1.Endpoints {
	var r, n []corev1.EndpointAddress
	for _, ip := range ready {
		r = append(r, mirrorAddr(ip))
	}
	for _, ip := range notReady {
		n = append(n, mirrorAddr(ip))
	}
	return &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: name},
		Subsets: []corev1.EndpointSubset{{Addresses: r, NotReadyAddresses: n,
			Ports: []corev1.EndpointPort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}}
}
